// The synthetic scene: a valid Scene with the requested layout, reproducible bytes whatever the
// thread count, near/far that hold every exact depth, and the properties that make it worth
// training on (texture, occlusion, view dependence, motion only where objects move).
#include "mvibr/data/synthetic_scene.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "mvibr/core/error.h"
#include "mvibr/geom/projection.h"

namespace mvibr::data {
namespace {

// Restores OpenMP's thread count when a test that changes it ends.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

int max_channel_difference(const std::vector<uint8_t>& a, size_t i, const std::vector<uint8_t>& b,
                           size_t j) {
  int worst = 0;
  for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(int(a[3 * i + c]) - b[3 * j + c]));
  return worst;
}

TEST(SyntheticScene, IsAValidStaticSceneWithTheRequestedLayout) {
  SyntheticSceneOptions options;
  const Scene scene = make_synthetic_scene(options);
  EXPECT_NO_THROW(validate_scene(scene));
  EXPECT_EQ(scene.name, "synthetic");
  EXPECT_EQ(scene.source_format, "synthetic");
  EXPECT_FALSE(scene.dynamic);
  EXPECT_TRUE(scene.neighbours.empty());
  ASSERT_EQ(scene.views.size(), 24u);
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View& v = scene.views[i];
    EXPECT_EQ(v.camera.width, 64);
    EXPECT_EQ(v.camera.height, 48);
    EXPECT_EQ(v.split, i % 8 == 0 ? Split::kTest : Split::kTrain) << i;
    EXPECT_EQ(v.time, 0.0);
    EXPECT_EQ(v.time_index, 0);
  }
  EXPECT_EQ(scene.views[12].name, "synthetic/t000/v012");
}

TEST(SyntheticScene, DynamicSceneRendersEveryCameraAtEveryTimeStep) {
  SyntheticSceneOptions options;
  options.n_views = 5;
  options.n_time_steps = 3;
  options.n_test_every = 2;
  const Scene scene = make_synthetic_scene(options);
  EXPECT_NO_THROW(validate_scene(scene));
  EXPECT_TRUE(scene.dynamic);
  ASSERT_EQ(scene.views.size(), 15u);
  for (int t = 0; t < 3; ++t) {
    for (int c = 0; c < 5; ++c) {
      const View& v = scene.views[size_t(t * 5 + c)];
      EXPECT_EQ(v.time_index, t);
      EXPECT_DOUBLE_EQ(v.time, 0.5 * t);
      EXPECT_EQ(v.split, c % 2 == 0 ? Split::kTest : Split::kTrain);
      for (int i = 0; i < 12; ++i) EXPECT_EQ(v.camera.c2w[i], scene.views[size_t(c)].camera.c2w[i]);
    }
  }
  EXPECT_EQ(scene.views[14].name, "synthetic/t002/v004");
}

TEST(SyntheticScene, BytesDependOnTheSeedButNotOnTheThreadCount) {
  SyntheticSceneOptions options;
  options.n_views = 4;
  options.n_time_steps = 2;
  Scene one_thread, two_threads;
  {
    ThreadCount threads(1);
    one_thread = make_synthetic_scene(options);
  }
  {
    ThreadCount threads(2);
    two_threads = make_synthetic_scene(options);
  }
  const Scene again = make_synthetic_scene(options);
  options.seed = 1;
  const Scene other_seed = make_synthetic_scene(options);
  for (size_t i = 0; i < one_thread.views.size(); ++i) {
    EXPECT_EQ(one_thread.views[i].rgb, two_threads.views[i].rgb) << i;
    EXPECT_EQ(one_thread.views[i].rgb, again.views[i].rgb) << i;
    EXPECT_NE(one_thread.views[i].rgb, other_seed.views[i].rgb) << i;
  }
}

TEST(SyntheticScene, RenderingAnyCameraReproducesTheScenesViews) {
  SyntheticSceneOptions options;
  options.n_views = 3;
  options.n_time_steps = 2;
  const Scene scene = make_synthetic_scene(options);
  for (const View& v : scene.views) {
    EXPECT_EQ(render_synthetic_rgb(options, v.camera, v.time_index), v.rgb) << v.name;
  }
  EXPECT_THROW(render_synthetic_depth(options, scene.views[0].camera, 2), InvalidArgument);
}

