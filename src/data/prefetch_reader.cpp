// The per-rank prefetching reader (see prefetch_reader.h). Order and source choice are pure
// functions of (seed, epoch, shards, position) through Philox, so a stream restarted at a cursor
// is the same stream, on any machine.
#include "mvibr/data/prefetch_reader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "mvibr/core/error.h"
#include "mvibr/core/philox.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {

namespace fs = std::filesystem;

std::vector<int> shards_for_rank(int n_shards, int rank, int world_size, bool allow_shared) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is outside a world of " +
                          std::to_string(world_size));
  }
  if (n_shards < world_size) {
    if (!allow_shared) {
      throw InvalidArgument("the data set has " + std::to_string(n_shards) + " shards for " +
                            std::to_string(world_size) +
                            " ranks; prep at least as many shards as ranks, or allow shared "
                            "shards");
    }
    return {rank % n_shards};
  }
  std::vector<int> mine;
  for (int s = rank; s < n_shards; s += world_size) mine.push_back(s);
  return mine;
}

namespace {

constexpr uint32_t kShuffleStream = 0x5348u;  // "SH"
constexpr uint32_t kSourceStream = 0x5352u;   // "SR"

uint32_t draw(uint64_t seed, uint32_t stream, uint64_t epoch, uint32_t a, uint32_t b) {
  const Philox4x32 counter{{a, b, uint32_t(epoch), (uint32_t(epoch >> 32) << 16) ^ stream}};
  return philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32)).v[0];
}

// A uniform index in [0, n) from 32 random bits (multiply-shift; n is small).
uint32_t below(uint32_t random, uint32_t n) {
  return uint32_t((uint64_t(random) * n) >> 32);
}

struct Item {
  int shard;  // position in the rank's list of shards
  int target;
};

// A frame's metadata and pixels.
View load_frame(const ShardReader& shard, int frame) {
  View view = shard.frame(frame);
  view.rgb.resize(size_t(shard.width()) * shard.height() * 3);
  shard.read_frame(frame, view.rgb.data());
  return view;
}

}  // namespace

struct PrefetchReader::State {
  ReaderOptions options;
  std::vector<int> shard_ids;
  std::vector<Item> items;  // this rank's targets of the chosen split, in file order

  std::thread io;
  mutable std::mutex mutex;
  std::condition_variable not_full, not_empty;
  std::deque<TrainingSample> queue;
  std::exception_ptr error;
  bool stopping = false;
  ReaderCursor next_cursor;  // of the sample next() returns next
  double waited = 0;

