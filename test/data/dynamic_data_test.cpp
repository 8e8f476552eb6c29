// DynIBaR's data: the ray tracer's flows, masks and disparities (checked by what they must do:
// warp frames onto each other, agree forwards and backwards, leave static pixels unchanged,
// invert the depth), their way through the shards, and DynIBaR's folder written and imported
// back exactly, read by numpy, and refused with one clear line when damaged.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <tuple>

#include "importer_fixture.h"
#include "mvibr/data/dynibar_folder.h"
#include "mvibr/data/neighbours.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/shards.h"
#include "mvibr/data/synthetic_scene.h"

namespace mvibr::data {
namespace {

using namespace testing;

// A short monocular video, Lambertian and without shadows unless asked: a point keeps its
// colour when it moves, so a correct flow carries each pixel's colour to the other frame.
SyntheticSceneOptions video_options(bool shadows = false) {
  SyntheticSceneOptions options;
  options.rig = "monocular";
  options.n_time_steps = 10;
  options.width = 64;
  options.height = 48;
  options.specular_strength = 0;
  options.shadows = shadows;
  return options;
}

int flow_index(int offset) {
  for (int f = 0; f < kFlowCount; ++f) {
    if (kFlowOffsets[f] == offset) return f;
  }
  return -1;
}

// Bilinear sample of channel c of an interleaved [h][w][channels] image at (x, y), inside.
template <typename T>
double bilinear(const std::vector<T>& image, int width, int channels, int c, double x, double y) {
  const int x0 = int(std::floor(x)), y0 = int(std::floor(y));
  const double fx = x - x0, fy = y - y0;
  const auto at = [&](int xx, int yy) {
    return double(image[(size_t(yy) * width + xx) * channels + c]);
  };
  return (1 - fy) * ((1 - fx) * at(x0, y0) + fx * at(x0 + 1, y0)) +
         fy * ((1 - fx) * at(x0, y0 + 1) + fx * at(x0 + 1, y0 + 1));
}

// The view that holds a video's frame at each step: a monocular video's views in order.
std::vector<int> frames_in_order(const Scene& scene) {
  std::vector<int> frames(scene.views.size());
  for (size_t n = 0; n < frames.size(); ++n) frames[n] = int(n);
  return frames;
}

// Mean |I_n(p) - I_m(p + flow + shift)| over the valid flows of every view into the video whose
// frame at step k is view video[k], in levels.
double warping_error(const Scene& scene, const std::vector<int>& video, int w, int h,
                     double shift_x, double shift_y, double flow_scale, long* counted) {
  const size_t pixels = size_t(w) * h;
  double sum = 0;
  *counted = 0;
  for (size_t n = 0; n < scene.views.size(); ++n) {
    const View& view = scene.views[n];
    for (int f = 0; f < kFlowCount; ++f) {
      const long other = long(view.time_index) + kFlowOffsets[f];
      if (other < 0 || other >= long(video.size())) continue;
      const View& target = scene.views[size_t(video[size_t(other)])];
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          const size_t p = size_t(y) * w + x;
          if (!view.motion.flow_valid[f * pixels + p]) continue;
          const double u = x + flow_scale * view.motion.flow[(f * pixels + p) * 2] + shift_x;
          const double v = y + flow_scale * view.motion.flow[(f * pixels + p) * 2 + 1] + shift_y;
          if (u < 1 || v < 1 || u > w - 2 || v > h - 2) continue;
          for (int c = 0; c < 3; ++c) {
            sum += std::abs(view.rgb[p * 3 + c] - bilinear(target.rgb, w, 3, c, u, v));
          }
          ++*counted;
        }
      }
    }
  }
  return sum / (3.0 * *counted);
}

// Texture edges under bilinear resampling keep some error at the exact flow (about 8 levels
// at 64x48), but no flow does better: not none, not one off by 0.3 pixel or by 10%.
void expect_flows_carry_colour(const Scene& scene, const std::vector<int>& video,
                               const SyntheticSceneOptions& options) {
  const int w = options.width, h = options.height;
  long counted = 0;
  const double exact = warping_error(scene, video, w, h, 0, 0, 1, &counted);
  ASSERT_GT(counted, 10000);
  long n = 0;
  EXPECT_LT(exact, 0.3 * warping_error(scene, video, w, h, 0, 0, 0, &n));
  for (const auto& [dx, dy, scale] : {std::tuple{0.3, 0.0, 1.0},
                                      {-0.3, 0.0, 1.0},
                                      {0.0, 0.3, 1.0},
                                      {0.0, -0.3, 1.0},
                                      {0.0, 0.0, 0.9},
                                      {0.0, 0.0, 1.1}}) {
    EXPECT_LT(exact, warping_error(scene, video, w, h, dx, dy, scale, &n))
        << "shifted by (" << dx << ", " << dy << "), scaled by " << scale;
  }
}

