// The per-rank reader: ranks split an epoch exactly, the order is a pure function of (seed,
// epoch, shards) (ranks sharing shards see the same stream), a reader restarted at a saved cursor
// continues the identical stream, sources come from the target's neighbours nearest-first, and
// errors are clear.
#include "mvibr/data/prefetch_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "mvibr/core/error.h"
#include "mvibr/data/random_pixel_scene.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

// A prepared data set of 24 random views (every 6th a test view) in `n_shards` shards.
class PreparedData {
 public:
  explicit PreparedData(int n_shards) {
    RandomPixelSceneOptions options;
    options.n_views = 24;
    options.width = 10;
    options.height = 8;
    options.test_every = 6;
    options.seed = 3;
    scene_ = make_random_pixel_scene(options);
    write_prepared_scene(scene_, dir_.string(), {n_shards, 0, "test"});
  }
  ~PreparedData() { fs::remove_all(dir_); }
  const Scene& scene() const { return scene_; }
  ReaderOptions options(int rank, int world) const {
    ReaderOptions o;
    o.data_dir = dir_.string();
    o.rank = rank;
    o.world_size = world;
    o.seed = 11;
    o.num_source_views = 3;
    o.source_pool = 6;
    o.queue_depth = 3;
    return o;
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_ = fs::temp_directory_path() /
                  ("mvibr-reader-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
  Scene scene_;
};

TEST(PrefetchReader, RanksSplitAnEpochExactlyAndSamplesCarryTheirPixels) {
  const PreparedData data(4);
  std::multiset<int> seen;
  for (int rank = 0; rank < 2; ++rank) {
    PrefetchReader reader(data.options(rank, 2));
    EXPECT_EQ(reader.shards(), (std::vector<int>{rank, rank + 2}));
    for (size_t i = 0; i < reader.samples_per_epoch(); ++i) {
      const TrainingSample s = reader.next();
      seen.insert(s.target_view);
      EXPECT_EQ(s.target.split, Split::kTrain);
      EXPECT_EQ(s.target.rgb, data.scene().views[size_t(s.target_view)].rgb);
      ASSERT_EQ(s.sources.size(), 3u);
      const auto& neighbours = data.scene().neighbours[size_t(s.target_view)];
      size_t last = 0;
      for (size_t k = 0; k < s.sources.size(); ++k) {
        const auto at = std::find(neighbours.begin(), neighbours.begin() + 6, s.source_views[k]);
        ASSERT_NE(at, neighbours.begin() + 6) << "source outside the pool";
        EXPECT_TRUE(k == 0 || size_t(at - neighbours.begin()) > last) << "not nearest-first";
        last = size_t(at - neighbours.begin());
        EXPECT_EQ(s.sources[k].rgb, data.scene().views[size_t(s.source_views[k])].rgb);
      }
    }
    EXPECT_EQ(reader.cursor(), (ReaderCursor{1, 0}));
  }
  EXPECT_EQ(seen.size(), 20u);  // 24 views, 4 held out
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 20u);
}

std::vector<std::vector<int>> stream(PrefetchReader& reader, int n) {
  std::vector<std::vector<int>> out;
  for (int i = 0; i < n; ++i) {
    TrainingSample s = reader.next();
    s.source_views.insert(s.source_views.begin(), s.target_view);
    out.push_back(s.source_views);
  }
  return out;
}

TEST(PrefetchReader, OrderIsDeterministicAndChangesPerEpoch) {
  const PreparedData data(2);
  PrefetchReader a(data.options(0, 1)), b(data.options(0, 1));
  const auto first = stream(a, 20), again = stream(b, 20);
  EXPECT_EQ(first, again);
  const auto second_epoch = stream(a, 20);
  EXPECT_NE(first, second_epoch);
  ReaderOptions other = data.options(0, 1);
  other.seed = 12;
  PrefetchReader c(other);
  EXPECT_NE(stream(c, 20), first);
}

TEST(PrefetchReader, RestartingAtACursorContinuesTheSameStream) {
  const PreparedData data(2);
  PrefetchReader reader(data.options(1, 2));
  stream(reader, 13);  // into the second epoch (10 samples per epoch)
  const ReaderCursor saved = reader.cursor();
  EXPECT_EQ(saved, (ReaderCursor{1, 3}));
  const auto expected = stream(reader, 9);
  PrefetchReader resumed(data.options(1, 2), saved);
  EXPECT_EQ(stream(resumed, 9), expected);
}

// Ranks sharing one stream (evaluation) read every stride-th sample from their own offset: the
// same samples as the whole stream, across the end of an epoch too, and cursors that resume there.
TEST(PrefetchReader, AStrideTakesEveryStrideThSampleOfTheStream) {
  const PreparedData data(2);
  PrefetchReader whole(data.options(0, 1));
  const auto all = stream(whole, 3 * 20 + 2);  // 20 samples an epoch: three epochs and two
  for (int offset : {0, 2}) {
    ReaderOptions options = data.options(0, 1);
    options.stride = 3;
    PrefetchReader strided(options, {0, uint64_t(offset)});
    const auto taken = stream(strided, 20);
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(taken[size_t(i)], all[size_t(offset + 3 * i)])
          << "offset " << offset << ", i " << i;
    }
    const uint64_t next = uint64_t(offset) + 3 * 20;
    EXPECT_EQ(strided.cursor(), (ReaderCursor{next / 20, next % 20}));
  }
  ReaderOptions zero = data.options(0, 1);
  zero.stride = 0;
  EXPECT_THROW(PrefetchReader{zero}, InvalidArgument);
}

