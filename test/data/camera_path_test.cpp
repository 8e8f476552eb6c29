// Camera paths: the spiral against a numpy transcription of LLFF's render_path_spiral on fern's
// real cameras (test/reference/spiral_reference.py, in LLFF's axes), its geometry (rigid
// cameras all looking at one focus point), the orbit around lego's real cameras, the
// interpolated path (keys exact, the middle half way in position and in rotation angle), and
// bad requests.
#include "mvibr/data/camera_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mvibr/core/error.h"
#include "mvibr/data/importers.h"
#include "mvibr/data/npy.h"
#include "mvibr/data/synthetic_scene.h"
#include "support/datasets.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

Scene fern(const std::string& folder) {
  ImportOptions options;
  options.downsample = 8;
  return import_scene("llff", folder, options);
}

Vec3<double> forward(const PinholeCamera<double>& c) {
  return {c.c2w[2], c.c2w[6], c.c2w[10]};
}

// The angle of the rotation that takes a's camera axes to b's.
double rotation_angle(const PinholeCamera<double>& a, const PinholeCamera<double>& b) {
  double trace = 0;  // trace(Ra^T Rb)
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) trace += a.c2w[4 * r + c] * b.c2w[4 * r + c];
  }
  return std::acos(std::clamp((trace - 1) / 2, -1.0, 1.0));
}

TEST(SpiralPath, MatchesLlffRenderPathSpiralOnFern) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  SpiralOptions options;
  options.frames = 24;
  const std::vector<PathFrame> path = spiral_path(scene, options);
  ASSERT_EQ(path.size(), 24u);

  const fs::path dir = fs::temp_directory_path() / ("mvibr-spiral-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json cameras = nlohmann::json::array();
  double close = INFINITY, far = 0;
  for (const View& v : scene.views) {
    cameras.push_back(std::vector<double>(v.camera.c2w, v.camera.c2w + 12));
    close = std::min(close, v.near_depth);
    far = std::max(far, v.far_depth);
  }
  std::ofstream(dir / "case.json") << nlohmann::json{{"c2w", cameras},
                                                     {"close_depth", close},
                                                     {"far_depth", far},
                                                     {"frames", options.frames},
                                                     {"rotations", options.rotations},
                                                     {"z_rate", options.z_rate}}
                                          .dump();
  const std::string command = std::string("/usr/bin/python3 ") + MVIBR_TEST_SOURCE_DIR +
                              "/test/reference/spiral_reference.py " +
                              (dir / "case.json").string() + " " + (dir / "out.json").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nlohmann::json reference = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  fs::remove_all(dir);
  ASSERT_EQ(reference["c2w"].size(), path.size());
  double worst = 0;
  for (size_t f = 0; f < path.size(); ++f) {
    for (int k = 0; k < 12; ++k) {
      const double expected = reference["c2w"][f][size_t(k)].get<double>();
      worst = std::max(worst, std::abs(path[f].camera.c2w[k] - expected));
    }
    EXPECT_EQ(path[f].camera.fx, scene.views[0].camera.fx);
    EXPECT_EQ(path[f].camera.cy, scene.views[0].camera.cy);
    EXPECT_EQ(path[f].camera.width, scene.views[0].camera.width);
    EXPECT_EQ(path[f].near_depth, close);
    EXPECT_EQ(path[f].far_depth, far);
  }
  // LLFF's focus depth from fern's bounds as LLFF reads them: 0.9x the smallest, 5x the largest.
  const NpyArray table = read_npy(fern_dir + "/poses_bounds.npy");
  double smallest = INFINITY, largest = 0;
  for (size_t i = 0; i < table.shape[0]; ++i) {
    smallest = std::min(smallest, table.at(17 * i + 15));
    largest = std::max(largest, table.at(17 * i + 16));
  }
  EXPECT_NEAR(focus_depth(scene), 1 / (0.25 / (0.9 * smallest) + 0.75 / (5 * largest)), 1e-9);
  // Fern's centres are within a few units of the origin: 1e-9 is rounding, a wrong axis is ~1.
  EXPECT_LT(worst, 1e-9);
  std::printf("fern spiral: %zu frames within %.2g of LLFF's; focus depth %.4f\n", path.size(),
              worst, focus_depth(scene));
}

