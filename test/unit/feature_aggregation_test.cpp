// Projection and gathering on the CPU backend: texel-exact reads, zero and invalid outside,
// the direction feature, and the backward as the exact adjoint of the (linear) gather.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/geom/projection.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

using synthetic::RandomScene;
using synthetic::RandomSceneSize;

struct Gathered {
  std::vector<double> rgb_features, ray_diff, mask;
};

struct Fixture {
  RandomScene scene;
  std::vector<double> origins, directions, depths;
  int n_samples;
  SourceViews<double> views;

  Fixture(RandomSceneSize size, int samples, uint64_t seed)
      : scene(synthetic::make_random_scene(size, seed)), n_samples(samples) {
    const int R = size.n_rays;
    origins.resize(size_t(R) * 3);
    directions.resize(size_t(R) * 3);
    cpu::generate_rays(scene.target, scene.pixels.data(), R, origins.data(), directions.data());
    depths.resize(size_t(R) * samples);
    cpu::sample_coarse_depths(R, {scene.near_depth, scene.far_depth, samples, false, false},
                              {seed, 0}, 0, depths.data());
    views = synthetic::scene_views(scene, scene.sources.data(), scene.images.data(),
                                   scene.features.data());
  }

  Gathered gather() const {
    const size_t rsv = size_t(scene.size.n_rays) * n_samples * views.n_views;
    Gathered g{std::vector<double>(rsv * (3 + views.feature_channels)),
               std::vector<double>(rsv * 4), std::vector<double>(rsv)};
    cpu::gather_samples(
        scene.size.n_rays, n_samples, origins.data(), directions.data(), depths.data(),
        scene.target.center(), views,
        GatherOutputs<double>{g.rgb_features.data(), g.ray_diff.data(), g.mask.data()});
    return g;
  }
};

TEST(Gather, BilinearReadAtATexelIsThatTexelAndCornersAlign) {
  const std::vector<double> map{0, 1, 2, 3, 4, 5};  // 3 wide, 2 high, 1 channel
  // Image 9x5 maps corner-aligned onto the 3x2 map: pixel (8, 4) is texel (2, 1).
  EXPECT_DOUBLE_EQ(bilinear_read(bilinear_taps(8.0, 4.0, 9, 5, 3, 2), map.data(), 1, 0), 5.0);
  EXPECT_DOUBLE_EQ(bilinear_read(bilinear_taps(4.0, 0.0, 9, 5, 3, 2), map.data(), 1, 0), 1.0);
  EXPECT_DOUBLE_EQ(bilinear_read(bilinear_taps(2.0, 2.0, 9, 5, 3, 2), map.data(), 1, 0),
                   0.25 * (0 + 1 + 3 + 4));
  // Half a texel outside: the outside taps read zero (grid_sample's zero padding).
  EXPECT_DOUBLE_EQ(bilinear_read(bilinear_taps(-2.0, 0.0, 9, 5, 3, 2), map.data(), 1, 0), 0.0);
  EXPECT_DOUBLE_EQ(bilinear_read(bilinear_taps(10.0, 0.0, 9, 5, 3, 2), map.data(), 1, 0),
                   0.5 * 2.0);
}

TEST(Gather, SamplesBehindACameraAreInvalidAndReadZero) {
  RandomSceneSize size;
  size.last_view_faces_away = true;
  const Fixture f(size, 8, 11);
  const Gathered g = f.gather();
  const int V = size.n_views, width = 3 + size.feature_channels;
  int valid_elsewhere = 0;
  for (size_t rs = 0; rs < size_t(size.n_rays) * 8; ++rs) {
    const size_t row = rs * V + (V - 1);
    EXPECT_EQ(g.mask[row], 0.0);
    for (int c = 0; c < width; ++c) EXPECT_EQ(g.rgb_features[row * width + c], 0.0);
    for (int v = 0; v < V - 1; ++v) valid_elsewhere += g.mask[rs * V + v] > 0;
  }
  EXPECT_GT(valid_elsewhere, 0);  // the other views do see the samples
}

TEST(Gather, SamplesBehindEveryCameraGiveAnInvalidRayAndZeroLoss) {
  RandomSceneSize size;
  Fixture f(size, 12, 16);
  for (auto& camera : f.scene.sources) {  // turn every source view away from the scene
    const Vec3<double> eye = camera.center();
    camera = look_at_camera(eye, eye + eye, Vec3<double>{0, 0, 1}, camera.fx, camera.width,
                            camera.height);
  }
  const Gathered g = f.gather();
  for (double m : g.mask) EXPECT_EQ(m, 0.0);
  for (double value : g.rgb_features) EXPECT_EQ(value, 0.0);
  std::vector<double> rays(size.n_rays), loss(2), grad(size_t(size.n_rays) * 3, 1.0);
  cpu::ray_mask(size.n_rays, 12, size.n_views, g.mask.data(), RayMaskRule{}, rays.data());
  for (double r : rays) EXPECT_EQ(r, 0.0);
  const auto predicted = synthetic::random_values(grad.size(), 0, 1, 1);
  const auto target = synthetic::random_values(grad.size(), 0, 1, 2);
  cpu::masked_mse(size.n_rays, predicted.data(), target.data(), rays.data(), loss.data());
  cpu::masked_mse_backward(size.n_rays, predicted.data(), target.data(), rays.data(), loss.data(),
                           1.0, grad.data());
  EXPECT_EQ(loss[0], 0.0);
  for (double value : grad) EXPECT_EQ(value, 0.0);
}