TEST(PrefetchReader, TestSplitWithoutShuffleTakesTheNearestSources) {
  const PreparedData data(1);
  ReaderOptions options = data.options(0, 1);
  options.split = Split::kTest;
  options.shuffle = false;
  PrefetchReader reader(options);
  EXPECT_EQ(reader.samples_per_epoch(), 4u);
  const TrainingSample s = reader.next();
  EXPECT_EQ(s.target.split, Split::kTest);
  const auto& neighbours = data.scene().neighbours[size_t(s.target_view)];
  EXPECT_EQ(s.source_views, std::vector<int>(neighbours.begin(), neighbours.begin() + 3));
}

TEST(PrefetchReader, FewerShardsThanRanksIsAnErrorUnlessShared) {
  const PreparedData data(1);
  try {
    PrefetchReader reader(data.options(1, 2));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("1 shards for 2 ranks"), std::string::npos) << e.what();
  }
  ReaderOptions shared = data.options(1, 2);
  shared.allow_shared_shards = true;
  PrefetchReader reader(shared);
  EXPECT_EQ(reader.shards(), std::vector<int>{0});
  // Ranks that share a shard take the same targets (and split their rays), as one rank would.
  PrefetchReader alone(data.options(0, 1));
  for (int i = 0; i < 12; ++i) {
    const TrainingSample a = reader.next(), b = alone.next();
    EXPECT_EQ(a.target_view, b.target_view) << "sample " << i;
    EXPECT_EQ(a.source_views, b.source_views) << "sample " << i;
  }
}

TEST(PrefetchReader, BadInputsAreClearErrors) {
  ReaderOptions missing;
  missing.data_dir = "/nonexistent/mvibr-data";
  EXPECT_THROW(PrefetchReader{missing}, InvalidArgument);
  const PreparedData data(1);
  ReaderOptions zero = data.options(0, 1);
  zero.num_source_views = 0;
  EXPECT_THROW(PrefetchReader{zero}, InvalidArgument);
  EXPECT_THROW((PrefetchReader{data.options(0, 1), ReaderCursor{0, 999}}), InvalidArgument);
}

// While the consumer trains, the I/O thread reads ahead until the queue is full; the samples it
// holds are then handed out without a wait. No timing: the test waits for the queue to fill.
TEST(PrefetchReader, ASlowConsumerFindsItsDataReady) {
  const PreparedData data(1);
  const ReaderOptions options = data.options(0, 1);
  PrefetchReader reader(options);
  reader.next();  // the first sample may have to wait for the disk
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (reader.samples_ready() < size_t(options.queue_depth)) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the reader does not read ahead";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // "training"
  }
  const double before = reader.wait_seconds();
  for (int i = 0; i < options.queue_depth; ++i) reader.next();
  EXPECT_EQ(reader.wait_seconds(), before);
}

}  // namespace
}  // namespace mvibr::data
