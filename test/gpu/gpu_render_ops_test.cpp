// Every mvibr::cuda op against the mvibr::cpu float backend on the same random inputs. Both run
// the same per-ray math, so the bounds are rounding bounds: FMA contraction and CUDA's expf
// differ by a few ulp, and atomics reorder the sums of the gather backward. Plain C++ (device
// memory through core/device.h), so it builds in every build: without the CUDA backend it is
// one skipped test, and without a device every test skips.
#include <gtest/gtest.h>

#if MVIBR_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/geom/ray_sampling.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

using synthetic::cast_values;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

std::vector<float> random_floats(size_t count, double lo, double hi, uint64_t seed) {
  return cast_values<float>(synthetic::random_values(count, lo, hi, seed));
}

// Depths as the pipeline makes them: stratified, ascending along each ray.
std::vector<float> coarse_depths(int n_rays, int n_samples, bool inv_uniform, uint64_t seed) {
  std::vector<float> depths(size_t(n_rays) * n_samples);
  cpu::sample_coarse_depths(n_rays, {2.0, 6.0, n_samples, inv_uniform, false}, {seed, 0}, 0,
                            depths.data());
  return depths;
}

const float* data_or_null(const std::vector<float>& values, bool present) {
  return present ? values.data() : nullptr;
}

TEST_F(CudaOps, GenerateRaysMatchCpu) {
  for (int n_rays : {1, 1000, 100000}) {
    SCOPED_TRACE("n_rays " + std::to_string(n_rays));
    synthetic::RandomSceneSize size;
    size.n_rays = n_rays;
    const synthetic::RandomScene scene = synthetic::make_random_scene(size, 1);
    const PinholeCamera<float> camera = camera_cast<float>(scene.target);
    const std::vector<float> pixels = cast_values<float>(scene.pixels);
    std::vector<float> origins(size_t(n_rays) * 3), directions(size_t(n_rays) * 3);
    cpu::generate_rays(camera, pixels.data(), n_rays, origins.data(), directions.data());

    const DeviceArray<float> device_pixels(pixels);
    DeviceArray<float> device_origins(origins.size()), device_directions(directions.size());
    cuda::generate_rays(camera, device_pixels.data(), n_rays, device_origins.data(),
                        device_directions.data(), nullptr);
    device_synchronize();
    EXPECT_LE(normwise_relative_error(device_origins.to_host(), origins), 1e-6);
    EXPECT_LE(normwise_relative_error(device_directions.to_host(), directions), 1e-6);
  }
}

TEST_F(CudaOps, CoarseDepthsMatchCpu) {
  // High bits in seed and step, and a ray offset: every counter word is exercised.
  const RandomKey key{0x0123456789abcdefull, (uint64_t(1) << 32) + 5};
  const uint32_t first_ray = 1u << 20;
  for (int n_rays : {1, 333, 4096}) {
    for (int n_samples : {1, 2, 64, kMaxSamplesPerRay}) {
      for (bool inv_uniform : {false, true}) {
        for (bool deterministic : {false, true}) {
          SCOPED_TRACE("rays " + std::to_string(n_rays) + " samples " + std::to_string(n_samples) +
                       " inv_uniform " + std::to_string(inv_uniform) + " det " +
                       std::to_string(deterministic));
          const DepthSampling sampling{2.0, 6.0, n_samples, inv_uniform, deterministic};
          std::vector<float> depths(size_t(n_rays) * n_samples);
          cpu::sample_coarse_depths(n_rays, sampling, key, first_ray, depths.data());

          DeviceArray<float> device_depths(depths.size());
          cuda::sample_coarse_depths(n_rays, sampling, key, first_ray, device_depths.data(),
                                     nullptr);
          device_synchronize();
          EXPECT_LE(normwise_relative_error(device_depths.to_host(), depths), 1e-6);
        }
      }
    }
  }
}