TEST(SyntheticMotion, FlowsCarryEachPixelsColourToTheOtherFrame) {
  const SyntheticSceneOptions options = video_options();
  const Scene scene = make_synthetic_scene(options);
  expect_flows_carry_colour(scene, frames_in_order(scene), options);
}

// The Nvidia benchmark's protocol: step k's frame is rig camera k % n_views, and at the test
// steps every other camera is a test view; all flows point into the video's frames.
TEST(SyntheticMotion, CyclingRigFilmsEachStepWithTheNextCameraAndTestsTheOthers) {
  SyntheticSceneOptions options = video_options();
  options.rig = "cycling";
  options.n_views = 4;
  options.n_test_every = 4;
  const Scene scene = make_synthetic_scene(options);
  SyntheticSceneOptions still = options;
  still.rig = "forward";
  still.n_time_steps = 1;
  const Scene rig = make_synthetic_scene(still);

  std::vector<int> video;
  size_t n = 0;
  for (int k = 0; k < options.n_time_steps; ++k) {
    std::vector<int> cameras = {k % 4};
    if (k % 4 == 2) {
      for (int c = 0; c < 4; ++c) {
        if (c != k % 4) cameras.push_back(c);
      }
    }
    for (size_t i = 0; i < cameras.size(); ++i, ++n) {
      ASSERT_LT(n, scene.views.size());
      const View& view = scene.views[n];
      char name[64];
      std::snprintf(name, sizeof(name), "synthetic/t%03d/v%03d", k, cameras[i]);
      EXPECT_EQ(view.name, name);
      EXPECT_EQ(view.time_index, k);
      EXPECT_EQ(view.split, i == 0 ? Split::kTrain : Split::kTest) << name;
      for (int e = 0; e < 12; ++e) {
        EXPECT_EQ(view.camera.c2w[e], rig.views[size_t(cameras[i])].camera.c2w[e]) << name;
      }
    }
    video.push_back(int(n - cameras.size()));
  }
  EXPECT_EQ(n, scene.views.size());
  expect_flows_carry_colour(scene, video, options);
}

TEST(SyntheticMotion, ForwardAndBackwardFlowsCancel) {
  const SyntheticSceneOptions options = video_options();
  const Scene scene = make_synthetic_scene(options);
  const int w = options.width, h = options.height;
  const size_t pixels = size_t(w) * h;
  double worst = 0, sum = 0;
  long counted = 0;
  for (size_t n = 0; n + 2 < scene.views.size(); ++n) {
    const FrameMotion& here = scene.views[n].motion;
    const FrameMotion& there = scene.views[n + 2].motion;
    const int forward = flow_index(2), backward = flow_index(-2);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const size_t p = size_t(y) * w + x;
        if (!here.flow_valid[forward * pixels + p]) continue;
        const double u = x + here.flow[(forward * pixels + p) * 2];
        const double v = y + here.flow[(forward * pixels + p) * 2 + 1];
        if (u < 0 || v < 0 || u > w - 1.001 || v > h - 1.001) continue;
        // Only where the backward flow is smooth around (u, v): the same object, all valid.
        const int x0 = int(u), y0 = int(v);
        bool smooth = true;
        for (const auto& [dx, dy] : {std::pair{0, 0}, {1, 0}, {0, 1}, {1, 1}}) {
          const size_t q = size_t(y0 + dy) * w + (x0 + dx);
          smooth = smooth && there.flow_valid[backward * pixels + q] &&
                   std::abs(there.disparity[q] - there.disparity[size_t(y0) * w + x0]) <
                       0.02 * there.disparity[size_t(y0) * w + x0];
        }
        if (!smooth) continue;
        const std::vector<float> back(there.flow.begin() + long(backward * pixels * 2),
                                      there.flow.begin() + long((backward + 1) * pixels * 2));
        const double ru = here.flow[(forward * pixels + p) * 2] + bilinear(back, w, 2, 0, u, v);
        const double rv = here.flow[(forward * pixels + p) * 2 + 1] + bilinear(back, w, 2, 1, u, v);
        const double residual = std::hypot(ru, rv);
        worst = std::max(worst, residual);
        sum += residual;
        ++counted;
      }
    }
  }
  ASSERT_GT(counted, 5000);
  // Bilinear interpolation of a smooth (projective) flow field: a small fraction of a pixel.
  EXPECT_LT(sum / counted, 0.02);
  EXPECT_LT(worst, 0.3);
}

