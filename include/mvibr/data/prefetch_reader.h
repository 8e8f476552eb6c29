// The training data of one rank: its shards, in a deterministic per-epoch order, read ahead by
// one I/O thread that owns every HDF5 call (HDF5 is not thread-safe) into a bounded queue, so
// the training loop takes a ready sample instead of waiting on the disk. The cursor (epoch,
// position) says exactly where the stream is; a reader built at a saved cursor continues the
// identical stream, which is what checkpoints store.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/data/dynibar_sources.h"
#include "mvibr/data/scene.h"

namespace mvibr::data {

struct ReaderCursor {
  uint64_t epoch = 0;
  uint64_t position = 0;  // samples of this epoch already handed out
  bool operator==(const ReaderCursor& o) const {
    return epoch == o.epoch && position == o.position;
  }
};

struct ReaderOptions {
  std::string data_dir;  // the folder `mvibr prep` wrote
  int rank = 0, world_size = 1;
  uint64_t seed = 0;
  int num_source_views = 10;
  // Sources are drawn from the first source_pool neighbours of the target (IBRNet samples its
  // sources from a pool of the nearest views); 0 means num_source_views, i.e. the nearest.
  int source_pool = 0;
  int queue_depth = 4;
  // Every stride-th sample of the stream from the start cursor on: ranks that share one stream
  // (evaluation) each start at their own offset and read only their own samples.
  int stride = 1;
  Split split = Split::kTrain;
  bool shuffle = true;
  // Fewer shards than ranks is an error unless allowed; then ranks share shards round-robin.
  bool allow_shared_shards = false;
  // DynIBaR's sources (dynibar_sources.h) instead of num_source_views from the pool: the whole
  // neighbour list is the pool, and the sample carries the target's motion data and every
  // source's masks. The anchor's reach grows by a frame every anchor_growth_steps samples after
  // the first anchor_growth_start, up to dynibar.anchor_max_step (a rank reads a sample a step:
  // train.py's min(3, epoch // init_decay_epoch + 1) of its main loop); 0: the whole reach at once.
  bool dynibar_sources = false;
  // The target's motion data too (flows, disparity, masks; evaluation's regional scores), where
  // the shards have it. DynIBaR's sources always load it.
  bool target_motion = false;
  DynibarSourceOptions dynibar;
  uint64_t anchor_growth_steps = 0, anchor_growth_start = 0;
};

// Which of a sample's sources serve DynIBaR's three source sets: positions in
// TrainingSample::sources (each frame read once), -1 where a dynamic offset has no frame.
struct DynibarSourceSets {
  std::array<int, kFlowCount> dynamic;
  int same_time = -1;    // the frame at the target's time (DynibarSources::same_time)
  int anchor_time = -1;  // -1: no anchor (a video of one frame)
  std::vector<int> anchor, static_views;
};

// One target view with its source views, pixels included.
struct TrainingSample {
  int target_view = -1;  // global view index
  View target;
  std::vector<int> source_views;
  std::vector<View> sources;
  ReaderCursor cursor;  // where this sample sits in the stream
  // With dynibar_sources: the sets, the target's View::motion filled, and every source's motion
  // and static masks (View::motion's two masks; its flows and disparity stay empty).
  std::optional<DynibarSourceSets> dynibar;
};

class PrefetchReader {
 public:
  // Opens this rank's shards (in the I/O thread) and starts reading ahead at `start`.
  // Throws InvalidArgument for bad options, missing or corrupt files, or no samples.
  explicit PrefetchReader(const ReaderOptions& options, ReaderCursor start = {});
  ~PrefetchReader();
  PrefetchReader(const PrefetchReader&) = delete;
  PrefetchReader& operator=(const PrefetchReader&) = delete;

  // The next sample, waiting for the I/O thread if it is behind; rethrows its errors.
  TrainingSample next();
  // The cursor of the sample next() returns next: save it, and a reader built with it
  // continues from exactly there.
  ReaderCursor cursor() const;
  size_t samples_per_epoch() const;
  const std::vector<int>& shards() const;  // the shard indices this rank reads
  // Samples read ahead, waiting for next() (at most queue_depth).
  size_t samples_ready() const;
  // Seconds next() has spent waiting for data, in total (none when a sample was ready).
  double wait_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The shards a rank reads: s with s % world_size == rank. With fewer shards than ranks this is
// an error naming both counts, unless allow_shared, when rank r reads shard r % n_shards.
std::vector<int> shards_for_rank(int n_shards, int rank, int world_size, bool allow_shared);

}  // namespace mvibr::data