TEST(SpiralPath, CamerasAreRigidAndLookAtOneFocusPointFromAroundTheAverage) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  const std::vector<PathFrame> path = spiral_path(scene, SpiralOptions{});
  ASSERT_EQ(path.size(), 120u);
  Vec3<double> mean_center{0, 0, 0};
  for (const View& v : scene.views) {
    mean_center = mean_center + (1.0 / double(scene.views.size())) * v.camera.center();
  }
  const double radius = norm(path[0].camera.center() - mean_center);  // frame 0: (rx, 0, 0)
  EXPECT_GT(radius, 0);
  for (const PathFrame& frame : path) EXPECT_EQ(check_rigid_pose(frame.camera.c2w), "");
  // Every optical axis passes through the focus point, focus_depth ahead of the average camera.
  const double focus = focus_depth(scene);
  Vec3<double> average_forward{0, 0, 0};
  for (const View& v : scene.views) average_forward = average_forward + forward(v.camera);
  average_forward = (1 / norm(average_forward)) * average_forward;
  const Vec3<double> focus_point = mean_center + focus * average_forward;
  for (const PathFrame& frame : path) {
    const Vec3<double> to_focus = focus_point - frame.camera.center();
    const double along = dot(to_focus, forward(frame.camera));
    EXPECT_NEAR(norm(to_focus - along * forward(frame.camera)), 0, 1e-9 * focus);
    EXPECT_GT(along, 0);  // in front of the camera
  }
  // Two turns: frame 60 is back where frame 0 started.
  EXPECT_LT(norm(path[60].camera.center() - path[0].camera.center()), 1e-9);
  EXPECT_GT(norm(path[30].camera.center() - path[0].camera.center()), 0.1 * radius);
}

TEST(SpiralPath, RejectsNoFramesAndCamerasFacingEveryWay) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  SpiralOptions options;
  options.frames = 0;
  EXPECT_THROW(spiral_path(scene, options), InvalidArgument);
  // A full ring of cameras looking at its centre: their forward axes cancel.
  SyntheticSceneOptions ring;
  ring.width = 24;
  ring.height = 18;
  ring.n_views = 8;
  Scene orbit = make_synthetic_scene(ring);
  for (size_t i = 0; i < orbit.views.size(); ++i) {
    const double a = 2 * M_PI * double(i) / double(orbit.views.size());
    orbit.views[i].camera =
        look_at_camera(Vec3<double>{4 * std::cos(a), 4 * std::sin(a), 0}, Vec3<double>{0, 0, 0},
                       Vec3<double>{0, 0, 1}, 20.0, 24, 18);
  }
  try {
    spiral_path(orbit, SpiralOptions{});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("face every way"), std::string::npos) << e.what();
  }
}

