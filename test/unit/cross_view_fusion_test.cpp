// Cross-view fusion (nn/cross_view_fusion.h).
// - Forward and both gradients against the PyTorch float64 reference
//   (test/reference/pose_layers_reference.py's cross_view_fusion, written from the published
//   Aggregation) as normwise relative errors max|ours - ref| / max|ref|: double within 1e-10,
//   float within 1e-5; the test prints the measured errors. Cases: the pose model's 4-camera rig,
//   2 views, and 5 (the published weights generalised).
// - The double backward against central differences.
// - The parameters: V (V - 1) weights "<k>.weight" [P, P], initialised uniform in [0, 0.1).
// - Shapes that do not match the layer are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/nn/cross_view_fusion.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "support/finite_difference.h"

namespace mvibr {
namespace {

namespace fs = std::filesystem;

struct FusionCase {
  const char* name;
  int views, rows, height, width;
  int pixels() const { return height * width; }
};

// The model's test rig (3 instants x 17 joints on 12x10 maps), the fewest views, and five.
const std::vector<FusionCase>& fusion_cases() {
  static const std::vector<FusionCase> cases = {
      {"four_views", 4, 51, 10, 12}, {"two_views", 2, 3, 6, 8}, {"five_views", 5, 4, 5, 6}};
  return cases;
}

// Uniform values that floats represent exactly, so both precisions see the same inputs.
std::vector<double> float_values(size_t count, double lo, double hi, uint64_t seed) {
  std::vector<double> v = synthetic::random_values(count, lo, hi, seed);
  for (double& x : v) x = double(float(x));
  return v;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// A case's layer in a ParameterSet of its own (the weights at offset 0) and its inputs.
struct FusionInputs {
  std::vector<double> heatmaps, weights, grad_fused;
};

FusionInputs make_inputs(const FusionCase& c, uint64_t seed) {
  const size_t maps = size_t(c.views) * c.rows * c.pixels();
  const size_t weights = size_t(c.views) * (c.views - 1) * c.pixels() * c.pixels();
  return {float_values(maps, -0.5, 1, seed), float_values(weights, 0, 0.1, seed + 1),
          float_values(maps, -1, 1, seed + 2)};
}

struct FusionOutputs {
  std::vector<double> fused, grad_heatmaps, grad_weights;
};

template <typename T>
FusionOutputs run_fusion(const FusionCase& c, const FusionInputs& x) {
  nn::ParameterSet set;
  nn::ParameterBlock block(set, "fusion.", nn::ParameterGroup::kMlp);
  const nn::CrossViewFusion fusion(block, c.views, c.pixels());
  const std::vector<T> params = cast<T>(x.weights), heatmaps = cast<T>(x.heatmaps);
  std::vector<T> fused(heatmaps.size()), grad_heatmaps(heatmaps.size()),
      grad_weights(params.size(), T(0));
  fusion.forward(params.data(), c.views, c.rows, c.pixels(), heatmaps.data(), fused.data());
  fusion.backward(params.data(), grad_weights.data(), c.views, c.rows, c.pixels(), heatmaps.data(),
                  cast<T>(x.grad_fused).data(), grad_heatmaps.data());
  return {{fused.begin(), fused.end()},
          {grad_heatmaps.begin(), grad_heatmaps.end()},
          {grad_weights.begin(), grad_weights.end()}};
}

class CrossViewFusionReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-fusion-" + std::to_string(::getpid()));
    uint64_t seed = 3100;
    for (const FusionCase& c : fusion_cases()) {
      const fs::path dir = root_ / c.name;
      fs::create_directories(dir);
      const FusionInputs x = make_inputs(c, seed += 10);
      inputs()[c.name] = x;
      std::ofstream(dir / "case.json") << nlohmann::json{{"layer", "cross_view_fusion"}}.dump();
      const size_t V = size_t(c.views), R = size_t(c.rows), P = size_t(c.pixels());
      test::write_npy((dir / "fusion_heatmaps.npy").string(), {{V, R, P}, x.heatmaps});
      test::write_npy((dir / "fusion_weights.npy").string(), {{V * (V - 1), P, P}, x.weights});
      test::write_npy((dir / "grad_fused.npy").string(), {{V, R, P}, x.grad_fused});
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/pose_layers_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }
  static std::map<std::string, FusionInputs>& inputs() {
    static std::map<std::string, FusionInputs> all;
    return all;
  }

  template <typename T>
  static void check(double bound, const char* precision) {
    std::map<std::string, double> worst;
    for (const FusionCase& c : fusion_cases()) {
      const FusionOutputs out = run_fusion<T>(c, inputs()[c.name]);
      const std::pair<const char*, const std::vector<double>*> results[] = {
          {"fused", &out.fused},
          {"grad_fusion_heatmaps", &out.grad_heatmaps},
          {"grad_fusion_weights", &out.grad_weights}};
      for (const auto& [name, ours] : results) {
        const std::vector<double> expected =
            test::read_npy((root_ / c.name / (std::string("ref_") + name + ".npy")).string()).data;
        const double e = normwise_relative_error(*ours, expected);
        EXPECT_LE(e, bound) << c.name << " in " << precision << ": " << name;
        worst[name] = std::max(worst[name], e);
      }
    }
    std::printf("  %-6s", precision);
    for (const auto& [name, e] : worst) std::printf(" %s %.1e", name.c_str(), e);
    std::printf("\n");
  }

  static inline fs::path root_;
  static inline int status_ = -1;
};

TEST_F(CrossViewFusionReference, DoubleMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<double>(1e-10, "double");
}

TEST_F(CrossViewFusionReference, FloatMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<float>(1e-5, "float");
}

// Central differences of L = sum(grad_fused * fused) along random directions of the heatmaps and
// of the weights: |numeric - analytic| within 1e-8 of sum_i |gradient_i direction_i| (the layer
// is linear in each, so only rounding is left).
TEST(CrossViewFusion, BackwardMatchesCentralDifferences) {
  const FusionCase c = fusion_cases()[2];
  const FusionInputs x = make_inputs(c, 41);
  const FusionOutputs out = run_fusion<double>(c, x);
  nn::ParameterSet set;
  nn::ParameterBlock block(set, "fusion.", nn::ParameterGroup::kMlp);
  const nn::CrossViewFusion fusion(block, c.views, c.pixels());
  // The heatmaps, then the weights, in one vector.
  std::vector<double> both = x.heatmaps;
  both.insert(both.end(), x.weights.begin(), x.weights.end());
  const auto loss = [&](const std::vector<double>& v) {
    std::vector<double> fused(x.heatmaps.size());
    fusion.forward(v.data() + x.heatmaps.size(), c.views, c.rows, c.pixels(), v.data(),
                   fused.data());
    double sum = 0;
    for (size_t i = 0; i < fused.size(); ++i) sum += fused[i] * x.grad_fused[i];
    return sum;
  };
  const std::pair<const char*, const std::vector<double>*> gradients[] = {
      {"heatmaps", &out.grad_heatmaps}, {"weights", &out.grad_weights}};
  uint64_t seed = 600;
  for (const auto& [name, gradient] : gradients) {
    const size_t begin = gradient == &out.grad_heatmaps ? 0 : x.heatmaps.size();
    double worst = 0;
    for (int trial = 0; trial < 3; ++trial) {
      const std::vector<double> direction =
          synthetic::random_values(gradient->size(), -1, 1, seed++);
      const auto d =
          testing::directional_derivative(loss, both, begin, direction, gradient->data(), 1e-3);
      double size = 0;
      for (size_t i = 0; i < direction.size(); ++i) size += std::abs((*gradient)[i] * direction[i]);
      ASSERT_GT(size, 0) << name;
      const double e = std::abs(d.numeric - d.analytic) / size;
      EXPECT_LE(e, 1e-8) << name << ": numeric " << d.numeric << ", analytic " << d.analytic;
      worst = std::max(worst, e);
    }
    std::printf("  d/d%-9s central differences within %.1e\n", name, worst);
  }
}

TEST(CrossViewFusion, RegistersAPairWeightPerOrderedPairInitialisedAsPublished) {
  nn::ParameterSet set;
  nn::ParameterBlock block(set, "fusion.", nn::ParameterGroup::kMlp);
  const nn::CrossViewFusion fusion(block, 4, 30);
  ASSERT_EQ(set.infos().size(), 12u);
  EXPECT_EQ(set.infos()[0].name, "fusion.0.weight");
  EXPECT_EQ(set.infos()[11].name, "fusion.11.weight");
  EXPECT_EQ(set.infos()[5].shape, (std::vector<int>{30, 30}));
  EXPECT_EQ(fusion.pair(0, 1), 0);
  EXPECT_EQ(fusion.pair(1, 0), 3);
  EXPECT_EQ(fusion.pair(2, 3), 8);
  EXPECT_EQ(fusion.pair(3, 2), 11);
  EXPECT_DOUBLE_EQ(fusion.other_weight(), 0.2);
  nn::Initializer init(7);
  fusion.initialize(block.values(), init);
  const std::vector<float>& w = set.values();
  EXPECT_GE(*std::min_element(w.begin(), w.end()), 0.0f);
  EXPECT_LT(*std::max_element(w.begin(), w.end()), 0.1f);
  double mean = 0;
  for (float v : w) mean += v;
  mean /= double(w.size());
  EXPECT_NEAR(mean, 0.05, 0.001);
}

TEST(CrossViewFusion, ShapesThatDoNotMatchTheLayerAreRejected) {
  nn::ParameterSet set;
  nn::ParameterBlock block(set, "fusion.", nn::ParameterGroup::kMlp);
  EXPECT_THROW(nn::CrossViewFusion(block, 1, 30), InvalidArgument);
  EXPECT_THROW(nn::CrossViewFusion(block, 3, 0), InvalidArgument);
  const nn::CrossViewFusion fusion(block, 3, 30);
  const std::vector<double> params(block.size()), maps(4 * 2 * 30);
  std::vector<double> out(maps.size()), grads(params.size());
  const auto message = [&](int views, int rows, int pixels) -> std::string {
    try {
      fusion.forward(params.data(), views, rows, pixels, maps.data(), out.data());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(4, 2, 30),
            "cross-view fusion: heatmaps of 4 views x 2 rows x 30 pixels, the layer fuses 3 views "
            "of 30 pixels (and needs a row)");
  EXPECT_NE(message(3, 2, 29), "no error");
  EXPECT_NE(message(3, 0, 30), "no error");
  EXPECT_NO_THROW(fusion.forward(params.data(), 3, 2, 30, maps.data(), out.data()));
  EXPECT_THROW(
      fusion.backward(params.data(), grads.data(), 2, 2, 30, maps.data(), maps.data(), out.data()),
      InvalidArgument);
}

}  // namespace
}  // namespace mvibr
