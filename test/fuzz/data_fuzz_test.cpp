// Corrupt files must give clean errors: prepared scenes and shards (and the image and array
// files importers read) are damaged at random offsets, by flipped bytes or truncation, and every
// reader must either succeed or throw mvibr::InvalidArgument; never crash, hang, read out of
// bounds or allocate from a corrupt size. Built with AddressSanitizer and UBSan, which turn any
// memory error in our code into a failure. Reproducible: the damage comes from fixed seeds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "damage.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/npy.h"
#include "mvibr/data/npz.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/random_pixel_scene.h"
#include "mvibr/data/shards.h"
#include "support/datasets.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

struct Workspace {
  fs::path root = fs::temp_directory_path() / ("mvibr-fuzz-" + std::to_string(::getpid()));
  fs::path clean = root / "clean", damaged = root / "damaged";
  Workspace() {
    RandomPixelSceneOptions options;
    options.test_every = 8;
    options.max_pixel_value = 63;  // compressible, for the gzip shard
    options.seed = 2;
    const Scene scene = make_random_pixel_scene(options);
    write_prepared_scene(scene, clean.string(), {2, 3, "fuzz"});
  }
  ~Workspace() { fs::remove_all(root); }
};

enum class Damage { kFlipBytes, kTruncate };

// Copies the clean data set, damages `file` in it, and returns the damaged folder.
fs::path damage(const Workspace& w, const std::string& file, Damage kind, std::mt19937_64& rng) {
  fs::remove_all(w.damaged);
  fs::copy(w.clean, w.damaged);
  const fs::path path = w.damaged / file;
  const size_t size = fs::file_size(path);
  if (kind == Damage::kTruncate) {
    fs::resize_file(path, rng() % size);
    return w.damaged;
  }
  std::fstream stream(path, std::ios::in | std::ios::out | std::ios::binary);
  const int flips = 1 + int(rng() % 8);
  for (int i = 0; i < flips; ++i) {
    stream.seekp(std::streamoff(rng() % size));
    stream.put(char(rng()));
  }
  return w.damaged;
}

// Runs every reader over the damaged folder; true when all succeeded.
bool read_everything(const fs::path& dir) {
  const SceneIndex index = read_scene_index(dir.string());
  for (int s = 0; s < index.n_shards; ++s) {
    const ShardReader shard((dir / shard_file_name(s, index.n_shards)).string());
    std::vector<uint8_t> rgb(size_t(shard.width()) * shard.height() * 3);
    for (int f = 0; f < shard.n_frames(); ++f) shard.read_frame(f, rgb.data());
  }
  ReaderOptions options;
  options.data_dir = dir.string();
  options.num_source_views = 3;
  PrefetchReader reader(options);
  for (size_t i = 0; i < reader.samples_per_epoch(); ++i) reader.next();
  return true;
}

TEST(DataFuzz, DamagedScenesAndShardsGiveCleanErrors) {
  const Workspace w;
  std::mt19937_64 rng(20261202);
  constexpr int kRounds = 400;
  int clean_errors = 0, survived = 0;
  const std::string files[] = {"scene.h5", shard_file_name(0, 2), shard_file_name(1, 2)};
  for (int round = 0; round < kRounds; ++round) {
    const std::string& file = files[size_t(round) % 3];
    const Damage kind = round % 5 == 4 ? Damage::kTruncate : Damage::kFlipBytes;
    const fs::path dir = damage(w, file, kind, rng);
    try {
      read_everything(dir);
      ++survived;  // the damage hit bytes nothing reads (padding, free space)
    } catch (const InvalidArgument& e) {
      ++clean_errors;
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
      EXPECT_NE(what.find(dir.string()), std::string::npos)
          << "round " << round << ": the message does not name the file: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "round " << round << " (" << file << "): not a clean error: " << e.what();
    }
  }
  std::printf("%d damaged data sets: %d clean errors, %d read fine\n", kRounds, clean_errors,
              survived);
  EXPECT_GT(clean_errors, kRounds / 2);  // most damage must be caught, by checksums or checks
}

// The files importers read: a PNG, an .npy and an .npz from the real data sets.
TEST(DataFuzz, DamagedImagesAndArraysGiveCleanErrors) {
  MVIBR_NEED_DATASET(lego, "nerf_synthetic_lego_400");
  MVIBR_NEED_DATASET(fern, "llff_fern");
  MVIBR_NEED_DATASET(dnerf, "dnerf_lego_tiny");
  const struct {
    fs::path source;
    std::function<void(const std::string&)> read;
  } inputs[] = {
      {fs::path(lego) / "train/r_0.png", [](const std::string& p) { load_image(p); }},
      {fs::path(fern) / "poses_bounds.npy", [](const std::string& p) { read_npy(p); }},
      {fs::path(dnerf) / "tiny_dnerf_data.npz", [](const std::string& p) { read_npz(p); }},
  };
  const fs::path work =
      fs::temp_directory_path() / ("mvibr-fuzz-files-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::mt19937_64 rng(7);
  int clean_errors = 0, rounds = 0;
  for (const auto& input : inputs) {
    ASSERT_TRUE(fs::exists(input.source)) << input.source;
    const fs::path copy = work / input.source.filename();
    for (int round = 0; round < 40; ++round, ++rounds) {
      fs::copy_file(input.source, copy, fs::copy_options::overwrite_existing);
      mvibr::testing::damage_file(copy, round, rng);
      try {
        input.read(copy.string());
      } catch (const InvalidArgument& e) {
        ++clean_errors;
        EXPECT_NE(std::string(e.what()).find(copy.string()), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << copy << " round " << round << ": not a clean error: " << e.what();
      }
    }
  }
  fs::remove_all(work);
  std::printf("%d damaged files: %d clean errors\n", rounds, clean_errors);
  EXPECT_GT(clean_errors, rounds / 3);
}

}  // namespace
}  // namespace mvibr::data
