// The rendering core chained end to end (toy_pipeline.h): the gradient of coarse + fine loss in
// the feature maps against central differences, in every sampling and compositing mode, and
// the float backend against the double one.
#include "mvibr/synthetic/toy_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "mvibr/core/relative_error.h"

namespace mvibr {
namespace {

using synthetic::ToyPipelineOptions;

class PipelineGradient : public ::testing::TestWithParam<std::tuple<bool, bool, bool, DeltaMode>> {
};

TEST_P(PipelineGradient, MatchesFiniteDifferencesAndFloatMatchesDouble) {
  const auto [inv_uniform, det, white, delta] = GetParam();
  synthetic::RandomSceneSize size;
  size.n_rays = 12;
  size.n_views = 3;
  size.feature_channels = 3;
  ToyPipelineOptions options;
  options.n_samples = 10;
  options.n_importance = 6;
  options.inv_uniform = inv_uniform;
  options.deterministic = det;
  options.composite = {delta, white};
  const auto scene = synthetic::make_random_scene(size, 21);
  const auto target = synthetic::random_values(size.n_rays * 3, 0, 1, 22);
  const auto exact = synthetic::run_toy_pipeline(scene, scene.features, target, options, true);
  ASSERT_GT(exact.loss, 0.0);

  std::vector<double> numeric(scene.features.size());
  const double h = 1e-6;
  for (size_t i = 0; i < scene.features.size(); ++i) {
    auto shifted = scene.features;
    shifted[i] += h;
    const double up =
        synthetic::run_toy_pipeline(scene, shifted, target, options, false, &exact.fine_depths)
            .loss;
    shifted[i] -= 2 * h;
    const double down =
        synthetic::run_toy_pipeline(scene, shifted, target, options, false, &exact.fine_depths)
            .loss;
    numeric[i] = (up - down) / (2 * h);
  }
  EXPECT_LT(normwise_relative_error(exact.grad_features, numeric), 1e-6);

  const auto single =
      synthetic::run_toy_pipeline(scene, synthetic::cast_values<float>(scene.features),
                                  synthetic::cast_values<float>(target), options, true);
  EXPECT_LT(std::abs(single.loss - exact.loss) / exact.loss, 1e-5);
  EXPECT_LT(normwise_relative_error(single.grad_features, exact.grad_features), 1e-4);
}

std::string mode_name(const ::testing::TestParamInfo<PipelineGradient::ParamType>& info) {
  const auto [inv_uniform, det, white, delta] = info.param;
  return std::string(inv_uniform ? "InverseDepth" : "Depth") + (det ? "Even" : "Jittered") +
         (white ? "White" : "Black") + (delta == DeltaMode::kUnit ? "UnitDelta" : "IntervalDelta");
}

INSTANTIATE_TEST_SUITE_P(Modes, PipelineGradient,
                         ::testing::Values(std::make_tuple(false, false, false, DeltaMode::kUnit),
                                           std::make_tuple(true, false, false, DeltaMode::kUnit),
                                           std::make_tuple(false, true, true, DeltaMode::kUnit),
                                           std::make_tuple(true, true, false, DeltaMode::kInterval),
                                           std::make_tuple(false, false, true,
                                                           DeltaMode::kInterval)),
                         mode_name);

}  // namespace
}  // namespace mvibr