TEST(Gather, SamplesOutsideEveryImageAreInvalidForAllViews) {
  RandomSceneSize size;
  Fixture f(size, 4, 12);
  // Straight up, far above the ring of cameras that look across it: in front of them but
  // far outside every image.
  for (int r = 0; r < size.n_rays; ++r) {
    f.origins[3 * r] = f.origins[3 * r + 1] = 0;
    f.origins[3 * r + 2] = 100;
    f.directions[3 * r] = f.directions[3 * r + 1] = 0;
    f.directions[3 * r + 2] = 1;
  }
  const Gathered g = f.gather();
  for (double m : g.mask) EXPECT_EQ(m, 0.0);
  for (double value : g.rgb_features) EXPECT_EQ(value, 0.0);
}

TEST(Gather, DirectionFeatureIsTheUnitDifferenceOfDirectionsAndTheirCosine) {
  const Fixture f(RandomSceneSize{}, 6, 13);
  const Gathered g = f.gather();
  const int V = f.views.n_views;
  for (size_t row = 0; row < g.mask.size(); ++row) {
    const size_t rs = row / V, r = rs / 6;
    const int v = int(row % V);
    const double z = f.depths[rs];
    const Vec3<double> p{f.origins[3 * r] + z * f.directions[3 * r],
                         f.origins[3 * r + 1] + z * f.directions[3 * r + 1],
                         f.origins[3 * r + 2] + z * f.directions[3 * r + 2]};
    const Vec3<double> a = f.scene.target.center() - p, b = f.scene.sources[v].center() - p;
    const Vec3<double> ua = (1 / norm(a)) * a, ub = (1 / norm(b)) * b;
    const Vec3<double> difference = (1 / norm(ua - ub)) * (ua - ub);
    const double* d = &g.ray_diff[row * 4];
    EXPECT_NEAR(d[0], difference.x, 1e-6);
    EXPECT_NEAR(d[1], difference.y, 1e-6);
    EXPECT_NEAR(d[2], difference.z, 1e-6);
    EXPECT_NEAR(d[3], dot(ua, ub), 1e-6);
  }
}

TEST(Gather, BackwardIsTheAdjointOfTheForward) {
  // gather is linear in (images, features): <g, G x> must equal <G^T g, x>.
  RandomSceneSize size;
  size.n_rays = 24;
  size.feature_channels = 5;
  const Fixture f(size, 12, 14);
  const Gathered g = f.gather();
  const std::vector<double> upstream = synthetic::random_values(g.rgb_features.size(), -1, 1, 99);
  std::vector<double> grad_images(f.scene.images.size(), 0.0),
      grad_features(f.scene.features.size(), 0.0);
  cpu::gather_samples_backward(size.n_rays, 12, f.origins.data(), f.directions.data(),
                               f.depths.data(), f.views, upstream.data(), grad_images.data(),
                               grad_features.data());
  double forward_side = 0, backward_side = 0;
  for (size_t i = 0; i < upstream.size(); ++i) forward_side += upstream[i] * g.rgb_features[i];
  for (size_t i = 0; i < grad_images.size(); ++i)
    backward_side += grad_images[i] * f.scene.images[i];
  for (size_t i = 0; i < grad_features.size(); ++i)
    backward_side += grad_features[i] * f.scene.features[i];
  EXPECT_NEAR(forward_side, backward_side, 1e-10 * std::abs(forward_side));
  EXPECT_NE(forward_side, 0.0);
  // Accumulates: a second call doubles the gradient.
  std::vector<double> twice = grad_features;
  cpu::gather_samples_backward(size.n_rays, 12, f.origins.data(), f.directions.data(),
                               f.depths.data(), f.views, upstream.data(),
                               static_cast<double*>(nullptr), twice.data());
  for (size_t i = 0; i < twice.size(); ++i) {
    EXPECT_NEAR(twice[i], 2 * grad_features[i], 1e-12 * (1 + std::abs(grad_features[i])));
  }
}

// Each thread scatters into its own views, each map's sums in ray and sample order: the gradient
// must come out bit for bit the same on any number of threads, more threads than views included.
TEST(Gather, BackwardIsTheSameOnAnyNumberOfThreads) {
  RandomSceneSize size;
  size.n_rays = 40;
  size.n_views = 5;
  size.feature_channels = 6;
  const Fixture f(size, 16, 23);
  const std::vector<double> upstream = synthetic::random_values(
      size_t(size.n_rays) * 16 * size_t(size.n_views) * size_t(3 + size.feature_channels), -1, 1,
      5);
  auto backward = [&](int threads) {
    std::vector<double> grad_images(f.scene.images.size(), 0.0),
        grad_features(f.scene.features.size(), 0.0);
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    cpu::gather_samples_backward(size.n_rays, 16, f.origins.data(), f.directions.data(),
                                 f.depths.data(), f.views, upstream.data(), grad_images.data(),
                                 grad_features.data());
    omp_set_num_threads(before);
    grad_images.insert(grad_images.end(), grad_features.begin(), grad_features.end());
    return grad_images;
  };
  const std::vector<double> serial = backward(1);
  size_t nonzero = 0;
  for (double g : serial) nonzero += g != 0.0;
  EXPECT_GT(nonzero, serial.size() / 20);
  for (int threads : {2, 3, 4, 7}) {
    const std::vector<double> parallel = backward(threads);
    ASSERT_EQ(parallel.size(), serial.size());
    size_t differing = 0;
    for (size_t i = 0; i < serial.size(); ++i) differing += parallel[i] != serial[i];
    EXPECT_EQ(differing, 0u) << threads << " threads";
  }
}

TEST(Gather, TinySourceImagesAreRejected) {
  RandomSceneSize size;
  Fixture f(size, 2, 15);
  f.views.feature_width = 1;
  EXPECT_THROW(f.gather(), InvalidArgument);
}

}  // namespace
}  // namespace mvibr
