// What `mvibr bench io` measures on one rank's shards: a plain read() of the files' bytes, the
// frames ShardReader decodes from them, the samples the prefetching reader delivers, and how long
// a training loop with a given step time still waits for it. The files are read once before the
// measurements (the page cache cannot be dropped without root), so both reads are measured warm:
// the ratio is HDF5's and the checksum's cost over memcpy-speed I/O, not the disk's speed.
#pragma once

#include <string>
#include <vector>

#include "mvibr/data/prefetch_reader.h"

namespace mvibr::bench {

struct ReadRate {
  long long frames = 0;  // frames decoded (0 for a plain read)
  double bytes = 0;      // pixel bytes of those frames, or the files' bytes for a plain read
  double seconds = 0;
  double gbs() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double frames_per_second() const { return seconds > 0 ? double(frames) / seconds : 0; }
};

// The fraction of the files' pages that are in the page cache now (mincore), in [0, 1].
double page_cache_resident_fraction(const std::vector<std::string>& files);

// Whole passes of read() in 1 MiB blocks over every file until `seconds` have passed; at least
// one pass.
ReadRate plain_read(const std::vector<std::string>& files, double seconds);

// Whole passes of ShardReader::read_frame (checksum verified) over every frame of every shard,
// opened before the clock starts, until `seconds` have passed; at least one pass.
ReadRate shard_read(const std::vector<std::string>& shard_files, double seconds);

// Samples taken from a PrefetchReader as fast as it delivers them, from the second sample (the
// first waits for the shards to open) until `seconds` have passed; at least one. Frames count the
// target and its sources. A frame read for an earlier sample may still be in HDF5's chunk cache
// (1 MB per shard), so on small frames this can beat shard_read's sequential passes.
ReadRate prefetch_read(const data::ReaderOptions& options, double seconds);

struct PrefetchWait {
  int samples = 0;  // measured samples, after the first
  double first_sample_seconds = 0;
  double wait_seconds_per_sample = 0;
};

// A consumer that spends `step_seconds` (asleep) on every sample, as a training step would: the
// time next() still waits per sample, over `samples` samples after the first.
PrefetchWait prefetch_wait(const data::ReaderOptions& options, double step_seconds, int samples);

}  // namespace mvibr::bench