TEST_F(CudaOps, ImportanceDepthsMatchCpu) {
  const RandomKey key{77, 3};
  // n_coarse + n_importance of 4, 128, 254 and 500 reach each local-memory capacity.
  const int configs[][2] = {{3, 1}, {64, 64}, {64, 190}, {100, 400}};
  for (int n_rays : {1, 257, 2048}) {
    for (const auto& config : configs) {
      for (bool inv_uniform : {false, true}) {
        for (bool deterministic : {false, true}) {
          const int n_coarse = config[0], n_importance = config[1];
          SCOPED_TRACE("rays " + std::to_string(n_rays) + " coarse " + std::to_string(n_coarse) +
                       " importance " + std::to_string(n_importance) + " inv_uniform " +
                       std::to_string(inv_uniform) + " det " + std::to_string(deterministic));
          const ImportanceSampling sampling{n_coarse, n_importance, inv_uniform, deterministic};
          const std::vector<float> z = coarse_depths(n_rays, n_coarse, inv_uniform, 5);
          // Cubed uniforms: peaked weights with many near-empty bins, as after training.
          std::vector<float> weights = random_floats(z.size(), 0, 1, 6);
          for (float& w : weights) w = w * w * w;
          std::vector<float> merged(size_t(n_rays) * (n_coarse + n_importance));
          cpu::sample_importance_depths(n_rays, sampling, z.data(), weights.data(), key, 9,
                                        merged.data());

          const DeviceArray<float> device_z(z), device_weights(weights);
          DeviceArray<float> device_merged(merged.size());
          cuda::sample_importance_depths(n_rays, sampling, device_z.data(), device_weights.data(),
                                         key, 9, device_merged.data(), nullptr);
          device_synchronize();
          EXPECT_LE(normwise_relative_error(device_merged.to_host(), merged), 1e-5);
        }
      }
    }
  }
}

struct GatherCase {
  synthetic::RandomSceneSize size;
  int n_samples;
  bool with_grad_images;
};

std::string describe(const GatherCase& c) {
  return "views " + std::to_string(c.size.n_views) + " image " +
         std::to_string(c.size.image_width) + "x" + std::to_string(c.size.image_height) +
         " features " + std::to_string(c.size.feature_width) + "x" +
         std::to_string(c.size.feature_height) + "x" + std::to_string(c.size.feature_channels) +
         " rays " + std::to_string(c.size.n_rays) + " samples " + std::to_string(c.n_samples);
}

// A gather case's scene, rays and depths, its views on the host and on the device.
struct GatherProblem {
  GatherProblem(const GatherCase& c, uint64_t seed)
      : scene(synthetic::make_random_scene(c.size, seed)),
        cameras(synthetic::cast_cameras<float>(scene.sources)),
        images(cast_values<float>(scene.images)),
        features(cast_values<float>(scene.features)),
        target(camera_cast<float>(scene.target)),
        pixels(cast_values<float>(scene.pixels)),
        origins(size_t(c.size.n_rays) * 3),
        directions(size_t(c.size.n_rays) * 3),
        depths(coarse_depths(c.size.n_rays, c.n_samples, false, seed + 1)),
        views(synthetic::scene_views(scene, cameras.data(), images.data(), features.data())),
        device_cameras(cameras),
        device_images(images),
        device_features(features),
        device_views(views) {
    cpu::generate_rays(target, pixels.data(), c.size.n_rays, origins.data(), directions.data());
    device_views.cameras = device_cameras.data();
    device_views.images = device_images.data();
    device_views.features = device_features.data();
  }
  synthetic::RandomScene scene;
  std::vector<PinholeCamera<float>> cameras;
  std::vector<float> images, features;
  PinholeCamera<float> target;
  std::vector<float> pixels, origins, directions, depths;
  SourceViews<float> views;
  DeviceArray<PinholeCamera<float>> device_cameras;
  DeviceArray<float> device_images, device_features;
  SourceViews<float> device_views;
};

