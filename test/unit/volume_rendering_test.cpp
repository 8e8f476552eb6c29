// Compositing on the CPU backend: the closed-form cases (empty, opaque, one sample), white
// background, finite differences of the backward, IBRNet's ray mask and the masked MSE.
#include "mvibr/render/volume_rendering.h"

#include <gtest/gtest.h>

#include <vector>

#include "mvibr/core/relative_error.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

struct Composite {
  std::vector<double> rgb_map, depth, acc, weights;
};

Composite composite(int R, int S, const std::vector<double>& sigma, const std::vector<double>& rgb,
                    const std::vector<double>& z, const std::vector<double>& dirs,
                    CompositeOptions options) {
  Composite c{std::vector<double>(size_t(R) * 3), std::vector<double>(R), std::vector<double>(R),
              std::vector<double>(size_t(R) * S)};
  cpu::composite_rays(R, S, sigma.data(), rgb.data(), z.data(), dirs.data(), options,
                      c.rgb_map.data(), c.depth.data(), c.acc.data(), c.weights.data());
  return c;
}

TEST(Composite, EmptySpaceGivesBackground) {
  const std::vector<double> sigma(8, 0.0), rgb(24, 0.7), z{1, 2, 3, 4, 5, 6, 7, 8}, dirs{0, 0, 1};
  const Composite black = composite(1, 8, sigma, rgb, z, dirs, {});
  EXPECT_EQ(black.acc[0], 0.0);
  EXPECT_EQ(black.rgb_map[1], 0.0);
  const Composite white = composite(1, 8, sigma, rgb, z, dirs, {DeltaMode::kUnit, true});
  EXPECT_EQ(white.rgb_map[1], 1.0);
}

TEST(Composite, AnOpaqueFirstSampleTakesEverything) {
  std::vector<double> sigma(8, 1.0), rgb(24, 0.2), z{1, 2, 3, 4, 5, 6, 7, 8}, dirs{0, 0, 1};
  sigma[0] = 1e6;
  rgb[0] = 0.9;
  for (DeltaMode mode : {DeltaMode::kUnit, DeltaMode::kInterval}) {
    const Composite c = composite(1, 8, sigma, rgb, z, dirs, {mode, true});
    EXPECT_NEAR(c.weights[0], 1.0, 1e-12);
    EXPECT_NEAR(c.rgb_map[0], 0.9, 1e-9);
    EXPECT_NEAR(c.depth[0], 1.0, 1e-9);
    EXPECT_LT(c.weights[1], 1e-9);
    // Huge sigma: finite gradients (the saturated exp contributes zero, as in PyTorch).
    std::vector<double> grad_sigma(8), grad_rgb(24);
    const std::vector<double> g{1, 1, 1};
    cpu::composite_rays_backward(
        1, 8, sigma.data(), rgb.data(), z.data(), dirs.data(), {mode, true}, g.data(),
        static_cast<const double*>(nullptr), static_cast<const double*>(nullptr),
        static_cast<const double*>(nullptr), grad_sigma.data(), grad_rgb.data());
    for (double v : grad_sigma) EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(grad_sigma[0], 0.0);
  }
}

TEST(Composite, OneSampleIsItsAlpha) {
  const std::vector<double> sigma{0.5}, rgb{0.1, 0.2, 0.3}, z{2.0}, dirs{0, 0, 1};
  const Composite c = composite(1, 1, sigma, rgb, z, dirs, {});
  EXPECT_NEAR(c.weights[0], 1 - std::exp(-0.5), 1e-15);
  EXPECT_NEAR(c.rgb_map[2], 0.3 * (1 - std::exp(-0.5)), 1e-15);
  // NeRF's interval: the last sample's interval is 1e10, so it is opaque.
  const Composite n = composite(1, 1, sigma, rgb, z, dirs, {DeltaMode::kInterval, false});
  EXPECT_DOUBLE_EQ(n.weights[0], 1.0);
}