TEST(SyntheticMotion, PixelsOutsideTheStaticMasksNeverChange) {
  // A fixed rig, shadows on: the masks must cover the moving objects and their moving shadows.
  SyntheticSceneOptions options = video_options(true);
  options.rig = "forward";
  options.n_views = 4;
  options.n_time_steps = 3;
  const Scene scene = make_synthetic_scene(options);
  const size_t pixels = size_t(options.width) * options.height;
  long moving = 0, compared = 0;
  for (int c = 0; c < options.n_views; ++c) {
    for (int k = 1; k < options.n_time_steps; ++k) {
      const View& before = scene.views[size_t((k - 1) * options.n_views + c)];
      const View& after = scene.views[size_t(k * options.n_views + c)];
      for (size_t p = 0; p < pixels; ++p) {
        moving += after.motion.motion_mask[p];
        EXPECT_LE(after.motion.motion_mask[p], after.motion.static_mask[p]) << "masks nest";
        if (before.motion.static_mask[p] || after.motion.static_mask[p]) continue;
        ++compared;
        for (int ch = 0; ch < 3; ++ch) {
          ASSERT_EQ(before.rgb[p * 3 + ch], after.rgb[p * 3 + ch])
              << after.name << " pixel " << p << " changed outside the masks";
        }
      }
    }
  }
  EXPECT_GT(moving, 500);
  EXPECT_GT(compared, long(pixels) * 4);
}

TEST(SyntheticMotion, DisparityInvertsTheDepthAndFlowsStopAtTheVideosEnds) {
  const SyntheticSceneOptions options = video_options();
  const Scene scene = make_synthetic_scene(options);
  const size_t pixels = size_t(options.width) * options.height;
  long occluded_inside = 0;
  for (size_t n = 0; n < scene.views.size(); ++n) {
    const View& view = scene.views[n];
    const std::vector<float> depth = render_synthetic_depth(options, view.camera, int(n));
    for (size_t p = 0; p < pixels; ++p) {
      const float expected = std::isfinite(depth[p]) ? 1.0f / depth[p] : 0.0f;
      ASSERT_NEAR(view.motion.disparity[p], expected, 1e-6f * expected) << p;
    }
    for (int f = 0; f < kFlowCount; ++f) {
      const long other = long(n) + kFlowOffsets[f];
      const auto begin = view.motion.flow_valid.begin() + long(f * pixels);
      const long valid = std::count(begin, begin + long(pixels), 1);
      if (other < 0 || other >= long(scene.views.size())) {
        EXPECT_EQ(valid, 0) << "frame " << n << " has a flow to frame " << other;
        continue;
      }
      EXPECT_GT(valid, long(pixels) / 2);
      for (size_t p = 0; p < pixels; ++p) {
        const double u = int(p % options.width) + view.motion.flow[(f * pixels + p) * 2];
        const double v = int(p / options.width) + view.motion.flow[(f * pixels + p) * 2 + 1];
        const bool inside = u > 0 && v > 0 && u < options.width - 1 && v < options.height - 1;
        if (inside && view.motion.disparity[p] > 0 && !begin[long(p)]) ++occluded_inside;
      }
    }
  }
  EXPECT_GT(occluded_inside, 20) << "the moving sphere hides points that stay in view";
}