TEST_F(CudaOps, GatherAndItsBackwardMatchCpu) {
  // Feature maps below image resolution; no features at all; 3 + 45 channels, more than a
  // warp has lanes. Facing-away last views put samples behind a camera.
  const GatherCase cases[] = {
      {{1, 8, 6, 2, 2, 0, 1, false}, 1, true},
      {{3, 32, 24, 8, 6, 8, 37, true}, 16, false},
      {{8, 64, 48, 16, 12, 45, 128, true}, 64, true},
  };
  for (const GatherCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const GatherProblem p(c, 21);
    const int n_rays = c.size.n_rays, n_samples = c.n_samples, n_views = c.size.n_views;
    const int width = 3 + c.size.feature_channels;
    const auto &images = p.images, &features = p.features, &origins = p.origins,
               &directions = p.directions, &depths = p.depths;
    const PinholeCamera<float>& target = p.target;
    const SourceViews<float>& views = p.views;
    const SourceViews<float>& device_views = p.device_views;
    const size_t n_triples = size_t(n_rays) * n_samples * n_views;
    std::vector<float> rgb_features(n_triples * width), ray_diff(n_triples * 4), mask(n_triples);
    cpu::gather_samples(n_rays, n_samples, origins.data(), directions.data(), depths.data(),
                        target.center(), views,
                        {rgb_features.data(), ray_diff.data(), mask.data()});

    const DeviceArray<float> device_origins(origins), device_directions(directions),
        device_depths(depths);
    DeviceArray<float> device_rgb_features(rgb_features.size()), device_ray_diff(ray_diff.size()),
        device_mask(mask.size());
    cuda::gather_samples(n_rays, n_samples, device_origins.data(), device_directions.data(),
                         device_depths.data(), target.center(), device_views,
                         {device_rgb_features.data(), device_ray_diff.data(), device_mask.data()},
                         nullptr);
    device_synchronize();
    // Random texels change by up to 1 per pixel, so the projection's rounding (FMA contraction:
    // ~1e-6 pixel) reaches ~1e-5 in colour; an indexing error would be of order 1.
    EXPECT_LE(normwise_relative_error(device_rgb_features.to_host(), rgb_features), 1e-4);
    EXPECT_LE(normwise_relative_error(device_ray_diff.to_host(), ray_diff), 1e-5);
    // A sample within an ulp of an image border may land on the other side: allow one, and
    // one more per 10^5 samples.
    const std::vector<float> gpu_mask = device_mask.to_host();
    size_t mask_flips = 0, valid = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      mask_flips += gpu_mask[i] != mask[i];
      valid += mask[i] > 0;
    }
    EXPECT_LE(mask_flips, 1 + n_triples / 100000);
    if (n_triples > 1) {  // both outcomes are exercised
      EXPECT_GT(valid, 0u);
      EXPECT_LT(valid, n_triples);
    }

    // Backward into nonzero gradients: the op must accumulate, not overwrite.
    const std::vector<float> grad_rows = random_floats(rgb_features.size(), -1, 1, 23);
    std::vector<float> grad_images = random_floats(images.size(), -1, 1, 24);
    std::vector<float> grad_features = random_floats(features.size(), -1, 1, 25);
    DeviceArray<float> device_grad_images(grad_images), device_grad_features(grad_features);
    const DeviceArray<float> device_grad_rows(grad_rows);
    cpu::gather_samples_backward(
        n_rays, n_samples, origins.data(), directions.data(), depths.data(), views,
        grad_rows.data(), c.with_grad_images ? grad_images.data() : nullptr, grad_features.data());
    cuda::gather_samples_backward(n_rays, n_samples, device_origins.data(),
                                  device_directions.data(), device_depths.data(), device_views,
                                  device_grad_rows.data(),
                                  c.with_grad_images ? device_grad_images.data() : nullptr,
                                  device_grad_features.data(), nullptr);
    device_synchronize();
    EXPECT_LE(normwise_relative_error(device_grad_images.to_host(), grad_images), 1e-4);
    EXPECT_LE(normwise_relative_error(device_grad_features.to_host(), grad_features), 1e-4);
  }
}

