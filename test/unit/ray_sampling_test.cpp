// Coarse and importance depth sampling on the CPU backend: ranges, order, spacing, where the
// importance samples land, and the clear errors for bad options.
#include "mvibr/geom/ray_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr {
namespace {

std::vector<double> coarse(int n_rays, DepthSampling s, RandomKey key = {3, 5}) {
  std::vector<double> z(size_t(n_rays) * s.n_samples);
  cpu::sample_coarse_depths(n_rays, s, key, 0, z.data());
  return z;
}

TEST(CoarseDepths, DeterministicAreEvenlySpacedInDepthOrInverseDepth) {
  const auto z = coarse(2, {2.0, 6.0, 5, false, true});
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(z[i], 2.0 + i);
  EXPECT_EQ(std::vector<double>(z.begin(), z.begin() + 5),
            std::vector<double>(z.begin() + 5, z.end()));
  const auto inv = coarse(1, {2.0, 6.0, 5, true, true});
  EXPECT_DOUBLE_EQ(inv.front(), 2.0);
  EXPECT_NEAR(inv.back(), 6.0, 1e-12);
  for (int i = 1; i < 4; ++i)
    EXPECT_NEAR(1 / inv[i + 1] - 1 / inv[i], 1 / inv[i] - 1 / inv[i - 1], 1e-12);
}

TEST(CoarseDepths, StratifiedStayInTheirIntervalAndAreSorted) {
  for (bool inv_uniform : {false, true}) {
    const DepthSampling s{1.5, 9.0, 32, inv_uniform, false};
    const auto z = coarse(64, s);
    for (int r = 0; r < 64; ++r) {
      for (int i = 0; i < 32; ++i) {
        const double zi = z[r * 32 + i];
        const double even = evenly_spaced_depth(i, 32, 1.5, 9.0, inv_uniform);
        const double lower =
            i ? 0.5 * (evenly_spaced_depth(i - 1, 32, 1.5, 9.0, inv_uniform) + even) : even;
        const double upper =
            i < 31 ? 0.5 * (even + evenly_spaced_depth(i + 1, 32, 1.5, 9.0, inv_uniform)) : even;
        EXPECT_GE(zi, lower);
        EXPECT_LE(zi, upper);
        if (i) {
          EXPECT_GE(zi, z[r * 32 + i - 1]);
        }
      }
    }
    // Jitter really differs between rays and steps.
    EXPECT_NE(z[5], z[32 + 5]);
    EXPECT_NE(coarse(1, s, {3, 5})[5], coarse(1, s, {3, 6})[5]);
  }
}

TEST(CoarseDepths, OneSampleSitsAtNear) {
  EXPECT_DOUBLE_EQ(coarse(1, {2.0, 6.0, 1, false, false})[0], 2.0);
  EXPECT_DOUBLE_EQ(coarse(1, {2.0, 6.0, 1, true, true})[0], 2.0);
}

TEST(CoarseDepths, BadRangesAreRejectedWithTheValues) {
  std::vector<double> z(8);
  try {
    cpu::sample_coarse_depths(1, DepthSampling{3.0, 3.0, 8, false, false}, {}, 0, z.data());
    FAIL() << "near == far accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("near depth must be less than far depth"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("near=3"), std::string::npos);
  }
  EXPECT_THROW(
      cpu::sample_coarse_depths(1, DepthSampling{0.0, 3.0, 8, true, false}, {}, 0, z.data()),
      InvalidArgument);
  EXPECT_THROW(
      cpu::sample_coarse_depths(1, DepthSampling{1.0, NAN, 8, false, false}, {}, 0, z.data()),
      InvalidArgument);
  EXPECT_THROW(
      cpu::sample_coarse_depths(1, DepthSampling{1.0, 2.0, 0, false, false}, {}, 0, z.data()),
      InvalidArgument);
}

TEST(ImportanceDepths, MergedAreSortedAndKeepEveryCoarseDepth) {
  for (bool inv_uniform : {false, true}) {
    for (bool det : {false, true}) {
      const int R = 16, S = 24, N = 40;
      const auto z = coarse(R, {2.0, 6.0, S, inv_uniform, det});
      std::vector<double> w(size_t(R) * S);
      for (size_t i = 0; i < w.size(); ++i) w[i] = double((i * 7919) % 13) / 13.0;
      std::vector<double> merged(size_t(R) * (S + N));
      cpu::sample_importance_depths(R, {S, N, inv_uniform, det}, z.data(), w.data(), {9, 1}, 0,
                                    merged.data());
      for (int r = 0; r < R; ++r) {
        const auto begin = merged.begin() + r * (S + N);
        EXPECT_TRUE(std::is_sorted(begin, begin + S + N));
        EXPECT_TRUE(
            std::includes(begin, begin + S + N, z.begin() + r * S, z.begin() + (r + 1) * S));
        EXPECT_GE(*begin, z[r * S]);
        EXPECT_LE(*(begin + S + N - 1), z[r * S + S - 1]);
      }
    }
  }
}

TEST(ImportanceDepths, SamplesConcentrateInTheHeavyBin) {
  const int S = 11, N = 64;
  const auto z = coarse(1, {1.0, 11.0, S, false, true});  // 1, 2, ..., 11
  std::vector<double> w(S, 0.0);
  w[6] = 1.0;  // interior sample 6 owns the bin between midpoints 6.5 and 7.5
  std::vector<double> merged(S + N);
  cpu::sample_importance_depths(1, {S, N, false, false}, z.data(), w.data(), {1, 1}, 0,
                                merged.data());
  int in_bin = 0;
  for (double d : merged) in_bin += d >= 6.5 && d <= 7.5;
  // The 1e-5 floor gives each of the other 8 bins a ~1e-5 share: all but maybe one sample land.
  EXPECT_GE(in_bin, N - 1 + 1);  // the coarse depth 7 is in the bin too
}

TEST(ImportanceDepths, DeterministicUniformsAreLinspace) {
  const int S = 5, N = 3;
  const auto z = coarse(1, {1.0, 5.0, S, false, true});
  const std::vector<double> w(S, 1.0);  // flat pdf over the midpoints 1.5 .. 4.5
  std::vector<double> merged(S + N);
  cpu::sample_importance_depths(1, {S, N, false, true}, z.data(), w.data(), {}, 0, merged.data());
  // u = 0, 0.5, 1 of a flat pdf over [1.5, 4.5]: 1.5, 3, 4.5, merged with 1..5.
  const std::vector<double> expected{1, 1.5, 2, 3, 3, 4, 4.5, 5};
  for (int i = 0; i < S + N; ++i) EXPECT_NEAR(merged[i], expected[i], 1e-12) << i;
}

TEST(ImportanceDepths, TooFewCoarseSamplesIsAnError) {
  std::vector<double> z(4), w(4), merged(8);
  EXPECT_THROW(cpu::sample_importance_depths(1, {2, 4, false, false}, z.data(), w.data(), {}, 0,
                                             merged.data()),
               InvalidArgument);
  EXPECT_THROW(cpu::sample_importance_depths(1, {400, 200, false, false}, z.data(), w.data(), {}, 0,
                                             merged.data()),
               InvalidArgument);
}

}  // namespace
}  // namespace mvibr
