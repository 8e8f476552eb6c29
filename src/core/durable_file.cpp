// fsync for the atomic writers (see durable_file.h).
#include "mvibr/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "mvibr/core/error.h"

namespace mvibr {

void sync_to_disk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    if (fd >= 0) ::close(fd);
    throw RuntimeFailure(path + ": cannot fsync");
  }
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), std::streamsize(contents.size()));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      throw RuntimeFailure(path + ": cannot write");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw RuntimeFailure(path + ": cannot rename " + temporary + " into place");
  }
}

}  // namespace mvibr