// Scalar loss L = <a, rgb> + <b, depth> + <c, acc> + <d, weights> and its gradient.
TEST(Composite, BackwardMatchesFiniteDifferences) {
  const int R = 5, S = 17;
  for (DeltaMode mode : {DeltaMode::kUnit, DeltaMode::kInterval}) {
    for (bool white : {false, true}) {
      const CompositeOptions options{mode, white};
      const auto sigma = synthetic::random_values(R * S, 0.0, 2.0, 1);
      const auto rgb = synthetic::random_values(R * S * 3, 0.0, 1.0, 2);
      auto z = synthetic::random_values(R * S, 2.0, 6.0, 3);
      for (int r = 0; r < R; ++r) std::sort(z.begin() + r * S, z.begin() + (r + 1) * S);
      const auto dirs = synthetic::random_values(R * 3, 0.2, 1.0, 4);
      const auto a = synthetic::random_values(R * 3, -1, 1, 5),
                 b = synthetic::random_values(R, -1, 1, 6),
                 c = synthetic::random_values(R, -1, 1, 7),
                 d = synthetic::random_values(R * S, -1, 1, 8);
      const auto loss = [&](const std::vector<double>& s, const std::vector<double>& colour) {
        const Composite out = composite(R, S, s, colour, z, dirs, options);
        double l = 0;
        for (int i = 0; i < R * 3; ++i) l += a[i] * out.rgb_map[i];
        for (int i = 0; i < R; ++i) l += b[i] * out.depth[i] + c[i] * out.acc[i];
        for (int i = 0; i < R * S; ++i) l += d[i] * out.weights[i];
        return l;
      };
      std::vector<double> grad_sigma(R * S), grad_rgb(R * S * 3);
      cpu::composite_rays_backward(R, S, sigma.data(), rgb.data(), z.data(), dirs.data(), options,
                                   a.data(), b.data(), c.data(), d.data(), grad_sigma.data(),
                                   grad_rgb.data());
      const double h = 1e-6;
      std::vector<double> fd_sigma(R * S), fd_rgb(R * S * 3);
      for (int i = 0; i < R * S; ++i) {
        auto up = sigma, down = sigma;
        up[i] += h;
        down[i] -= h;
        fd_sigma[i] = (loss(up, rgb) - loss(down, rgb)) / (2 * h);
      }
      for (int i = 0; i < R * S * 3; ++i) {
        auto up = rgb, down = rgb;
        up[i] += h;
        down[i] -= h;
        fd_rgb[i] = (loss(sigma, up) - loss(sigma, down)) / (2 * h);
      }
      EXPECT_LT(normwise_relative_error(grad_sigma, fd_sigma), 1e-7);
      EXPECT_LT(normwise_relative_error(grad_rgb, fd_rgb), 1e-7);
    }
  }
}

TEST(RayMask, FollowsIbrnetsThresholds) {
  const int S = 12, V = 3;
  std::vector<double> mask(2 * S * V, 0.0);
  for (int s = 0; s < 9; ++s) mask[s * V] = mask[s * V + 2] = 1;  // ray 0: 9 samples in 2 views
  for (int s = 0; s < 8; ++s) mask[S * V + s * V] = mask[S * V + s * V + 1] = 1;  // ray 1: only 8
  for (int s = 8; s < S; ++s) mask[S * V + s * V] = 1;  // ... and 4 seen by one view only
  std::vector<double> ray(2);
  cpu::ray_mask(2, S, V, mask.data(), RayMaskRule{}, ray.data());
  EXPECT_EQ(ray[0], 1.0);
  EXPECT_EQ(ray[1], 0.0);
}

TEST(MaskedMse, IgnoresMaskedRaysAndAllInvalidGivesZero) {
  const std::vector<double> pred{0.5, 0.5, 0.5, 1, 1, 1}, target{0.5, 0.5, 0.0, 0, 0, 0};
  std::vector<double> loss(2), grad(6);
  const std::vector<double> mask{1, 0};
  cpu::masked_mse(2, pred.data(), target.data(), mask.data(), loss.data());
  EXPECT_NEAR(loss[0], 0.25 / (3 + 1e-6), 1e-15);
  cpu::masked_mse_backward(2, pred.data(), target.data(), mask.data(), loss.data(), 1.0,
                           grad.data());
  EXPECT_NEAR(grad[2], 2 * 0.5 / (3 + 1e-6), 1e-15);
  EXPECT_EQ(grad[3], 0.0);
  const std::vector<double> none{0, 0};
  cpu::masked_mse(2, pred.data(), target.data(), none.data(), loss.data());
  EXPECT_EQ(loss[0], 0.0);
  cpu::masked_mse_backward(2, pred.data(), target.data(), none.data(), loss.data(), 1.0,
                           grad.data());
  for (double g : grad) EXPECT_EQ(g, 0.0);
}

}  // namespace
}  // namespace mvibr