// Every finite depth of every view lies in [near, far], and the bounds are not loose.
void expect_depth_bounds_hold(const SyntheticSceneOptions& options) {
  const Scene scene = make_synthetic_scene(options);
  for (const View& v : scene.views) {
    const std::vector<float> depth = render_synthetic_depth(options, v.camera, v.time_index);
    float lo = INFINITY, hi = 0;
    for (float d : depth) {
      if (!std::isfinite(d)) continue;
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    ASSERT_TRUE(std::isfinite(lo)) << v.name << " sees nothing";
    EXPECT_GE(lo, v.near_depth) << v.name;
    EXPECT_LE(hi, v.far_depth) << v.name;
    EXPECT_GT(hi - lo, 0.4 * (v.far_depth - v.near_depth)) << v.name;
  }
}

TEST(SyntheticScene, NearAndFarHoldEveryDepthOnTheOrbit) {
  SyntheticSceneOptions options;
  options.width = 96;
  options.height = 72;
  options.n_views = 12;
  options.n_time_steps = 3;
  options.orbit_min_elevation_degrees = -10;  // some cameras see the ground from below
  expect_depth_bounds_hold(options);
}

TEST(SyntheticScene, NearAndFarHoldEveryDepthFacingForward) {
  SyntheticSceneOptions options;
  options.width = 96;
  options.height = 72;
  options.n_views = 9;
  options.rig = "forward";
  options.n_time_steps = 3;
  expect_depth_bounds_hold(options);
}

TEST(SyntheticScene, HasTextureAndOcclusion) {
  SyntheticSceneOptions options;
  const Scene scene = make_synthetic_scene(options);
  for (const View& v : scene.views) {
    const int w = v.camera.width, h = v.camera.height;
    double sum = 0, sum_squares = 0;
    for (uint8_t value : v.rgb) {
      sum += value;
      sum_squares += double(value) * value;
    }
    const double mean = sum / v.rgb.size();
    EXPECT_GT(sum_squares / v.rgb.size() - mean * mean, 400.0) << v.name << " is flat";
    // An occlusion edge: two neighbouring pixels that both hit geometry at very different depths.
    const std::vector<float> depth = render_synthetic_depth(options, v.camera, 0);
    int edges = 0;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x + 1 < w; ++x) {
        const float a = depth[size_t(y) * w + x], b = depth[size_t(y) * w + x + 1];
        if (std::isfinite(a) && std::isfinite(b) && std::max(a, b) > 1.3f * std::min(a, b)) {
          ++edges;
        }
      }
    }
    EXPECT_GT(edges, 3) << v.name << " shows no occlusion";
  }
}

// For the points of view a that view b sees too (the depths agree), the largest channel
// difference between the two views' pixels; only points that project within 0.3 pixel of a
// pixel centre of b.
std::vector<int> colour_differences_of_shared_points(const SyntheticSceneOptions& options,
                                                     const View& a, const View& b) {
  const std::vector<float> depth_a = render_synthetic_depth(options, a.camera, 0);
  const std::vector<float> depth_b = render_synthetic_depth(options, b.camera, 0);
  const std::vector<uint8_t> rgb_a = render_synthetic_rgb(options, a.camera, 0);
  const std::vector<uint8_t> rgb_b = render_synthetic_rgb(options, b.camera, 0);
  const int w = a.camera.width, h = a.camera.height;
  std::vector<int> differences;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const size_t i = size_t(y) * w + x;
      if (!std::isfinite(depth_a[i])) continue;
      Vec3<double> origin, direction;
      pixel_to_ray(a.camera, double(x), double(y), &origin, &direction);
      const Vec3<double> point = origin + double(depth_a[i]) * direction;
      const Projection<double> p = project_point(b.camera, point, w, h);
      if (!p.valid) continue;
      const double u = std::round(p.u), v = std::round(p.v);
      if (std::abs(u - p.u) > 0.3 || std::abs(v - p.v) > 0.3) continue;
      const size_t j = size_t(v) * w + size_t(u);
      const double z_in_b = transform_point(b.camera.w2c, point).z;
      if (std::abs(depth_b[j] - z_in_b) > 0.005 * z_in_b) continue;  // occluded in b
      differences.push_back(max_channel_difference(rgb_a, i, rgb_b, j));
    }
  }
  return differences;
}