// DynIBaR's moving samples: every view reads its own point, and the backward also gives the
// points' gradient.
TEST_F(CudaOps, MovedGatherAndItsBackwardMatchCpu) {
  const GatherCase c{{3, 32, 24, 8, 6, 37, 37, true}, 16, true};
  const GatherProblem p(c, 31);
  const int n_rays = c.size.n_rays, n_samples = c.n_samples, n_views = c.size.n_views;
  const int width = 3 + c.size.feature_channels;
  const auto &images = p.images, &features = p.features, &origins = p.origins,
             &directions = p.directions, &depths = p.depths;
  const PinholeCamera<float>& target = p.target;
  const SourceViews<float>& views = p.views;
  const SourceViews<float>& device_views = p.device_views;
  const size_t n_samples_all = size_t(n_rays) * n_samples, n_triples = n_samples_all * n_views;
  std::vector<float> points(n_samples_all * 3), moved(n_triples * 3);
  const std::vector<float> shifts = random_floats(moved.size(), -0.1, 0.1, 33);
  for (size_t rs = 0; rs < n_samples_all; ++rs) {
    for (int k = 0; k < 3; ++k) {
      points[rs * 3 + k] =
          origins[rs / n_samples * 3 + k] + depths[rs] * directions[rs / n_samples * 3 + k];
      for (int v = 0; v < n_views; ++v) {
        const size_t i = (rs * n_views + v) * 3 + k;
        moved[i] = points[rs * 3 + k] + shifts[i];
      }
    }
  }
  std::vector<float> rgb_features(n_triples * width), ray_diff(n_triples * 4), mask(n_triples);
  cpu::gather_moved_samples(n_rays, n_samples, points.data(), moved.data(), target.center(), views,
                            {rgb_features.data(), ray_diff.data(), mask.data()});

  const DeviceArray<float> device_points(points), device_moved(moved);
  DeviceArray<float> device_rgb_features(rgb_features.size()), device_ray_diff(ray_diff.size()),
      device_mask(mask.size());
  cuda::gather_moved_samples(
      n_rays, n_samples, device_points.data(), device_moved.data(), target.center(), device_views,
      {device_rgb_features.data(), device_ray_diff.data(), device_mask.data()}, nullptr);
  device_synchronize();
  EXPECT_LE(normwise_relative_error(device_rgb_features.to_host(), rgb_features), 1e-4);
  EXPECT_LE(normwise_relative_error(device_ray_diff.to_host(), ray_diff), 1e-5);
  EXPECT_EQ(device_mask.to_host(), mask);

  const std::vector<float> grad_rows = random_floats(rgb_features.size(), -1, 1, 34);
  std::vector<float> grad_images(images.size(), 0.0f), grad_features(features.size(), 0.0f),
      grad_moved(moved.size());
  DeviceArray<float> device_grad_images(grad_images), device_grad_features(grad_features),
      device_grad_moved(grad_moved.size());
  const DeviceArray<float> device_grad_rows(grad_rows);
  cpu::gather_moved_samples_backward(n_rays, n_samples, moved.data(), views, grad_rows.data(),
                                     grad_moved.data(), grad_images.data(), grad_features.data());
  cuda::gather_moved_samples_backward(
      n_rays, n_samples, device_moved.data(), device_views, device_grad_rows.data(),
      device_grad_moved.data(), device_grad_images.data(), device_grad_features.data(), nullptr);
  device_synchronize();
  EXPECT_LE(normwise_relative_error(device_grad_images.to_host(), grad_images), 1e-4);
  EXPECT_LE(normwise_relative_error(device_grad_features.to_host(), grad_features), 1e-4);
  // A point within an ulp of a texel edge could take the other cell's slope; none does here.
  EXPECT_LE(normwise_relative_error(device_grad_moved.to_host(), grad_moved), 1e-4);
}

