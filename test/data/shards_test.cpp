// The prepared data set: write then read round-trips exactly (pixels, cameras, neighbours),
// shards are self-contained, files appear only when complete, and corrupt files fail cleanly
// with the file named; any view can be read back by its index; source selection.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "mvibr/core/error.h"
#include "mvibr/data/neighbours.h"
#include "mvibr/data/random_pixel_scene.h"
#include "mvibr/data/shards.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

Scene random_scene(int n_views, bool dynamic) {
  RandomPixelSceneOptions options;
  options.n_views = n_views;
  options.width = 12;
  options.height = 9;
  options.test_every = 5;
  options.n_time_steps = dynamic ? 3 : 1;
  options.seed = 5;
  return make_random_pixel_scene(options);
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("mvibr-shards-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  static inline int counter = 0;
};

TEST(Shards, WriteThenReadRoundTripsExactly) {
  const Scene scene = random_scene(17, true);
  TempDir dir;
  const PrepReport report = write_prepared_scene(scene, dir.path, {3, 0, "mvibr prep --test"});
  EXPECT_EQ(report.n_shards, 3);
  EXPECT_GE(report.duplication_factor, 1.0);
  EXPECT_EQ(report.files.size(), 4u);

  const SceneIndex index = read_scene_index(dir.path.string());
  EXPECT_EQ(index.n_shards, 3);
  EXPECT_EQ(index.prep_command, "mvibr prep --test");
  EXPECT_TRUE(index.scene.dynamic);
  ASSERT_EQ(index.scene.views.size(), scene.views.size());
  EXPECT_EQ(index.scene.neighbours, scene.neighbours);
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View &a = scene.views[i], &b = index.scene.views[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.split, b.split);
    EXPECT_EQ(a.time, b.time);
    EXPECT_EQ(a.time_index, b.time_index);
    EXPECT_EQ(a.near_depth, b.near_depth);
    EXPECT_EQ(a.far_depth, b.far_depth);
    for (int k = 0; k < 12; ++k) {
      EXPECT_EQ(a.camera.c2w[k], b.camera.c2w[k]);
      EXPECT_NEAR(a.camera.w2c[k], b.camera.w2c[k], 1e-15);
    }
    EXPECT_EQ(a.camera.fx, b.camera.fx);
    EXPECT_EQ(a.camera.cy, b.camera.cy);
  }

  std::multiset<int> targets;
  long long frames = 0;
  for (int s = 0; s < 3; ++s) {
    const ShardReader shard((dir.path / shard_file_name(s, 3)).string());
    EXPECT_EQ(shard.shard_index(), s);
    frames += shard.n_frames();
    std::vector<uint8_t> rgb(12 * 9 * 3);
    for (int f = 0; f < shard.n_frames(); ++f) {
      shard.read_frame(f, rgb.data());
      EXPECT_EQ(rgb, scene.views[size_t(shard.frame_view(f))].rgb);
      EXPECT_EQ(shard.frame(f).name, scene.views[size_t(shard.frame_view(f))].name);
    }
    for (int t = 0; t < shard.n_targets(); ++t) {
      const int view = shard.frame_view(shard.target_frame(t));
      targets.insert(view);
      EXPECT_EQ(index.shard_of_view[size_t(view)], s);
      std::vector<int> sources;
      for (int f : shard.target_sources(t)) sources.push_back(shard.frame_view(f));
      EXPECT_EQ(sources, scene.neighbours[size_t(view)]);  // self-contained, same order
    }
  }
  EXPECT_EQ(frames, report.frames_written);
  EXPECT_EQ(targets.size(), scene.views.size());
  EXPECT_EQ(std::set<int>(targets.begin(), targets.end()).size(), scene.views.size());
}

TEST(Shards, LeavesNoTemporaryFilesAndRemovesStaleShards) {
  const Scene scene = random_scene(10, false);
  TempDir dir;
  write_prepared_scene(scene, dir.path, {4, 1, ""});
  write_prepared_scene(scene, dir.path, {2, 0, ""});
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"scene.h5", shard_file_name(0, 2), shard_file_name(1, 2)}));
}

TEST(Shards, BadPrepOptionsAreRejected) {
  const Scene scene = random_scene(6, false);
  TempDir dir;
  EXPECT_THROW(write_prepared_scene(scene, dir.path, {7, 0, ""}), InvalidArgument);
  EXPECT_THROW(write_prepared_scene(scene, dir.path, {0, 0, ""}), InvalidArgument);
  EXPECT_THROW(write_prepared_scene(scene, dir.path, {1, 10, ""}), InvalidArgument);
  Scene bad = scene;
  bad.views[2].far_depth = bad.views[2].near_depth;
  try {
    write_prepared_scene(bad, dir.path, {1, 0, ""});
    FAIL() << "near == far accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("view 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path / "scene.h5"));
}

// Flips one bit inside the pixels of frame 0 (found by its known byte pattern).
void flip_a_pixel_bit(const fs::path& path, const std::vector<uint8_t>& frame) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::vector<char> raw((std::istreambuf_iterator<char>(file)), {});
  const std::vector<uint8_t> bytes(raw.begin(), raw.end());
  const auto at = std::search(bytes.begin(), bytes.end(), frame.begin(), frame.end());
  ASSERT_NE(at, bytes.end()) << "frame bytes not found (compressed?)";
  const auto offset = (at - bytes.begin()) + 40;
  file.seekp(offset);
  file.put(char(bytes[size_t(offset)] ^ 0x10));
}