TEST(SyntheticScene, ColoursDependOnTheViewpoint) {
  SyntheticSceneOptions options;
  options.width = 240;
  options.height = 180;
  options.samples_per_side = 1;  // a point's colour, not a footprint's
  const Scene scene = make_synthetic_scene(options);
  const View& a = scene.views[0];
  const View& b = scene.views[2];
  const std::vector<int> shiny = colour_differences_of_shared_points(options, a, b);
  options.specular_strength = 0;
  const std::vector<int> matte = colour_differences_of_shared_points(options, a, b);
  ASSERT_EQ(shiny.size(), matte.size());  // the same geometry, so the same shared points
  ASSERT_GT(matte.size(), 2000u);
  // Without highlights and reflections a point has one colour from every view (up to texture
  // edges between the two sample positions); with them, many such points change colour.
  size_t consistent = 0, view_dependent = 0;
  for (size_t i = 0; i < matte.size(); ++i) {
    if (matte[i] > 2) continue;
    ++consistent;
    if (shiny[i] > 8) ++view_dependent;
  }
  EXPECT_GT(consistent, 0.95 * matte.size());
  EXPECT_GT(view_dependent, 0.1 * consistent);
}

TEST(SyntheticScene, TimeStepsDifferOnlyWhereObjectsMove) {
  SyntheticSceneOptions options;
  options.n_views = 6;
  options.n_time_steps = 2;
  // Moving shadows and reflections of moving objects change static surfaces; without them only
  // the moving objects' pixels may change.
  options.shadows = false;
  options.specular_strength = 0;
  const Scene scene = make_synthetic_scene(options);
  int changed_pixels = 0;
  for (int c = 0; c < options.n_views; ++c) {
    const View& before = scene.views[size_t(c)];
    const View& after = scene.views[size_t(options.n_views + c)];
    const std::vector<float> depth_before = render_synthetic_depth(options, before.camera, 0);
    const std::vector<float> depth_after = render_synthetic_depth(options, after.camera, 1);
    const int w = before.camera.width, h = before.camera.height;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const size_t i = size_t(y) * w + x;
        if (max_channel_difference(before.rgb, i, after.rgb, i) == 0) continue;
        ++changed_pixels;
        // Sub-pixel samples reach half a pixel, so the geometry changed within one pixel.
        bool moved = false;
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            const int xx = std::clamp(x + dx, 0, w - 1), yy = std::clamp(y + dy, 0, h - 1);
            const size_t j = size_t(yy) * w + xx;
            moved = moved || depth_before[j] != depth_after[j];
          }
        }
        EXPECT_TRUE(moved) << after.name << " changed at (" << x << ", " << y << ")";
      }
    }
  }
  EXPECT_GT(changed_pixels, 50);
  EXPECT_LT(changed_pixels, options.n_views * 64 * 48 / 2);
}

// Rigid poses whose optical axes pass near the middle of the objects (the ground disc has
// radius 2) and whose pixels mostly hit geometry.
void expect_rig_looks_at_content(const SyntheticSceneOptions& options) {
  const Scene scene = make_synthetic_scene(options);
  double hit_fraction_sum = 0;
  for (const View& v : scene.views) {
    EXPECT_EQ(check_rigid_pose(v.camera.c2w), "") << v.name;
    const Vec3<double> eye = v.camera.center();
    const Vec3<double> axis{v.camera.c2w[2], v.camera.c2w[6], v.camera.c2w[10]};
    const Vec3<double> to_middle = Vec3<double>{0, 0, 0.35} - eye;
    const Vec3<double> miss = to_middle - dot(to_middle, axis) * axis;
    EXPECT_LT(norm(miss), 0.5) << v.name << " looks away from the content";
    const std::vector<float> depth = render_synthetic_depth(options, v.camera, 0);
    const double hits =
        double(std::count_if(depth.begin(), depth.end(), [](float d) { return std::isfinite(d); }));
    EXPECT_GT(hits / depth.size(), 0.4) << v.name;
    hit_fraction_sum += hits / depth.size();
  }
  EXPECT_GT(hit_fraction_sum / scene.views.size(), 0.5);
}