// DynIBaR's samples: a 16-frame video prepared with the whole video as every target's pool,
// read with dynibar_sources. Each set's frames are where DynIBaR's loader puts them in time, the
// target carries its flows and disparity and every source its masks, and two readers (a
// restart, or another rank sharing the stream) draw the same sets.
TEST(PrefetchReader, DynibarSamplesCarryTheThreeSourceSetsAndTheMotionData) {
  TempDir dir;
  SyntheticSceneOptions options = video_options();
  options.n_time_steps = 16;
  options.width = 16;
  options.height = 12;
  options.n_test_every = 0;
  Scene scene = make_synthetic_scene(options);
  select_neighbours(&scene, NeighbourOptions{15, 15});
  PrepOptions prep;
  prep.n_shards = 1;
  write_prepared_scene(scene, dir.str(), prep);
  ReaderOptions reader;
  reader.data_dir = dir.str();
  reader.dynibar_sources = true;
  reader.dynibar.static_views = 6;
  reader.anchor_growth_steps = 2 * 16;  // two epochs of the 16 frames
  PrefetchReader a(reader), b(reader);
  std::set<int> anchor_steps_epoch_0, anchor_steps_epoch_2;
  for (int i = 0; i < 3 * 16; ++i) {
    const TrainingSample sample = a.next();
    const TrainingSample twin = b.next();
    ASSERT_TRUE(sample.dynibar.has_value());
    const DynibarSourceSets& sets = *sample.dynibar;
    EXPECT_EQ(sample.source_views, twin.source_views);
    EXPECT_EQ(sets.anchor, twin.dynibar->anchor);
    EXPECT_EQ(sets.static_views, twin.dynibar->static_views);
    const int t = sample.target.time_index;
    const auto time_of = [&](int position) { return sample.sources[size_t(position)].time_index; };
    for (int k = 0; k < kFlowCount; ++k) {
      const int at = sets.dynamic[size_t(k)];
      const bool exists = t + kFlowOffsets[k] >= 0 && t + kFlowOffsets[k] < 16;
      ASSERT_EQ(at >= 0, exists) << "target " << t << " offset " << kFlowOffsets[k];
      if (exists) {
        EXPECT_EQ(time_of(at), t + kFlowOffsets[k]);
      }
    }
    const int step = std::abs(sets.anchor_time - t);
    (sample.cursor.epoch == 0 ? anchor_steps_epoch_0 : anchor_steps_epoch_2).insert(step);
    for (int position : sets.anchor) {
      EXPECT_LE(std::abs(time_of(position) - sets.anchor_time), 3);
    }
    EXPECT_GE(sets.static_views.size(), 3u);
    EXPECT_LE(sets.static_views.size(), 6u);
    // Each frame once; the target's motion whole, the sources' masks there.
    const std::set<int> unique(sample.source_views.begin(), sample.source_views.end());
    EXPECT_EQ(unique.size(), sample.source_views.size());
    EXPECT_EQ(unique.count(sample.target_view), 0u);
    const FrameMotion& expected = scene.views[size_t(sample.target_view)].motion;
    EXPECT_EQ(sample.target.motion.flow, expected.flow);
    EXPECT_EQ(sample.target.motion.disparity, expected.disparity);
    for (size_t v = 0; v < sample.sources.size(); ++v) {
      EXPECT_EQ(sample.sources[v].motion.motion_mask,
                scene.views[size_t(sample.source_views[v])].motion.motion_mask);
    }
    if (i == 31) {  // skip epoch 1: epoch 2 follows
      for (int j = 0; j < 16; ++j) {
        a.next();
        b.next();
      }
    }
  }
  // The anchor reaches 1 frame in epochs 0-1, 2 in epochs 2-3 (growth every 2 epochs).
  EXPECT_EQ(anchor_steps_epoch_0, (std::set<int>{1}));
  EXPECT_EQ(*anchor_steps_epoch_2.rbegin(), 2);
}

TEST(Shards, DynamicScenesCarryFlowsMasksAndDisparities) {
  TempDir dir;
  SyntheticSceneOptions options = video_options();
  options.width = 24;
  options.height = 18;
  Scene scene = make_synthetic_scene(options);
  select_neighbours(&scene, NeighbourOptions{6, 3});
  PrepOptions prep;
  prep.n_shards = 2;
  write_prepared_scene(scene, dir.str(), prep);
  int targets = 0;
  for (int s = 0; s < 2; ++s) {
    const ShardReader shard(dir / shard_file_name(s, 2));
    ASSERT_TRUE(shard.has_motion());
    for (int t = 0; t < shard.n_targets(); ++t, ++targets) {
      FrameMotion read;
      shard.read_target_motion(t, &read);
      const FrameMotion& m = scene.views[size_t(shard.frame_view(shard.target_frame(t)))].motion;
      EXPECT_EQ(read.disparity, m.disparity);
      EXPECT_EQ(read.motion_mask, m.motion_mask);
      EXPECT_EQ(read.static_mask, m.static_mask);
      EXPECT_EQ(read.flow, m.flow);
      EXPECT_EQ(read.flow_valid, m.flow_valid);
    }
    for (int f = 0; f < shard.n_frames(); ++f) {
      std::vector<uint8_t> motion(scene.views[0].motion.motion_mask.size()), still(motion.size());
      shard.read_frame_masks(f, motion.data(), still.data());
      EXPECT_EQ(motion, scene.views[size_t(shard.frame_view(f))].motion.motion_mask);
      EXPECT_EQ(still, scene.views[size_t(shard.frame_view(f))].motion.static_mask);
    }
  }
  EXPECT_EQ(targets, options.n_time_steps);

  // A static scene's shards have none, and asking names the file.
  options.n_time_steps = 1;
  options.rig = "forward";
  options.n_views = 4;
  Scene still = make_synthetic_scene(options);
  select_neighbours(&still, NeighbourOptions{});
  write_prepared_scene(still, dir / "static", PrepOptions{});
  const ShardReader shard(dir / ("static/" + shard_file_name(0, 1)));
  EXPECT_FALSE(shard.has_motion());
  FrameMotion none;
  expect_invalid_naming([&] { shard.read_target_motion(0, &none); }, shard_file_name(0, 1));
}