  // The epoch's order: Fisher-Yates driven by Philox keyed by (seed, epoch, first shard). Keyed
  // by the shards and not the rank, so ranks that share shards (allow_shared_shards) take the
  // same target views and split their rays, and 1 rank of 2B rays meets the same samples as 2
  // ranks of B: the equivalence data parallelism is checked by.
  std::vector<uint32_t> order(uint64_t epoch) const {
    std::vector<uint32_t> o(items.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = uint32_t(i);
    if (!options.shuffle) return o;
    for (size_t i = o.size(); i > 1; --i) {
      const uint32_t j =
          below(draw(options.seed, kShuffleStream, epoch, uint32_t(i), uint32_t(shard_ids[0])),
                uint32_t(i));
      std::swap(o[i - 1], o[j]);
    }
    return o;
  }

  // Which of the target's neighbours serve as its sources: the nearest when not shuffling,
  // else a random subset of the pool, kept in nearest-first order.
  std::vector<int> choose_sources(const std::vector<int>& neighbours, ReaderCursor at) const {
    const size_t wanted = size_t(options.num_source_views);
    size_t pool = options.source_pool > 0 ? size_t(options.source_pool) : wanted;
    pool = std::min(pool, neighbours.size());
    std::vector<int> candidates(neighbours.begin(), neighbours.begin() + long(pool));
    if (!options.shuffle || candidates.size() <= wanted) {
      candidates.resize(std::min(candidates.size(), wanted));
      return candidates;
    }
    std::vector<int> picked_rank(candidates.size());
    for (size_t i = 0; i < picked_rank.size(); ++i) picked_rank[i] = int(i);
    for (size_t i = 0; i < wanted; ++i) {  // partial Fisher-Yates: the first `wanted` are picked
      const uint32_t j = uint32_t(i) + below(draw(options.seed, kSourceStream, at.epoch,
                                                  uint32_t(at.position), uint32_t(i)),
                                             uint32_t(picked_rank.size() - i));
      std::swap(picked_rank[i], picked_rank[j]);
    }
    picked_rank.resize(wanted);
    std::sort(picked_rank.begin(), picked_rank.end());
    std::vector<int> sources;
    for (int r : picked_rank) sources.push_back(candidates[size_t(r)]);
    return sources;
  }

  // `steps` samples on from `at`, into the following epochs past an epoch's end.
  ReaderCursor advance(ReaderCursor at, size_t steps) const {
    at.position += steps;
    while (at.position >= items.size()) {
      at.position -= items.size();
      ++at.epoch;
    }
    return at;
  }

  void run(ReaderCursor start, std::promise<void>* opened) {
    std::vector<ShardReader> shards;
    try {
      const SceneIndex index = read_scene_index(options.data_dir);
      shard_ids = shards_for_rank(index.n_shards, options.rank, options.world_size,
                                  options.allow_shared_shards);
      for (size_t k = 0; k < shard_ids.size(); ++k) {
        const fs::path path =
            fs::path(options.data_dir) / shard_file_name(shard_ids[k], index.n_shards);
        shards.emplace_back(path.string());
        const ShardReader& shard = shards.back();
        if (shard.shard_index() != shard_ids[k] || shard.n_shards() != index.n_shards) {
          throw InvalidArgument(path.string() + ": is shard " +
                                std::to_string(shard.shard_index()) + " of " +
                                std::to_string(shard.n_shards()) + ", not of this data set");
        }
        for (int t = 0; t < shard.n_targets(); ++t) {
          if (shard.frame(shard.target_frame(t)).split == options.split) {
            items.push_back({int(k), t});
          }
        }
      }
      if (start.position > items.size()) {
        throw InvalidArgument("cursor position " + std::to_string(start.position) +
                              " is beyond an epoch of " + std::to_string(items.size()));
      }
      if (items.empty()) {
        throw InvalidArgument(options.data_dir + ": rank " + std::to_string(options.rank) +
                              " has no " + split_name(options.split) + " views in its shards");
      }
      opened->set_value();
    } catch (...) {
      opened->set_exception(std::current_exception());
      return;
    }
    try {
      ReaderCursor at = advance(start, 0);  // a cursor at an epoch's end starts the next one
      std::vector<uint32_t> epoch_order = order(at.epoch);
      while (true) {
        const Item item = items[epoch_order[at.position]];
        TrainingSample sample = read_sample(shards[size_t(item.shard)], item.target, at);
        std::unique_lock<std::mutex> lock(mutex);
        not_full.wait(lock, [&] { return stopping || queue.size() < size_t(options.queue_depth); });
        if (stopping) return;
        queue.push_back(std::move(sample));
        not_empty.notify_one();
        const uint64_t epoch = at.epoch;
        at = advance(at, size_t(options.stride));
        if (at.epoch != epoch) epoch_order = order(at.epoch);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::current_exception();
      not_empty.notify_all();
    }
  }

  TrainingSample read_sample(const ShardReader& shard, int target, ReaderCursor at) const {
    TrainingSample sample;
    sample.cursor = at;
    const int target_frame = shard.target_frame(target);
    sample.target_view = shard.frame_view(target_frame);
    sample.target = load_frame(shard, target_frame);
    if (options.dynibar_sources) return read_dynibar_sources(shard, target, at, std::move(sample));
    if (options.target_motion && shard.has_motion()) {
      shard.read_target_motion(target, &sample.target.motion);
    }
    for (int frame : choose_sources(shard.target_sources(target), at)) {
      sample.source_views.push_back(shard.frame_view(frame));
      sample.sources.push_back(load_frame(shard, frame));
    }
    return sample;
  }

  // DynIBaR's three source sets from the whole neighbour list, drawn by the target's global
  // view and the cursor, so ranks sharing a stream draw alike; each frame read once.
  TrainingSample read_dynibar_sources(const ShardReader& shard, int target, ReaderCursor at,
                                      TrainingSample sample) const {
    if (!shard.has_motion()) {
      throw InvalidArgument(options.data_dir +
                            ": DynIBaR needs flows and masks in the shards (a dynamic scene "
                            "prepared with its motion data)");
    }
    const int target_frame = shard.target_frame(target);
    std::vector<SourceCandidate> pool;
    std::vector<const PinholeCamera<double>*> cameras;
    for (int frame : shard.target_sources(target)) {
      pool.push_back({frame, shard.frame(frame).time_index});
      cameras.push_back(&shard.frame(frame).camera);
    }
    if (options.dynibar.rig_static) {  // only evaluation's rule reads viewpoints
      const std::vector<int> viewpoints = viewpoint_ids(cameras);
      for (size_t i = 0; i < pool.size(); ++i) pool[i].viewpoint = viewpoints[i];
    }
    DynibarSourceOptions choice = options.dynibar;
    if (options.anchor_growth_steps > 0) {
      const uint64_t index = at.epoch * items.size() + at.position;  // the rank's sample number
      const uint64_t grown =
          index > options.anchor_growth_start ? index - options.anchor_growth_start : 0;
      choice.anchor_max_step = int(std::min<uint64_t>(uint64_t(choice.anchor_max_step),
                                                      grown / options.anchor_growth_steps + 1));
    }
    const DynibarSources chosen = select_dynibar_sources(
        pool, target_frame, sample.target.time_index, choice,
        RandomKey{options.seed, (at.epoch << 32) | at.position}, uint32_t(sample.target_view));
    std::map<int, int> position;  // frame -> its place in sample.sources
    const auto place = [&](int frame) {
      if (frame < 0) return -1;
      const auto [it, added] = position.emplace(frame, int(sample.sources.size()));
      if (added) {
        View view = load_frame(shard, frame);
        const size_t pixels = size_t(shard.width()) * shard.height();
        view.motion.motion_mask.resize(pixels);
        view.motion.static_mask.resize(pixels);
        shard.read_frame_masks(frame, view.motion.motion_mask.data(),
                               view.motion.static_mask.data());
        sample.source_views.push_back(shard.frame_view(frame));
        sample.sources.push_back(std::move(view));
      }
      return it->second;
    };
    DynibarSourceSets sets;
    for (int k = 0; k < kFlowCount; ++k) sets.dynamic[size_t(k)] = place(chosen.dynamic[size_t(k)]);
    sets.same_time = place(chosen.same_time);
    sets.anchor_time = chosen.anchor_time;
    for (int frame : chosen.anchor) sets.anchor.push_back(place(frame));
    for (int frame : chosen.static_views) sets.static_views.push_back(place(frame));
    shard.read_target_motion(target, &sample.target.motion);
    sample.dynibar = std::move(sets);
    return sample;
  }
};

PrefetchReader::PrefetchReader(const ReaderOptions& options, ReaderCursor start)
    : state_(std::make_unique<State>()) {
  if (options.num_source_views < 1) {
    throw InvalidArgument("num_source_views must be at least 1, got " +
                          std::to_string(options.num_source_views));
  }
  if (options.stride < 1) {
    throw InvalidArgument("the reader's stride must be at least 1, got " +
                          std::to_string(options.stride));
  }
  if (options.queue_depth < 1) {
    throw InvalidArgument("the prefetch queue depth must be at least 1, got " +
                          std::to_string(options.queue_depth));
  }
  state_->options = options;
  state_->next_cursor = start;
  std::promise<void> opened;
  std::future<void> ready = opened.get_future();
  state_->io = std::thread([this, start, &opened] { state_->run(start, &opened); });
  try {
    ready.get();
  } catch (...) {
    state_->io.join();
    throw;
  }
}

PrefetchReader::~PrefetchReader() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->not_full.notify_all();
  if (state_->io.joinable()) state_->io.join();
}

TrainingSample PrefetchReader::next() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.queue.empty() && !s.error) {
    const auto begin = std::chrono::steady_clock::now();
    s.not_empty.wait(lock, [&] { return !s.queue.empty() || s.error; });
    s.waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  if (s.queue.empty()) std::rethrow_exception(s.error);
  TrainingSample sample = std::move(s.queue.front());
  s.queue.pop_front();
  s.not_full.notify_one();
  s.next_cursor = s.advance(sample.cursor, size_t(s.options.stride));
  return sample;
}

ReaderCursor PrefetchReader::cursor() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->next_cursor;
}

size_t PrefetchReader::samples_per_epoch() const {
  return state_->items.size();
}
const std::vector<int>& PrefetchReader::shards() const {
  return state_->shard_ids;
}
size_t PrefetchReader::samples_ready() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->queue.size();
}

double PrefetchReader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->waited;
}

}  // namespace mvibr::data