TEST(SyntheticScene, OrbitRigSurroundsTheContent) {
  SyntheticSceneOptions options;
  expect_rig_looks_at_content(options);
  const Scene scene = make_synthetic_scene(options);
  for (const View& v : scene.views) {
    EXPECT_NEAR(norm(v.camera.center() - Vec3<double>{0, 0, 0.35}), options.orbit_radius, 1e-9);
  }
}

TEST(SyntheticScene, ForwardRigIsAPlanarGridWithOneRotation) {
  SyntheticSceneOptions options;
  options.rig = "forward";
  options.n_views = 10;
  expect_rig_looks_at_content(options);
  const Scene scene = make_synthetic_scene(options);
  const PinholeCamera<double>& first = scene.views[0].camera;
  const Vec3<double> axis{first.c2w[2], first.c2w[6], first.c2w[10]};
  for (const View& v : scene.views) {
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(v.camera.c2w[r * 4 + c], first.c2w[r * 4 + c]);
    }
    EXPECT_NEAR(dot(v.camera.center() - first.center(), axis), 0.0, 1e-9) << v.name;
  }
}

TEST(SyntheticScene, OneTinyViewWorks) {
  SyntheticSceneOptions options;
  options.width = 2;
  options.height = 2;
  options.n_views = 1;
  const Scene scene = make_synthetic_scene(options);
  EXPECT_NO_THROW(validate_scene(scene));
  ASSERT_EQ(scene.views.size(), 1u);
  EXPECT_EQ(scene.views[0].rgb.size(), 12u);
}

TEST(SyntheticScene, RejectsBadOptionsNamingThem) {
  const auto expect_rejected = [](const std::function<void(SyntheticSceneOptions*)>& spoil,
                                  const std::string& option) {
    SyntheticSceneOptions options;
    spoil(&options);
    try {
      make_synthetic_scene(options);
      ADD_FAILURE() << option << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
  };
  expect_rejected([](SyntheticSceneOptions* o) { o->width = 1; }, "width");
  expect_rejected([](SyntheticSceneOptions* o) { o->height = 0; }, "height");
  expect_rejected([](SyntheticSceneOptions* o) { o->n_views = 0; }, "n_views");
  expect_rejected([](SyntheticSceneOptions* o) { o->n_time_steps = 0; }, "n_time_steps");
  expect_rejected([](SyntheticSceneOptions* o) { o->rig = "spiral"; }, "rig");
  expect_rejected([](SyntheticSceneOptions* o) { o->n_test_every = -1; }, "n_test_every");
  expect_rejected([](SyntheticSceneOptions* o) { o->fov_x_degrees = 180; }, "fov_x_degrees");
  expect_rejected([](SyntheticSceneOptions* o) { o->orbit_radius = NAN; }, "orbit_radius");
  expect_rejected([](SyntheticSceneOptions* o) { o->orbit_max_elevation_degrees = 0; },
                  "orbit_max_elevation_degrees");
  expect_rejected([](SyntheticSceneOptions* o) { o->samples_per_side = 0; }, "samples_per_side");
  // A camera inside the content would need near <= 0.
  expect_rejected([](SyntheticSceneOptions* o) { o->orbit_radius = 1.0; }, "orbit_radius");
  expect_rejected(
      [](SyntheticSceneOptions* o) {
        o->rig = "forward";
        o->forward_distance = 0.5;
      },
      "forward_distance");
}

}  // namespace
}  // namespace mvibr::data
