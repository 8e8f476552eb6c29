// DynIBaR's trajectory basis and displacements against what they must be: the DCT-II columns are
// orthonormal, displacements compose along frames, a single coefficient moves a point by its
// basis difference, and the backward equals central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/trajectory.h"

namespace mvibr::nn {
namespace {

constexpr int kFrames = 12, kBasis = 6;

std::vector<double> random_values(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(count);
  for (double& v : values) v = uniform(generator);
  return values;
}

TEST(Trajectory, TheDctBasisHasOrthonormalColumnsWithoutTheConstantOne) {
  const std::vector<double> b = dct_trajectory_basis(kFrames, kBasis);
  ASSERT_EQ(b.size(), size_t(kFrames * kBasis));
  for (int k = 0; k < kBasis; ++k) {
    double sum = 0;  // a constant trajectory is not in the span: every column sums to 0
    for (int t = 0; t < kFrames; ++t) sum += b[size_t(t * kBasis + k)];
    EXPECT_NEAR(sum, 0.0, 1e-12) << "column " << k;
    for (int l = 0; l < kBasis; ++l) {
      double dot = 0;
      for (int t = 0; t < kFrames; ++t)
        dot += b[size_t(t * kBasis + k)] * b[size_t(t * kBasis + l)];
      EXPECT_NEAR(dot, k == l ? 1.0 : 0.0, 1e-12) << k << ", " << l;
    }
  }
  EXPECT_THROW(dct_trajectory_basis(6, 6), InvalidArgument);
  EXPECT_THROW(dct_trajectory_basis(6, 0), InvalidArgument);
}

TEST(Trajectory, DisplacementsComposeAndOneCoefficientMovesByItsBasisDifference) {
  const std::vector<double> b = dct_trajectory_basis(kFrames, kBasis);
  const size_t points = 5;
  const std::vector<double> c = random_values(points * 3 * kBasis, 1);
  std::vector<double> ab(points * 3), bc(points * 3), ac(points * 3), aa(points * 3);
  trajectory_displacement(points, kBasis, c.data(), b.data(), 2, 7, ab.data());
  trajectory_displacement(points, kBasis, c.data(), b.data(), 7, 11, bc.data());
  trajectory_displacement(points, kBasis, c.data(), b.data(), 2, 11, ac.data());
  trajectory_displacement(points, kBasis, c.data(), b.data(), 4, 4, aa.data());
  for (size_t i = 0; i < ab.size(); ++i) {
    EXPECT_NEAR(ab[i] + bc[i], ac[i], 1e-12);
    EXPECT_EQ(aa[i], 0.0);
  }
  std::vector<double> single(3 * kBasis, 0.0), moved(3);
  single[1 * kBasis + 3] = 2.5;  // y, basis column 3
  trajectory_displacement(1, kBasis, single.data(), b.data(), 0, 9, moved.data());
  EXPECT_EQ(moved[0], 0.0);
  EXPECT_NEAR(moved[1], 2.5 * (b[9 * kBasis + 3] - b[0 * kBasis + 3]), 1e-15);
  EXPECT_EQ(moved[2], 0.0);
}

TEST(Trajectory, BackwardMatchesCentralDifferences) {
  std::vector<double> b = dct_trajectory_basis(kFrames, kBasis);
  const size_t points = 4;
  std::vector<double> c = random_values(points * 3 * kBasis, 2);
  const std::vector<double> weight = random_values(points * 3, 3);
  const int from = 3, to = 8;
  const auto loss = [&] {
    std::vector<double> d(points * 3);
    trajectory_displacement(points, kBasis, c.data(), b.data(), from, to, d.data());
    double sum = 0;
    for (size_t i = 0; i < d.size(); ++i) sum += weight[i] * d[i];
    return sum;
  };
  std::vector<double> grad_c(c.size(), 0.0), grad_b(b.size(), 0.0);
  trajectory_displacement_backward(points, kBasis, c.data(), b.data(), from, to, weight.data(),
                                   grad_c.data(), grad_b.data());
  const double h = 1e-6;
  const auto central = [&](double* x) {
    const double saved = *x;
    *x = saved + h;
    const double up = loss();
    *x = saved - h;
    const double down = loss();
    *x = saved;
    return (up - down) / (2 * h);
  };
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(grad_c[i], central(&c[i]), 1e-8) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(grad_b[i], central(&b[i]), 1e-8) << i;
  // Only the two frames' rows of the basis get a gradient.
  for (int t = 0; t < kFrames; ++t) {
    if (t == from || t == to) continue;
    for (int k = 0; k < kBasis; ++k) EXPECT_EQ(grad_b[size_t(t * kBasis + k)], 0.0);
  }
}

}  // namespace
}  // namespace mvibr::nn