// NeRF-synthetic lego's cameras sit on a sphere of radius 4.03 about the origin, looking at it.
TEST(OrbitPath, CirclesWhatLegosViewsLookAtAtTheirDistanceAndElevation) {
  MVIBR_NEED_DATASET(lego_dir, "nerf_synthetic_lego_400");
  ImportOptions options;
  options.splits = {"train"};
  options.max_views_per_split = 24;
  const Scene lego = import_scene("blender", lego_dir, options);
  const std::vector<PathFrame> path = orbit_path(lego, OrbitOptions{});
  ASSERT_EQ(path.size(), 40u);
  double radius = 0, height = 0;
  Vec3<double> up{0, 0, 0};
  for (const View& v : lego.views) {
    radius += norm(v.camera.center()) / double(lego.views.size());
    up = up + (-1.0 / double(lego.views.size())) *
                  Vec3<double>{v.camera.c2w[1], v.camera.c2w[5], v.camera.c2w[9]};
  }
  up = (1 / norm(up)) * up;
  // Every frame: rigid, at the views' mean distance from the origin, looking at it, all at one
  // height; frame 0 above view 0's azimuth; a quarter of the frames a quarter turn.
  for (const PathFrame& frame : path) {
    const Vec3<double> c = frame.camera.center();
    EXPECT_EQ(check_rigid_pose(frame.camera.c2w), "");
    EXPECT_NEAR(norm(c), radius, 0.02 * radius);
    const double along = -dot(c, forward(frame.camera));
    EXPECT_NEAR(norm(c + along * forward(frame.camera)), 0, 0.02 * radius);
    height += dot(c, up) / double(path.size());
    EXPECT_EQ(frame.camera.fx, lego.views[0].camera.fx);
    EXPECT_EQ(frame.camera.width, 400);
  }
  for (const PathFrame& frame : path) EXPECT_NEAR(dot(frame.camera.center(), up), height, 1e-9);
  EXPECT_GT(height, 0);  // above the object, as the views are
  const Vec3<double> first = lego.views[0].camera.center();
  const Vec3<double> first_flat = first - dot(first, up) * up;
  const Vec3<double> frame_flat = path[0].camera.center() - height * up;
  EXPECT_NEAR(dot(first_flat, frame_flat) / (norm(first_flat) * norm(frame_flat)), 1, 1e-9);
  EXPECT_NEAR(dot(path[10].camera.center() - height * up, frame_flat), 0, 1e-6 * radius * radius);
}

TEST(OrbitPath, RejectsForwardFacingViewsAndNoFrames) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  try {
    orbit_path(scene, OrbitOptions{});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("look nearly the same way"), std::string::npos)
        << e.what();
  }
  OrbitOptions none;
  none.frames = 0;
  EXPECT_THROW(orbit_path(scene, none), InvalidArgument);
}

TEST(InterpolatedPath, HitsTheKeysExactlyAndMovesHalfWayBetweenThem) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  const std::vector<int> keys = {0, 8, 16};
  const std::vector<PathFrame> path = interpolated_path(scene, keys, 9);  // keys at 0, 4, 8
  ASSERT_EQ(path.size(), 9u);
  for (size_t k = 0; k < keys.size(); ++k) {
    const View& key = scene.views[size_t(keys[k])];
    const PathFrame& frame = path[4 * k];
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(frame.camera.c2w[i], key.camera.c2w[i]);
      EXPECT_EQ(frame.camera.w2c[i], key.camera.w2c[i]);
    }
    EXPECT_EQ(frame.near_depth, key.near_depth);
    EXPECT_EQ(frame.far_depth, key.far_depth);
  }
  for (size_t segment = 0; segment < 2; ++segment) {
    const PinholeCamera<double>& a = scene.views[size_t(keys[segment])].camera;
    const PinholeCamera<double>& b = scene.views[size_t(keys[segment + 1])].camera;
    const PathFrame& middle = path[4 * segment + 2];
    EXPECT_EQ(check_rigid_pose(middle.camera.c2w), "");
    EXPECT_LT(norm(middle.camera.center() - 0.5 * (a.center() + b.center())), 1e-12);
    const double whole = rotation_angle(a, b);
    EXPECT_GT(whole, 1e-3);  // fern's views do turn
    EXPECT_NEAR(rotation_angle(a, middle.camera), whole / 2, 1e-9);
    EXPECT_NEAR(rotation_angle(middle.camera, b), whole / 2, 1e-9);
    EXPECT_NEAR(rotation_angle(a, path[4 * segment + 1].camera), whole / 4, 1e-9);
    const double near = 0.5 * (scene.views[size_t(keys[segment])].near_depth +
                               scene.views[size_t(keys[segment + 1])].near_depth);
    EXPECT_NEAR(middle.near_depth, near, 1e-12);
  }
}