TEST_F(CudaOps, CompositeAndItsBackwardMatchCpu) {
  const int sizes[][2] = {{1, 1}, {100, 64}, {2000, 192}};
  for (const auto& size : sizes) {
    const int n_rays = size[0], n_samples = size[1];
    const size_t n_values = size_t(n_rays) * n_samples;
    const std::vector<float> sigma = random_floats(n_values, 0, 4, 31);
    const std::vector<float> rgb = random_floats(3 * n_values, 0, 1, 32);
    const std::vector<float> depths = coarse_depths(n_rays, n_samples, false, 33);
    const std::vector<float> directions = random_floats(size_t(n_rays) * 3, -1, 1, 34);
    const std::vector<float> grad_rgb_map = random_floats(size_t(n_rays) * 3, -1, 1, 35);
    const std::vector<float> grad_depth_map = random_floats(n_rays, -1, 1, 36);
    const std::vector<float> grad_acc_map = random_floats(n_rays, -1, 1, 37);
    const std::vector<float> grad_weights = random_floats(n_values, -1, 1, 38);
    const DeviceArray<float> device_sigma(sigma), device_rgb(rgb), device_depths(depths),
        device_directions(directions), device_grad_rgb_map(grad_rgb_map),
        device_grad_depth_map(grad_depth_map), device_grad_acc_map(grad_acc_map),
        device_grad_weights(grad_weights);
    for (DeltaMode mode : {DeltaMode::kUnit, DeltaMode::kInterval}) {
      for (bool white_background : {false, true}) {
        // `all_inputs` false: no directions (|d| = 1) and no optional gradients.
        for (bool all_inputs : {false, true}) {
          SCOPED_TRACE("rays " + std::to_string(n_rays) + " samples " + std::to_string(n_samples) +
                       " interval " + std::to_string(mode == DeltaMode::kInterval) + " white " +
                       std::to_string(white_background) + " all inputs " +
                       std::to_string(all_inputs));
          const CompositeOptions options{mode, white_background};
          std::vector<float> rgb_map(size_t(n_rays) * 3), depth_map(n_rays), acc_map(n_rays),
              weights(n_values);
          cpu::composite_rays(n_rays, n_samples, sigma.data(), rgb.data(), depths.data(),
                              data_or_null(directions, all_inputs), options, rgb_map.data(),
                              depth_map.data(), acc_map.data(), weights.data());
          std::vector<float> grad_sigma(n_values), grad_rgb(3 * n_values);
          cpu::composite_rays_backward(
              n_rays, n_samples, sigma.data(), rgb.data(), depths.data(),
              data_or_null(directions, all_inputs), options, grad_rgb_map.data(),
              data_or_null(grad_depth_map, all_inputs), data_or_null(grad_acc_map, all_inputs),
              data_or_null(grad_weights, all_inputs), grad_sigma.data(), grad_rgb.data());

          const float* device_directions_or_null = all_inputs ? device_directions.data() : nullptr;
          DeviceArray<float> device_rgb_map(rgb_map.size()), device_depth_map(n_rays),
              device_acc_map(n_rays), device_weights(n_values), device_grad_sigma(n_values),
              device_grad_rgb(3 * n_values);
          cuda::composite_rays(n_rays, n_samples, device_sigma.data(), device_rgb.data(),
                               device_depths.data(), device_directions_or_null, options,
                               device_rgb_map.data(), device_depth_map.data(),
                               device_acc_map.data(), device_weights.data(), nullptr);
          cuda::composite_rays_backward(n_rays, n_samples, device_sigma.data(), device_rgb.data(),
                                        device_depths.data(), device_directions_or_null, options,
                                        device_grad_rgb_map.data(),
                                        all_inputs ? device_grad_depth_map.data() : nullptr,
                                        all_inputs ? device_grad_acc_map.data() : nullptr,
                                        all_inputs ? device_grad_weights.data() : nullptr,
                                        device_grad_sigma.data(), device_grad_rgb.data(), nullptr);
          device_synchronize();
          EXPECT_LE(normwise_relative_error(device_rgb_map.to_host(), rgb_map), 1e-5);
          EXPECT_LE(normwise_relative_error(device_depth_map.to_host(), depth_map), 1e-5);
          EXPECT_LE(normwise_relative_error(device_acc_map.to_host(), acc_map), 1e-5);
          EXPECT_LE(normwise_relative_error(device_weights.to_host(), weights), 1e-5);
          EXPECT_LE(normwise_relative_error(device_grad_sigma.to_host(), grad_sigma), 1e-4);
          EXPECT_LE(normwise_relative_error(device_grad_rgb.to_host(), grad_rgb), 1e-4);
        }
      }
    }
  }
}