void expect_same_view(const View& a, const View& b) {
  EXPECT_EQ(a.rgb, b.rgb);
  for (int i = 0; i < 12; ++i) {
    // The importer makes rotations orthonormal to double precision (set_pose).
    EXPECT_NEAR(a.camera.c2w[i], b.camera.c2w[i], 1e-15) << i;
    EXPECT_NEAR(a.camera.w2c[i], b.camera.w2c[i], 1e-14) << i;
  }
  EXPECT_EQ(a.camera.fx, b.camera.fx);
  EXPECT_EQ(a.camera.fy, b.camera.fy);
  EXPECT_EQ(a.camera.cx, b.camera.cx);
  EXPECT_EQ(a.camera.cy, b.camera.cy);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.time_index, b.time_index);
  EXPECT_EQ(a.split, b.split);
  EXPECT_EQ(a.motion.disparity, b.motion.disparity);
  EXPECT_EQ(a.motion.motion_mask, b.motion.motion_mask);
  EXPECT_EQ(a.motion.static_mask, b.motion.static_mask);
  EXPECT_EQ(a.motion.flow, b.motion.flow);
  EXPECT_EQ(a.motion.flow_valid, b.motion.flow_valid);
}

TEST(DynibarFolder, WrittenThenImportedGivesTheSameScene) {
  TempDir dir;
  const SyntheticSceneOptions options = video_options(true);
  const Scene scene = make_synthetic_scene(options);
  write_dynibar_folder(scene, dir.str());
  ASSERT_EQ(detect_format(dir.str()), "dynibar");
  ASSERT_EQ(detect_format(dir / "dense"), "dynibar");

  ImportOptions import;  // llffhold 8, as the scene's test_every
  const Scene imported = import_scene("auto", dir.str(), import);
  ASSERT_EQ(imported.views.size(), scene.views.size());
  EXPECT_TRUE(imported.dynamic);
  EXPECT_EQ(imported.source_format, "dynibar");
  for (size_t n = 0; n < scene.views.size(); ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    expect_same_view(scene.views[n], imported.views[n]);
  }
  // DynIBaR's bounds, scene-wide: near 0.9 min, far 1.5 x the rule in the rescaled units.
  double lo = INFINITY, hi = 0;
  for (const View& v : scene.views) lo = std::min(lo, v.near_depth), hi = std::max(hi, v.far_depth);
  const double scale = 1 / (0.75 * lo), m = hi * scale;
  const double far = (m < 10 ? std::min(20.0, m + 15) : std::min(50.0, std::max(20.0, m))) / scale;
  for (const View& v : imported.views) {
    EXPECT_DOUBLE_EQ(v.near_depth, 0.9 * lo);
    EXPECT_DOUBLE_EQ(v.far_depth, 1.5 * far);
  }
}

