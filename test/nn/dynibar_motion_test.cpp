// DynIBaR's scene motion (nn/dynibar_motion.h): the far samples held static as the published
// slice rounds, the moved samples as the MLP and the trajectories compose, and the backward into
// the MLP, the basis and the positions against central differences in double.
#include "mvibr/nn/dynibar_motion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/trajectory.h"
#include "mvibr/synthetic/random_scene.h"
#include "support/finite_difference.h"

namespace mvibr::nn {
namespace {

TEST(DynibarMotion, FarSamplesAreTheLastTenthRoundedHalfToEven) {
  EXPECT_EQ(static_far_samples(64), 6);    // round(6.4)
  EXPECT_EQ(static_far_samples(128), 13);  // round(12.8)
  EXPECT_EQ(static_far_samples(15), 2);    // round(1.5)
  EXPECT_EQ(static_far_samples(25), 2);    // round(2.5): half to even
  EXPECT_EQ(static_far_samples(35), 4);    // round(3.5)
  EXPECT_EQ(static_far_samples(4), 0);
}

// A small motion network with a non-zero head, its parameters in double, and a random chunk.
struct Problem {
  Problem() : mlp(set, "motion_mlp.", small_options()) {
    Initializer init(3);
    mlp.initialize(init);
    const std::vector<double> jitter = synthetic::random_values(set.size(), -0.3, 0.3, 4);
    for (size_t i = 0; i < set.size(); ++i) params.push_back(double(set.values()[i]) + jitter[i]);
    basis = dct_trajectory_basis(kFrames, 3);
    points = synthetic::random_values(size_t(kRays) * kSamples * 3, -1, 1, 5);
  }
  static MotionMlpOptions small_options() {
    MotionMlpOptions o;
    o.basis = 3;
    o.depth = 3;
    o.width = 12;
    o.frequencies = 3;
    o.skips = {1};
    return o;
  }
  static constexpr int kFrames = 9, kRays = 2, kSamples = 10;
  ParameterSet set;
  MotionMlp mlp;
  std::vector<double> params, basis, points;
};

TEST(DynibarMotion, MovesEachSampleAlongItsTrajectoryAndHoldsTheFarOnesStill) {
  Problem p;
  const DynibarMotion motion(p.mlp, Problem::kFrames);
  const std::vector<int> to = {5, 2, 7};
  const size_t n = size_t(Problem::kRays) * Problem::kSamples;
  std::vector<double> moved(to.size() * n * 3);
  DynibarMotionWorkspace<double> ws;
  motion.forward(p.params.data(), p.basis.data(), Problem::kRays, Problem::kSamples,
                 p.points.data(), 0.4, 4, to, moved.data(), &ws);
  // The same by hand: the MLP's coefficients, the far sample (the last of 10) zero.
  std::vector<double> xyzt(n * 4), coefficients(n * 9), saved(p.mlp.saved_size(n));
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) xyzt[4 * i + a] = p.points[3 * i + a];
    xyzt[4 * i + 3] = 0.4;
  }
  p.mlp.forward(p.params.data(), n, xyzt.data(), saved.data(), coefficients.data());
  for (size_t o = 0; o < to.size(); ++o) {
    std::vector<double> displacement(n * 3);
    trajectory_displacement(n, 3, coefficients.data(), p.basis.data(), 4, to[o],
                            displacement.data());
    for (size_t i = 0; i < n; ++i) {
      const bool far = i % Problem::kSamples == Problem::kSamples - 1;
      for (int a = 0; a < 3; ++a) {
        const double expected = p.points[3 * i + a] + (far ? 0.0 : displacement[3 * i + a]);
        EXPECT_DOUBLE_EQ(moved[(o * n + i) * 3 + a], expected) << o << " " << i;
      }
      if (!far) {
        EXPECT_NE(displacement[3 * i], 0.0);
      }
    }
  }
}

TEST(DynibarMotion, DoubleBackwardMatchesFiniteDifferences) {
  Problem p;
  const DynibarMotion motion(p.mlp, Problem::kFrames);
  const std::vector<int> to = {5, 3, 8, 4};  // the frame itself too: zero displacement
  const size_t n = size_t(Problem::kRays) * Problem::kSamples;
  const std::vector<double> weights = synthetic::random_values(to.size() * n * 3, -1, 1, 6);
  const auto run = [&](const std::vector<double>& params, const std::vector<double>& basis,
                       const std::vector<double>& points, DynibarMotionWorkspace<double>* ws) {
    std::vector<double> moved(to.size() * n * 3);
    motion.forward(params.data(), basis.data(), Problem::kRays, Problem::kSamples, points.data(),
                   0.4, 4, to, moved.data(), ws);
    double loss = 0;
    for (size_t i = 0; i < moved.size(); ++i) loss += weights[i] * moved[i];
    return loss;
  };
  DynibarMotionWorkspace<double> ws;
  run(p.params, p.basis, p.points, &ws);
  std::vector<double> grad_params(p.params.size(), 0.0), grad_basis(p.basis.size(), 0.0),
      grad_points(p.points.size());
  motion.backward(p.params.data(), grad_params.data(), p.basis.data(), grad_basis.data(), ws,
                  weights.data(), grad_points.data());
  DynibarMotionWorkspace<double> scratch;
  const double h = 1e-6;
  const auto expect_near = [](const testing::DirectionalDerivative& d, const std::string& what) {
    EXPECT_NEAR(d.numeric, d.analytic, 1e-7 * std::max(1.0, std::abs(d.analytic))) << what;
    EXPECT_NE(d.analytic, 0.0) << what;
  };
  for (const ParameterInfo& info : p.set.infos()) {
    const std::vector<double> direction = synthetic::random_values(info.size, -1, 1, info.offset);
    expect_near(
        testing::directional_derivative(
            [&](const std::vector<double>& v) { return run(v, p.basis, p.points, &scratch); },
            p.params, info.offset, direction, grad_params.data() + info.offset, h),
        info.name);
  }
  const std::vector<double> basis_direction = synthetic::random_values(p.basis.size(), -1, 1, 7);
  expect_near(
      testing::directional_derivative(
          [&](const std::vector<double>& v) { return run(p.params, v, p.points, &scratch); },
          p.basis, 0, basis_direction, grad_basis.data(), h),
      "basis");
  const std::vector<double> point_direction = synthetic::random_values(p.points.size(), -1, 1, 8);
  expect_near(testing::directional_derivative(
                  [&](const std::vector<double>& v) { return run(p.params, p.basis, v, &scratch); },
                  p.points, 0, point_direction, grad_points.data(), h),
              "points");
}

TEST(DynibarMotion, RejectsFramesOutsideTheBasis) {
  Problem p;
  EXPECT_THROW(DynibarMotion(p.mlp, 3), InvalidArgument);  // 3 trajectories need 4 frames
  const DynibarMotion motion(p.mlp, Problem::kFrames);
  std::vector<double> moved(size_t(Problem::kRays) * Problem::kSamples * 3);
  DynibarMotionWorkspace<double> ws;
  for (const auto& [frame, to] : {std::pair<int, int>{9, 1}, {1, -1}, {-1, 2}}) {
    EXPECT_THROW(motion.forward(p.params.data(), p.basis.data(), Problem::kRays, Problem::kSamples,
                                p.points.data(), 0.5, frame, {to}, moved.data(), &ws),
                 InvalidArgument);
  }
}

}  // namespace
}  // namespace mvibr::nn