TEST_F(CudaOps, DynibarCompositeAndItsBackwardMatchCpu) {
  const int sizes[][2] = {{1, 1}, {300, 64}};
  for (const auto& size : sizes) {
    const int n_rays = size[0], n_samples = size[1];
    const size_t n_values = size_t(n_rays) * n_samples;
    // Raw densities on both sides of softplus's threshold (20) and deep in empty space.
    std::vector<float> sigma_static = random_floats(n_values, -4, 4, 41);
    std::vector<float> sigma_dynamic = random_floats(n_values, -4, 4, 42);
    for (size_t i = 0; i < n_values; i += 9) sigma_static[i] = 25;
    for (size_t i = 4; i < n_values; i += 9) sigma_dynamic[i] = -40;
    const std::vector<float> rgb_static = random_floats(3 * n_values, 0, 1, 43);
    const std::vector<float> rgb_dynamic = random_floats(3 * n_values, 0, 1, 44);
    const std::vector<float> depths = coarse_depths(n_rays, n_samples, false, 45);
    std::vector<std::vector<float>> grad_out;
    for (int k = 0; k < 5; ++k) {
      grad_out.push_back(random_floats(k == 0   ? 3 * size_t(n_rays)
                                       : k == 1 ? n_rays
                                                : n_values,
                                       -1, 1, 46 + k));
    }
    const DeviceArray<float> d_sigma_static(sigma_static), d_sigma_dynamic(sigma_dynamic),
        d_rgb_static(rgb_static), d_rgb_dynamic(rgb_dynamic), d_depths(depths),
        d_grad_rgb(grad_out[0]), d_grad_depth(grad_out[1]), d_grad_w(grad_out[2]),
        d_grad_ws(grad_out[3]), d_grad_wd(grad_out[4]);
    for (DynamicComposite mode :
         {DynamicComposite::kBoth, DynamicComposite::kStaticOnly, DynamicComposite::kDynamicOnly}) {
      SCOPED_TRACE("rays " + std::to_string(n_rays) + " mode " + std::to_string(int(mode)));
      std::vector<std::vector<float>> out{
          std::vector<float>(3 * size_t(n_rays)), std::vector<float>(n_rays),
          std::vector<float>(n_values), std::vector<float>(n_values), std::vector<float>(n_values)};
      std::vector<std::vector<float>> grad_in{
          std::vector<float>(n_values), std::vector<float>(3 * n_values),
          std::vector<float>(n_values), std::vector<float>(3 * n_values)};
      const DynamicSamples<const float> samples{sigma_static.data(), rgb_static.data(),
                                                sigma_dynamic.data(), rgb_dynamic.data()};
      cpu::composite_dynamic_rays(n_rays, n_samples, mode, samples, depths.data(),
                                  DynamicRenders<float>{out[0].data(), out[1].data(), out[2].data(),
                                                        out[3].data(), out[4].data()});
      cpu::composite_dynamic_rays_backward(
          n_rays, n_samples, mode, samples, depths.data(),
          DynamicRenders<const float>{grad_out[0].data(), grad_out[1].data(), grad_out[2].data(),
                                      grad_out[3].data(), grad_out[4].data()},
          DynamicSamples<float>{grad_in[0].data(), grad_in[1].data(), grad_in[2].data(),
                                grad_in[3].data()});

      std::vector<DeviceArray<float>> d_out, d_grad_in;
      for (const auto& o : out) d_out.emplace_back(o.size());
      for (const auto& g : grad_in) d_grad_in.emplace_back(g.size());
      const DynamicSamples<const float> d_samples{d_sigma_static.data(), d_rgb_static.data(),
                                                  d_sigma_dynamic.data(), d_rgb_dynamic.data()};
      cuda::composite_dynamic_rays(
          n_rays, n_samples, mode, d_samples, d_depths.data(),
          DynamicRenders<float>{d_out[0].data(), d_out[1].data(), d_out[2].data(), d_out[3].data(),
                                d_out[4].data()},
          nullptr);
      cuda::composite_dynamic_rays_backward(
          n_rays, n_samples, mode, d_samples, d_depths.data(),
          DynamicRenders<const float>{d_grad_rgb.data(), d_grad_depth.data(), d_grad_w.data(),
                                      d_grad_ws.data(), d_grad_wd.data()},
          DynamicSamples<float>{d_grad_in[0].data(), d_grad_in[1].data(), d_grad_in[2].data(),
                                d_grad_in[3].data()},
          nullptr);
      device_synchronize();
      for (size_t k = 0; k < out.size(); ++k) {
        EXPECT_LE(normwise_relative_error(d_out[k].to_host(), out[k]), 1e-5) << "output " << k;
      }
      for (size_t k = 0; k < grad_in.size(); ++k) {
        EXPECT_LE(normwise_relative_error(d_grad_in[k].to_host(), grad_in[k]), 1e-4)
            << "gradient " << k;
      }
    }
  }
}

