// fsync for the atomic writers (see durable_file.h).
#include "mvibr/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

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

}  // namespace mvibr
