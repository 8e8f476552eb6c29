// The run directory's lock and stop requests (see run_directory.h).
//
// The lock is an open-file-description lock (F_OFD_SETLK): it belongs to the open file, not the
// process, so HDF5 opening and closing other files never drops it, a second holder in the same
// process is refused like one elsewhere, and the kernel (or the NFS server) releases it when the
// holder dies, however it dies. That is what makes a temporary without a holder provably stale.
#include "mvibr/train/run_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/train/checkpoint.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

constexpr char kStopFile[] = "STOP";
constexpr char kLockFile[] = ".train.lock";

bool all_digits(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "an unknown host";
  return host;
}

void remove_stale_temporaries(const std::string& run_dir, std::ostream& log) {
  std::error_code error;
  std::vector<std::string> removed;
  uintmax_t bytes = 0;
  for (fs::directory_iterator it(fs::path(run_dir) / "checkpoints", error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!train::is_checkpoint_temporary(name) || !it->is_regular_file(error)) continue;
    const uintmax_t size = it->file_size(error);
    if (fs::remove(it->path(), error)) {
      removed.push_back(name);
      bytes += error ? 0 : size;
    }
  }
  if (removed.empty()) return;
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  log << "removed " << removed.size() << " checkpoint temporar"
      << (removed.size() == 1 ? "y" : "ies") << " (" << size << ": ";
  for (size_t i = 0; i < removed.size(); ++i) log << (i ? ", " : "") << removed[i];
  log << ") left in " << run_dir << "/checkpoints by a writer that did not finish\n";
}

}  // namespace

std::string stop_request_path(const std::string& run_dir) {
  return (fs::path(run_dir) / kStopFile).string();
}

void write_stop_request(const std::string& run_dir, std::optional<uint64_t> after_step,
                        bool create) {
  std::error_code error;
  if (create) fs::create_directories(run_dir, error);
  if (!fs::is_directory(run_dir)) throw InvalidArgument(run_dir + ": no such run directory");
  write_file_atomically(stop_request_path(run_dir),
                        after_step ? std::to_string(*after_step) + "\n" : std::string());
}

std::optional<uint64_t> read_stop_request(const std::string& run_dir, std::ostream& log) {
  const std::string path = stop_request_path(run_dir);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text, '\0');
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (begin == end) return 0;
  if (all_digits(text, begin, end) && end - begin <= 19) {
    return std::stoull(text.substr(begin, end - begin));
  }
  log << "warning: " << path << " holds '" << text.substr(begin, std::min<size_t>(40, end - begin))
      << "', not a step number: stopping after this step\n";
  return 0;
}

void clear_stop_request(const std::string& run_dir) {
  std::error_code error;
  fs::remove(stop_request_path(run_dir), error);
}

RunDirectoryLock::RunDirectoryLock(const std::string& run_dir, std::ostream& log) {
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error)
    throw RuntimeFailure(run_dir + ": cannot create the run directory: " + error.message());
  const std::string path = (fs::path(run_dir) / kLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeFailure(path + ": cannot open: " + std::strerror(errno));
  struct flock whole = {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (::fcntl(fd_, F_OFD_SETLK, &whole) != 0) {
    const int why = errno;
    if (why == EAGAIN || why == EACCES) {
      std::ifstream holder(path);
      std::string who;
      std::getline(holder, who);
      ::close(fd_);
      fd_ = -1;
      throw InvalidArgument(run_dir + " is being trained by another mvibr train (" +
                            (who.empty() ? std::string("a process starting") : who) +
                            "); give this run another expname or basedir");
    }
    log << "note: " << path << ": the file system takes no locks (" << std::strerror(why)
        << "): checkpoint temporaries of killed writers are not removed here\n";
    return;
  }
  const std::string who = "pid " + std::to_string(::getpid()) + " on " + host_name() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != ssize_t(who.size())) {
    log << "note: " << path << ": cannot record this process as the holder\n";
  }
  remove_stale_temporaries(run_dir, log);
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays, empty of meaning
}

}  // namespace mvibr::train