// DynIBaR's rendered flow over six offsets, and its backward into weights and points.
TEST_F(CudaOps, RenderedFlowsAndTheirBackwardMatchCpu) {
  const int n_rays = 37, n_samples = 64, n_offsets = 6;
  synthetic::RandomSceneSize size;
  size.n_views = n_offsets;
  size.n_rays = n_rays;
  const synthetic::RandomScene scene = synthetic::make_random_scene(size, 41);
  const std::vector<PinholeCamera<float>> cameras = synthetic::cast_cameras<float>(scene.sources);
  const PinholeCamera<float> target = camera_cast<float>(scene.target);
  const std::vector<float> pixels = cast_values<float>(scene.pixels);
  std::vector<float> origins(size_t(n_rays) * 3), directions(size_t(n_rays) * 3);
  cpu::generate_rays(target, pixels.data(), n_rays, origins.data(), directions.data());
  const std::vector<float> depths = coarse_depths(n_rays, n_samples, false, 42);
  const size_t R = size_t(n_rays), S = size_t(n_samples);
  std::vector<float> points(size_t(n_offsets) * R * S * 3);
  const std::vector<float> shifts = random_floats(points.size(), -0.05, 0.05, 43);
  for (size_t i = 0; i < points.size(); ++i) {
    const size_t rs = (i / 3) % (R * S), a = i % 3;
    points[i] = origins[rs / S * 3 + a] + depths[rs] * directions[rs / S * 3 + a] + shifts[i];
  }
  const std::vector<float> weights = random_floats(R * S, 0, 2.0 / n_samples, 44);
  const std::vector<float> grad_flows = random_floats(size_t(n_offsets) * R * 2, -1, 1, 45);
  std::vector<float> flows(size_t(n_offsets) * R * 2),
      grad_weights = random_floats(R * S, -1, 1, 46), grad_points(points.size());
  const DeviceArray<PinholeCamera<float>> device_cameras(cameras);
  const DeviceArray<float> device_weights(weights), device_points(points), device_pixels(pixels),
      device_grad_flows(grad_flows);
  DeviceArray<float> device_flows(flows.size()), device_grad_weights(grad_weights),
      device_grad_points(points.size());
  cpu::render_flows(n_rays, n_samples, n_offsets, weights.data(), points.data(), cameras.data(),
                    pixels.data(), flows.data());
  cuda::render_flows(n_rays, n_samples, n_offsets, device_weights.data(), device_points.data(),
                     device_cameras.data(), device_pixels.data(), device_flows.data(), nullptr);
  // The backward accumulates into the weights' gradient.
  cpu::render_flows_backward(n_rays, n_samples, n_offsets, weights.data(), points.data(),
                             cameras.data(), grad_flows.data(), grad_weights.data(),
                             grad_points.data());
  cuda::render_flows_backward(n_rays, n_samples, n_offsets, device_weights.data(),
                              device_points.data(), device_cameras.data(), device_grad_flows.data(),
                              device_grad_weights.data(), device_grad_points.data(), nullptr);
  device_synchronize();
  EXPECT_LE(normwise_relative_error(device_flows.to_host(), flows), 1e-5);
  EXPECT_LE(normwise_relative_error(device_grad_weights.to_host(), grad_weights), 1e-5);
  EXPECT_LE(normwise_relative_error(device_grad_points.to_host(), grad_points), 1e-5);
}

TEST_F(CudaOps, RayMaskMatchesCpu) {
  const int sizes[][3] = {{1, 1, 1}, {500, 64, 8}, {3000, 16, 3}};
  const RayMaskRule rules[] = {{2, 9}, {1, 1}, {3, 20}};
  for (const auto& size : sizes) {
    const int n_rays = size[0], n_samples = size[1], n_views = size[2];
    std::vector<float> sample_mask = random_floats(size_t(n_rays) * n_samples * n_views, 0, 1, 41);
    for (float& m : sample_mask) m = m < 0.5f ? 1.0f : 0.0f;
    const DeviceArray<float> device_sample_mask(sample_mask);
    for (const RayMaskRule& rule : rules) {
      SCOPED_TRACE("rays " + std::to_string(n_rays) + " samples " + std::to_string(n_samples) +
                   " views " + std::to_string(n_views) + " rule " + std::to_string(rule.min_views) +
                   "/" + std::to_string(rule.min_samples));
      std::vector<float> mask(n_rays);
      cpu::ray_mask(n_rays, n_samples, n_views, sample_mask.data(), rule, mask.data());
      DeviceArray<float> device_mask(n_rays);
      cuda::ray_mask(n_rays, n_samples, n_views, device_sample_mask.data(), rule,
                     device_mask.data(), nullptr);
      device_synchronize();
      EXPECT_EQ(device_mask.to_host(), mask);
    }
  }
}