TEST(DynibarFolder, NumpyReadsTheFilesAsDynibarsLoaderDoes) {
  TempDir dir;
  SyntheticSceneOptions options = video_options();
  options.n_time_steps = 4;
  const Scene scene = make_synthetic_scene(options);
  write_dynibar_folder(scene, dir.str());
  const FrameMotion& m = scene.views[1].motion;
  const size_t pixels = size_t(options.width) * options.height;
  double flow_sum = 0;
  long valid = 0;
  for (size_t i = 0; i < pixels; ++i) {
    flow_sum += double(m.flow[(flow_index(1) * pixels + i) * 2]);
    valid += m.flow_valid[flow_index(-1) * pixels + i];
  }
  const std::string script = dir / "check.py";
  write_text(script,
             "import numpy as np, sys\n"
             "d = sys.argv[1] + '/dense/'\n"
             "p = np.load(d + 'poses_bounds_cvd.npy')\n"
             "f = np.load(d + 'flow_i1/00001_fwd.npz')\n"
             "b = np.load(d + 'flow_i1/00001_bwd.npz')\n"
             "disp = np.load(d + 'disp/00001.npy')\n"
             "assert p.shape == (4, 17) and p.dtype == np.float64\n"
             "assert f['flow'].shape == (48, 64, 2) and f['flow'].dtype == np.float32\n"
             "assert b['mask'].shape == (48, 64) and b['mask'].dtype == np.bool_\n"
             "assert disp.shape == (48, 64)\n"
             "print('%.17g %d %.17g' % (f['flow'][..., 0].astype(np.float64).sum(),\n"
             "      int(b['mask'].sum()), p[1, 14]))\n");
  const std::string out = dir / "out.txt";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + dir.str() + " > " + out).c_str()), 0);
  std::ifstream in(out);
  double read_flow_sum = 0, focal = 0;
  long read_valid = 0;
  in >> read_flow_sum >> read_valid >> focal;
  EXPECT_NEAR(read_flow_sum, flow_sum, 1e-6 * (1 + std::abs(flow_sum)));
  EXPECT_EQ(read_valid, valid);
  EXPECT_DOUBLE_EQ(focal, scene.views[1].camera.fx);
}

TEST(DynibarFolder, DamagedFoldersAreOneClearError) {
  TempDir dir;
  SyntheticSceneOptions options = video_options();
  options.n_time_steps = 5;
  options.width = 16;
  options.height = 12;
  const Scene scene = make_synthetic_scene(options);
  const ImportOptions import;
  const std::string dense = dir / "dense";
  const auto fresh = [&] {
    fs::remove_all(dir.str() + "/dense");
    write_dynibar_folder(scene, dir.str());
  };
  const auto import_it = [&] { import_dynibar(dir.str(), import); };

  fresh();  // a flow of the wrong shape
  NpyArray flow;
  flow.type = NpyType::kFloat32;
  flow.shape = {12, 15, 2};
  flow.bytes.resize(12 * 15 * 2 * 4);
  NpyArray mask = flow;
  mask.type = NpyType::kBool;
  mask.shape = {12, 15};
  mask.bytes.resize(12 * 15);
  write_npz(dense + "/flow_i2/00001_fwd.npz", {{"flow", flow}, {"mask", mask}});
  expect_invalid_naming(import_it, "flow_i2/00001_fwd.npz:flow: shape (12, 15, 2)");

  fresh();  // a missing motion mask
  fs::remove(dense + "/dynamic_masks/3.png");
  expect_invalid_naming(import_it, "dynamic_masks/3.png: missing");

  fresh();  // a missing flow
  fs::remove(dense + "/flow_i3/00004_bwd.npz");
  expect_invalid_naming(import_it,
                        "flow_i3/00004_bwd.npz: missing (the flow from frame 4 to frame 1)");

  fresh();  // frame counts that disagree
  fs::remove(dense + "/images_16x12/00002.png");
  expect_invalid_naming(import_it, "has 5 poses but");

  fresh();  // a disparity of the wrong size
  NpyArray disparity;
  disparity.type = NpyType::kFloat32;
  disparity.shape = {6, 8};
  disparity.bytes.resize(6 * 8 * 4);
  write_text(dense + "/disp/00000.npy", encode_npy(disparity));
  expect_invalid_naming(import_it, "disp/00000.npy: shape (6, 8)");

  // A folder that is not DynIBaR's, asked for as one.
  TempDir other;
  write_text(other / "poses_bounds.npy", "");
  expect_invalid_naming([&] { import_scene("dynibar", other.str(), import); },
                        "not a DynIBaR folder");
  // A scene that is not one video cannot be written as one.
  SyntheticSceneOptions rig = options;
  rig.rig = "forward";
  rig.n_views = 2;
  expect_invalid_naming([&] { write_dynibar_folder(make_synthetic_scene(rig), other / "out"); },
                        "not one video in time order");
}

}  // namespace
}  // namespace mvibr::data