TEST(InterpolatedPath, TurnsTheShortWayRoundEvenNearHalfATurn) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  Scene scene = fern(fern_dir);
  // View 1 turned by 179 degrees about the vertical relative to view 0.
  PinholeCamera<double>& a = scene.views[0].camera;
  PinholeCamera<double>& b = scene.views[1].camera;
  const Vec3<double> eye = a.center();
  b = look_at_camera(eye, eye + Vec3<double>{0, 0, 1}, Vec3<double>{0, -1, 0}, a.fx, a.width,
                     a.height);
  a = look_at_camera(eye,
                     eye + Vec3<double>{std::sin(M_PI * 179 / 180), 0, std::cos(M_PI * 179 / 180)},
                     Vec3<double>{0, -1, 0}, a.fx, a.width, a.height);
  const std::vector<PathFrame> path = interpolated_path(scene, {0, 1}, 3);
  EXPECT_NEAR(rotation_angle(a, b), M_PI * 179 / 180, 1e-9);
  EXPECT_NEAR(rotation_angle(a, path[1].camera), M_PI * 179 / 360, 1e-9);
  EXPECT_EQ(check_rigid_pose(path[1].camera.c2w), "");
}

TEST(InterpolatedPath, RejectsTooFewKeysOrFramesAndUnknownViews) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = fern(fern_dir);
  EXPECT_THROW(interpolated_path(scene, {3}, 10), InvalidArgument);
  EXPECT_THROW(interpolated_path(scene, {0, 8}, 1), InvalidArgument);
  try {
    interpolated_path(scene, {0, 20}, 10);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("path view 20"), std::string::npos) << e.what();
  }
}

// A dynamic scene's videos: a fixed camera over every time step, bullet time (time frozen while
// the camera moves) and a camera-and-time path, on the built-in 24-step video.
TEST(PathTime, FixedCameraSweepsTimeAndBulletTimeFreezesIt) {
  SyntheticSceneOptions options;
  options.rig = "monocular";
  options.n_time_steps = 24;
  options.width = 16;
  options.height = 12;
  const Scene scene = make_synthetic_scene(options);
  ASSERT_EQ(time_steps(scene), 24);

  std::vector<PathFrame> fixed = fixed_path(scene, 5, 24);
  set_path_time(scene, kSweepTime, &fixed);
  for (int f = 0; f < 24; ++f) {
    EXPECT_EQ(fixed[size_t(f)].time_index, f);
    for (int e = 0; e < 12; ++e)
      EXPECT_EQ(fixed[size_t(f)].camera.c2w[e], scene.views[5].camera.c2w[e]);
    EXPECT_EQ(fixed[size_t(f)].near_depth, scene.views[5].near_depth);
  }
  // Fewer frames than steps spread over the whole video, ends included.
  std::vector<PathFrame> short_sweep = fixed_path(scene, 5, 4);
  set_path_time(scene, kSweepTime, &short_sweep);
  EXPECT_EQ(short_sweep[0].time_index, 0);
  EXPECT_EQ(short_sweep[1].time_index, 8);  // round(23 / 3)
  EXPECT_EQ(short_sweep[2].time_index, 15);
  EXPECT_EQ(short_sweep[3].time_index, 23);

  std::vector<PathFrame> bullet = interpolated_path(scene, {1, 12, 22}, 9);
  set_path_time(scene, 7, &bullet);
  for (const PathFrame& frame : bullet) EXPECT_EQ(frame.time_index, 7);
  EXPECT_NE(bullet[0].camera.c2w[3], bullet[8].camera.c2w[3]);  // the camera moves

  try {
    set_path_time(scene, 24, &bullet);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("time step 24"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fixed_path(scene, 24, 3), InvalidArgument);
  EXPECT_THROW(fixed_path(scene, 0, 0), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::data