TEST_F(CudaOps, UnseenColourMaskMatchesCpu) {
  const size_t rows = 5000;
  const int width = 19;
  // Colours around the threshold (sums from 0 to 6e-3), half the rows unseen.
  const std::vector<float> rgb_features = random_floats(rows * width, 0, 2e-3, 43);
  std::vector<float> mask = random_floats(rows, 0, 1, 44);
  for (float& m : mask) m = m < 0.5f ? 1.0f : 0.0f;
  std::vector<float> masked(rows);
  cpu::mask_unseen_colours(rows, width, rgb_features.data(), mask.data(), masked.data());
  size_t kept = 0;
  for (size_t i = 0; i < rows; ++i) kept += masked[i] != 0;
  EXPECT_GT(kept, rows / 8);  // both outcomes occur
  EXPECT_LT(kept, rows / 2);
  const DeviceArray<float> device_rgb_features(rgb_features), device_mask(mask);
  DeviceArray<float> device_masked(rows);
  cuda::mask_unseen_colours(rows, width, device_rgb_features.data(), device_mask.data(),
                            device_masked.data(), nullptr);
  device_synchronize();
  EXPECT_EQ(device_masked.to_host(), masked);
}

TEST_F(CudaOps, MaskedMseAndItsBackwardMatchCpu) {
  const float grad_loss = 0.7f;
  for (int n_rays : {0, 1, 1000, 100000}) {
    SCOPED_TRACE("rays " + std::to_string(n_rays));
    const std::vector<float> predicted = random_floats(size_t(n_rays) * 3, 0, 1, 51);
    const std::vector<float> target = random_floats(size_t(n_rays) * 3, 0, 1, 52);
    std::vector<float> ray_mask = random_floats(n_rays, 0, 1, 53);
    for (float& m : ray_mask) m = m < 0.8f ? 1.0f : 0.0f;
    std::vector<float> loss(2), grad_predicted(predicted.size());
    cpu::masked_mse(n_rays, predicted.data(), target.data(), ray_mask.data(), loss.data());
    cpu::masked_mse_backward(n_rays, predicted.data(), target.data(), ray_mask.data(), loss.data(),
                             grad_loss, grad_predicted.data());

    const DeviceArray<float> device_predicted(predicted), device_target(target),
        device_ray_mask(ray_mask);
    DeviceArray<float> device_loss(2), device_grad_predicted(predicted.size());
    cuda::masked_mse(n_rays, device_predicted.data(), device_target.data(), device_ray_mask.data(),
                     device_loss.data(), nullptr);
    cuda::masked_mse_backward(n_rays, device_predicted.data(), device_target.data(),
                              device_ray_mask.data(), device_loss.data(), grad_loss,
                              device_grad_predicted.data(), nullptr);
    device_synchronize();
    EXPECT_LE(normwise_relative_error(device_loss.to_host(), loss), 1e-5);
    EXPECT_LE(normwise_relative_error(device_grad_predicted.to_host(), grad_predicted), 1e-5);
  }
}

// Host-side validation needs no device, so this runs (and passes) on machines without one.
TEST(CudaOpsValidation, InvalidOptionsThrowBeforeAnyLaunch) {
  const DepthSampling near_beyond_far{6.0, 2.0, 64, false, false};
  EXPECT_THROW(cuda::sample_coarse_depths(16, near_beyond_far, {}, 0, nullptr, nullptr),
               InvalidArgument);
  const ImportanceSampling no_interior_bin{2, 64, false, false};
  EXPECT_THROW(cuda::sample_importance_depths(16, no_interior_bin, nullptr, nullptr, {}, 0, nullptr,
                                              nullptr),
               InvalidArgument);
  const SourceViews<float> no_views;
  EXPECT_THROW(
      cuda::gather_samples(16, 8, nullptr, nullptr, nullptr, {0, 0, 0}, no_views, {}, nullptr),
      InvalidArgument);
  EXPECT_THROW(cuda::gather_samples_backward(16, 8, nullptr, nullptr, nullptr, no_views, nullptr,
                                             nullptr, nullptr, nullptr),
               InvalidArgument);
  // A launch on these null pointers would have faulted; the device reports no error.
  if (cuda_device_count() > 0) {
    EXPECT_NO_THROW(device_synchronize());
  }
}

}  // namespace
}  // namespace mvibr

#else

TEST(GpuRenderOps, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
