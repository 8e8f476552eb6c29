#include "mvibr/bench/io_benchmark.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"

namespace mvibr::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An open file descriptor, closed on every path out.
struct File {
  explicit File(const std::string& path) : fd(::open(path.c_str(), O_RDONLY)) {
    if (fd < 0) throw InvalidArgument(path + ": cannot open");
  }
  ~File() { ::close(fd); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd;
};

size_t file_size(const File& file, const std::string& path) {
  struct stat status {};
  if (::fstat(file.fd, &status) != 0) throw RuntimeFailure(path + ": cannot stat");
  return size_t(status.st_size);
}

}  // namespace

double page_cache_resident_fraction(const std::vector<std::string>& files) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  size_t pages = 0, resident = 0;
  for (const std::string& path : files) {
    const File file(path);
    const size_t size = file_size(file, path);
    if (size == 0) continue;
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd, 0);
    if (map == MAP_FAILED) throw RuntimeFailure(path + ": cannot map");
    std::vector<unsigned char> in_core((size + page - 1) / page);
    const int status = ::mincore(map, size, in_core.data());
    ::munmap(map, size);
    if (status != 0) throw RuntimeFailure(path + ": mincore failed");
    pages += in_core.size();
    for (unsigned char c : in_core) resident += c & 1;
  }
  return pages > 0 ? double(resident) / double(pages) : 1.0;
}

ReadRate plain_read(const std::vector<std::string>& files, double seconds) {
  std::vector<char> buffer(size_t(1) << 20);
  ReadRate rate;
  const Clock::time_point start = Clock::now();
  do {
    for (const std::string& path : files) {
      const File file(path);
      ssize_t got = 0;
      while ((got = ::read(file.fd, buffer.data(), buffer.size())) > 0) rate.bytes += double(got);
      if (got < 0) throw RuntimeFailure(path + ": read failed");
    }
    rate.seconds = seconds_since(start);
  } while (rate.seconds < seconds);
  return rate;
}

ReadRate shard_read(const std::vector<std::string>& shard_files, double seconds) {
  std::vector<data::ShardReader> shards;
  size_t largest_frame = 0;
  for (const std::string& path : shard_files) {
    shards.emplace_back(path);
    largest_frame =
        std::max(largest_frame, size_t(shards.back().width()) * shards.back().height() * 3);
  }
  std::vector<uint8_t> rgb(largest_frame);
  ReadRate rate;
  const Clock::time_point start = Clock::now();
  do {
    for (const data::ShardReader& shard : shards) {
      const double frame_bytes = double(shard.width()) * shard.height() * 3;
      for (int f = 0; f < shard.n_frames(); ++f) {
        shard.read_frame(f, rgb.data());
        rate.bytes += frame_bytes;
      }
      rate.frames += shard.n_frames();
    }
    rate.seconds = seconds_since(start);
  } while (rate.seconds < seconds);
  return rate;
}

ReadRate prefetch_read(const data::ReaderOptions& options, double seconds) {
  data::PrefetchReader reader(options);
  reader.next();
  ReadRate rate;
  const Clock::time_point start = Clock::now();
  do {
    const data::TrainingSample sample = reader.next();
    rate.frames += 1 + static_cast<long long>(sample.sources.size());
    rate.bytes += double(sample.target.rgb.size());
    for (const data::View& source : sample.sources) rate.bytes += double(source.rgb.size());
    rate.seconds = seconds_since(start);
  } while (rate.seconds < seconds);
  return rate;
}

PrefetchWait prefetch_wait(const data::ReaderOptions& options, double step_seconds, int samples) {
  data::PrefetchReader reader(options);
  reader.next();  // read with nothing to hide behind: reported on its own
  PrefetchWait wait;
  wait.first_sample_seconds = reader.wait_seconds();
  const auto step = std::chrono::duration<double>(step_seconds);
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(step);
    reader.next();
  }
  wait.samples = samples;
  wait.wait_seconds_per_sample =
      samples > 0 ? (reader.wait_seconds() - wait.first_sample_seconds) / samples : 0;
  return wait;
}

}  // namespace mvibr::bench