TEST(Shards, AFlippedPixelBitFailsTheChecksumNamingTheFile) {
  const Scene scene = random_scene(6, false);
  TempDir dir;
  write_prepared_scene(scene, dir.path, {1, 0, ""});
  const fs::path path = dir.path / shard_file_name(0, 1);
  const ShardReader before(path.string());
  flip_a_pixel_bit(path, scene.views[size_t(before.frame_view(0))].rgb);
  const ShardReader shard(path.string());
  std::vector<uint8_t> rgb(12 * 9 * 3);
  try {
    shard.read_frame(0, rgb.data());
    FAIL() << "a flipped bit was read without error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos);
  }
  shard.read_frame(1, rgb.data());  // the other frames still read
}

TEST(Shards, WrongFormatVersionAndTruncatedFilesAreClearErrors) {
  const Scene scene = random_scene(6, false);
  TempDir dir;
  write_prepared_scene(scene, dir.path, {1, 0, ""});
  const fs::path scene_path = dir.path / "scene.h5";
  {
    const hid_t file = H5Fopen(scene_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t attribute = H5Aopen(file, "format_version", H5P_DEFAULT);
    const long long future = 99;
    H5Awrite(attribute, H5T_NATIVE_LLONG, &future);
    H5Aclose(attribute);
    H5Fclose(file);
  }
  try {
    read_scene_index(dir.path.string());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("format version 99"), std::string::npos) << e.what();
  }
  const fs::path shard = dir.path / shard_file_name(0, 1);
  fs::resize_file(shard, fs::file_size(shard) / 2);
  EXPECT_THROW(ShardReader{shard.string()}, InvalidArgument);
  EXPECT_THROW(ShardReader{(dir.path / "missing.h5").string()}, InvalidArgument);
  // A scene file is not a shard.
  write_prepared_scene(scene, dir.path, {1, 0, ""});
  EXPECT_THROW(ShardReader{scene_path.string()}, InvalidArgument);
}

TEST(Neighbours, AreTrainingViewsNearestFirstAndWithinTheTimeWindow) {
  const Scene scene = random_scene(15, true);
  for (size_t i = 0; i < scene.views.size(); ++i) {
    ASSERT_FALSE(scene.neighbours[i].empty());
    for (int n : scene.neighbours[i]) {
      EXPECT_NE(size_t(n), i);
      EXPECT_EQ(scene.views[size_t(n)].split, Split::kTrain);
      EXPECT_LE(std::abs(scene.views[size_t(n)].time_index - scene.views[i].time_index), 1);
    }
  }
  // A static scene: the first neighbour is closer than the last.
  const Scene still = random_scene(15, false);
  const auto centre = [&](int v) { return still.views[size_t(v)].camera.center(); };
  for (size_t i = 0; i < still.views.size(); ++i) {
    const auto& list = still.neighbours[i];
    EXPECT_LE(norm(centre(list.front()) - centre(int(i))),
              norm(centre(list.back()) - centre(int(i))) + 1e-9);
  }
}

TEST(ViewLookup, ReadsEveryViewWithItsPixelsFromWhicheverShardHoldsIt) {
  const Scene scene = random_scene(17, true);
  TempDir dir;
  write_prepared_scene(scene, dir.path, {3, 0, ""});
  const ViewLookup lookup(dir.path.string());
  EXPECT_EQ(lookup.index().scene.views.size(), scene.views.size());
  for (size_t v = 0; v < scene.views.size(); ++v) {
    const View view = lookup.view(int(v));
    EXPECT_EQ(view.name, scene.views[v].name);
    EXPECT_EQ(view.rgb, scene.views[v].rgb) << v;
    EXPECT_EQ(view.near_depth, scene.views[v].near_depth);
    for (int k = 0; k < 12; ++k) EXPECT_EQ(view.camera.c2w[k], scene.views[v].camera.c2w[k]);
  }
  EXPECT_THROW(lookup.view(17), InvalidArgument);
  EXPECT_THROW(lookup.view(-1), InvalidArgument);
  EXPECT_THROW(ViewLookup((dir.path / "nothing").string()), InvalidArgument);
}

// A camera that is not in the scene gets the sources select_neighbours would give a view there:
// on a held-out view's own camera, the same list.
TEST(Neighbours, NearestSourcesOfAHeldOutCameraAreItsNeighbours) {
  for (const bool dynamic : {false, true}) {
    const Scene scene = random_scene(15, dynamic);
    int held_out = 0;
    for (size_t i = 0; i < scene.views.size(); ++i) {
      const View& view = scene.views[i];
      if (view.split == Split::kTrain) continue;
      ++held_out;
      const std::vector<int> sources =
          SourceRanking(scene, NeighbourOptions{}).nearest(view.camera, view.time_index, 4);
      const std::vector<int> expected(scene.neighbours[i].begin(), scene.neighbours[i].begin() + 4);
      EXPECT_EQ(sources, expected) << "view " << i;
    }
    EXPECT_GE(held_out, 2);
    EXPECT_THROW(SourceRanking(scene, {}).nearest(scene.views[0].camera, 0, 0), InvalidArgument);
  }
}

}  // namespace
}  // namespace mvibr::data
