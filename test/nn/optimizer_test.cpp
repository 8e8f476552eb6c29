// Adam, the step decay and gradient clipping against PyTorch (adam_reference.py: torch.optim.Adam
// with IBRNet's two parameter groups, StepLR stepped once per iteration, clip_grad_norm_) over
// several steps of random gradients, within 1e-6 (normwise relative, float); plus the schedule's
// first decay, the first update's size, and bit-identical results for any thread count.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"

namespace mvibr::nn {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;

constexpr int kSteps = 12;

// Two groups, interleaved so that the optimiser meets several runs of each.
ParameterSet reference_parameters() {
  ParameterSet set;
  set.add("feature_net.conv1.weight", {4, 3, 3, 3}, ParameterGroup::kFeature);
  set.add("net_coarse.base_fc.0.weight", {8, 5}, ParameterGroup::kMlp);
  set.add("feature_net.conv1.bias", {4}, ParameterGroup::kFeature);
  set.add("net_coarse.base_fc.0.bias", {8}, ParameterGroup::kMlp);
  // Small values, so that a wrong update shows against the values' own rounding.
  const std::vector<double> values = synthetic::random_values(set.size(), -0.01, 0.01, 21);
  std::copy(values.begin(), values.end(), set.values().begin());
  return set;
}

// The gradient of every step: random, scaled over three decades from step to step (so that
// clipping applies on some steps only), every seventh value exactly zero (the eps path).
std::vector<std::vector<float>> reference_gradients(size_t count) {
  std::vector<std::vector<float>> steps;
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = synthetic::random_values(count, -1, 1, 100 + uint64_t(s));
    const double scale = std::pow(10.0, double(s % 4) - 2);
    std::vector<float> grad(count);
    for (size_t i = 0; i < count; ++i) grad[i] = i % 7 == 3 ? 0.0f : float(g[i] * scale);
    steps.push_back(grad);
  }
  return steps;
}

struct Trajectory {
  ParameterSet params;
  Adam adam;
  std::vector<double> lr_feature, lr_mlp, norms;
};

Trajectory run_ours(const AdamOptions& options) {
  ParameterSet params = reference_parameters();
  Adam adam(params, options);
  std::vector<double> lr_feature, lr_mlp, norms;
  for (const std::vector<float>& grad : reference_gradients(params.size())) {
    params.grads() = grad;
    lr_feature.push_back(adam.learning_rate(ParameterGroup::kFeature));
    lr_mlp.push_back(adam.learning_rate(ParameterGroup::kMlp));
    norms.push_back(adam.step(&params));
  }
  return {std::move(params), std::move(adam), lr_feature, lr_mlp, norms};
}

AdamOptions reference_options(double max_grad_norm) {
  AdamOptions options;
  options.lrate_feature = 1e-3;
  options.lrate_mlp = 5e-4;
  options.lrate_decay_factor = 0.7;
  options.lrate_decay_steps = 5;  // decays before updates 6 and 11
  options.max_grad_norm = max_grad_norm;
  return options;
}

// max |ours - reference| / max |reference|.
double normwise_error(const float* ours, const std::vector<double>& reference) {
  double difference = 0, scale = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    difference = std::max(difference, std::abs(double(ours[i]) - reference[i]));
    scale = std::max(scale, std::abs(reference[i]));
  }
  return scale > 0 ? difference / scale : difference;
}

class AdamReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-adam-reference-" + std::to_string(::getpid()));
    const ParameterSet params = reference_parameters();
    const std::vector<std::vector<float>> grads = reference_gradients(params.size());
    for (const auto& [name, max_norm] : cases()) {
      const fs::path dir = root_ / name;
      fs::create_directories(dir);
      const AdamOptions o = reference_options(max_norm);
      nlohmann::json spec = {{"steps", kSteps},
                             {"lrate_feature", o.lrate_feature},
                             {"lrate_mlp", o.lrate_mlp},
                             {"lrate_decay_factor", o.lrate_decay_factor},
                             {"lrate_decay_steps", o.lrate_decay_steps},
                             {"max_grad_norm", o.max_grad_norm},
                             {"groups", nlohmann::json::array()}};
      for (size_t p = 0; p < params.infos().size(); ++p) {
        const ParameterInfo& info = params.infos()[p];
        spec["groups"].push_back(info.group == ParameterGroup::kFeature ? "feature" : "mlp");
        const std::vector<size_t> shape(info.shape.begin(), info.shape.end());
        const float* value = params.values().data() + info.offset;
        test::write_npy(dir / ("value_" + std::to_string(p) + ".npy"),
                        {shape, std::vector<double>(value, value + info.size)});
        NpyArray grad{{size_t(kSteps)}, {}};
        grad.shape.insert(grad.shape.end(), shape.begin(), shape.end());
        for (const std::vector<float>& g : grads) {
          grad.data.insert(grad.data.end(), g.begin() + std::ptrdiff_t(info.offset),
                           g.begin() + std::ptrdiff_t(info.offset + info.size));
        }
        test::write_npy(dir / ("grad_" + std::to_string(p) + ".npy"), grad);
      }
      std::ofstream(dir / "case.json") << spec.dump();
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script =
        std::string(source ? source : MVIBR_TEST_SOURCE_DIR) + "/test/reference/adam_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }

  // Case name -> max_grad_norm. 0.5 lies between the smallest gradient norm (about 0.07) and
  // the largest (about 70).
  static std::map<std::string, double> cases() { return {{"plain", 0.0}, {"clipped", 0.5}}; }

  static void check(const std::string& name) {
    ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch: "
                             "scripts/setup.sh installs it)";
    const double max_norm = cases().at(name);
    const Trajectory run = run_ours(reference_options(max_norm));
    const fs::path dir = root_ / name;
    const auto reference = [&](const std::string& output) {
      return test::read_npy((dir / ("ref_" + output + ".npy")).string()).data;
    };
    double worst = 0;
    for (size_t p = 0; p < run.params.infos().size(); ++p) {
      const size_t offset = run.params.infos()[p].offset;
      const std::string index = std::to_string(p);
      const double errors[3] = {
          normwise_error(run.params.values().data() + offset, reference("value_" + index)),
          normwise_error(run.adam.exp_avg().data() + offset, reference("exp_avg_" + index)),
          normwise_error(run.adam.exp_avg_sq().data() + offset, reference("exp_avg_sq_" + index))};
      for (double e : errors) {
        EXPECT_LE(e, 1e-6) << name << " parameter " << run.params.infos()[p].name;
        worst = std::max(worst, e);
      }
    }
    const std::vector<double> lr = reference("lr"), norm = reference("norm");
    double worst_lr = 0, worst_norm = 0;
    int clipped = 0;
    for (int s = 0; s < kSteps; ++s) {
      worst_lr = std::max({worst_lr, std::abs(run.lr_feature[size_t(s)] / lr[2 * size_t(s)] - 1),
                           std::abs(run.lr_mlp[size_t(s)] / lr[2 * size_t(s) + 1] - 1)});
      worst_norm = std::max(worst_norm, std::abs(run.norms[size_t(s)] / norm[size_t(s)] - 1));
      clipped += norm[size_t(s)] > max_norm;
    }
    EXPECT_LE(worst_lr, 1e-12) << name;
    EXPECT_LE(worst_norm, 1e-6) << name;
    if (max_norm > 0) {
      EXPECT_GT(clipped, 0);
      EXPECT_LT(clipped, kSteps);
    }
    // The schedule itself: update 6 is the first decayed one.
    EXPECT_EQ(lr[2 * 4], 1e-3);
    EXPECT_NEAR(lr[2 * 5], 7e-4, 1e-18);
    std::printf("  %-8s values and moments %.1e, learning rates %.1e, norms %.1e (rel. errors)\n",
                name.c_str(), worst, worst_lr, worst_norm);
  }

  static inline fs::path root_;
  static inline int status_ = -1;
};

TEST_F(AdamReference, MatchesTorchAdamWithStepLR) {
  check("plain");
}

TEST_F(AdamReference, MatchesTorchWithClipGradNorm) {
  check("clipped");
}

TEST(LearningRate, DecaysFirstOnUpdateDecayStepsPlusOne) {
  // StepLR after every optimizer.step(): updates 1..3 at the initial rate, 4..6 at half.
  for (uint64_t completed = 0; completed < 9; ++completed) {
    EXPECT_EQ(step_decay_learning_rate(1e-3, 0.5, 3, completed),
              1e-3 * std::pow(0.5, double(completed / 3)))
        << completed;
  }
  ParameterSet params;
  params.add("w", {2}, ParameterGroup::kMlp);
  AdamOptions options;
  options.lrate_mlp = 1e-3;
  options.lrate_decay_steps = 3;
  Adam adam(params, options);
  std::vector<double> used;
  for (int i = 0; i < 7; ++i) {
    used.push_back(adam.learning_rate(ParameterGroup::kMlp));
    adam.step(&params);
  }
  EXPECT_EQ(used, (std::vector<double>{1e-3, 1e-3, 1e-3, 5e-4, 5e-4, 5e-4, 2.5e-4}));
}

TEST(Adam, FirstUpdateMovesEachValueByItsGroupsLearningRate) {
  // After one step m_hat = g and v_hat = g^2: every value moves by lr * g / (|g| + eps).
  ParameterSet params;
  params.add("f", {3}, ParameterGroup::kFeature);
  params.add("m", {3}, ParameterGroup::kMlp);
  const float grads[6] = {2.0f, -0.5f, 0.0f, 1e-3f, -4.0f, 0.0f};
  std::copy(grads, grads + 6, params.grads().begin());
  AdamOptions options;
  Adam adam(params, options);
  adam.step(&params);
  for (int i = 0; i < 6; ++i) {
    const double lr = i < 3 ? 1e-3 : 5e-4, g = grads[i];
    const double expected = -lr * g / (std::abs(g) + 1e-8);
    EXPECT_NEAR(params.values()[size_t(i)], expected, 1e-6 * lr) << i;
  }
  EXPECT_EQ(adam.steps(), 1u);
}

// A group left out of updates (DynIBaR's dynamic parts in its bootstrap) is untouched, and its
// first update is a first update: m_hat = g, v_hat = g^2, as torch's per-parameter count has it
// for a parameter whose gradient was None until then. DynIBaR's group rates are multiples.
TEST(Adam, AGroupLeftOutKeepsItsStateAndStartsItsBiasCorrectionWhenItJoins) {
  ParameterSet params;
  params.add("static", {1}, ParameterGroup::kStaticMlp);
  params.add("dynamic", {1}, ParameterGroup::kMlp);
  params.add("basis", {1}, ParameterGroup::kTrajectoryBasis);
  AdamOptions options;
  options.static_rate_multiplier = 0.5;
  options.basis_rate_multiplier = 0.25;
  Adam adam(params, options);
  const uint32_t static_only = 1u << int(ParameterGroup::kStaticMlp);
  for (int i = 0; i < 5; ++i) {
    std::fill(params.grads().begin(), params.grads().end(), 1.0f);
    adam.step(&params, 1.0, static_only);
  }
  EXPECT_EQ(params.values()[1], 0.0f);
  EXPECT_EQ(params.values()[2], 0.0f);
  EXPECT_EQ(adam.exp_avg()[1], 0.0f);
  EXPECT_EQ(adam.steps(), 5u);
  EXPECT_EQ(adam.group_steps()[size_t(ParameterGroup::kStaticMlp)], 5u);
  EXPECT_EQ(adam.group_steps()[size_t(ParameterGroup::kMlp)], 0u);
  const float grads[3] = {1.0f, 2.0f, -3.0f};
  std::copy(grads, grads + 3, params.grads().begin());
  const float before = params.values()[0];
  adam.step(&params, 1.0);
  EXPECT_NEAR(params.values()[1], -5e-4 * 2 / (2 + 1e-8), 1e-6 * 5e-4);
  EXPECT_NEAR(params.values()[2], 0.25 * 5e-4 * 3 / (3 + 1e-8), 1e-6 * 5e-4);
  EXPECT_LT(params.values()[0], before);
  EXPECT_EQ(adam.group_steps()[size_t(ParameterGroup::kMlp)], 1u);
  EXPECT_EQ(adam.learning_rate(ParameterGroup::kStaticMlp), 0.5 * 5e-4);
  Adam restored(params, options);
  EXPECT_THROW(restored.restore(2, adam.exp_avg(), adam.exp_avg_sq(), adam.group_steps()),
               InvalidArgument);  // a group's count above the updates taken
}

TEST(Adam, ClipGradNormScalesOnlyAboveTheLimitAndReturnsTheNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_grad_norm(g.data(), g.size(), 10.0), 5.0);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(clip_grad_norm(g.data(), g.size(), 1.0), 5.0);
  const float scale = float(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(g, (std::vector<float>{3.0f * scale, 4.0f * scale}));
}

TEST(Adam, IsBitIdenticalForAnyThreadCount) {
  // Large enough for many norm chunks and a parallel update.
  const auto run = [](int threads) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    ParameterSet params;
    params.add("a", {300, 500}, ParameterGroup::kFeature);
    params.add("b", {70001}, ParameterGroup::kMlp);
    AdamOptions options;
    options.max_grad_norm = 50;
    Adam adam(params, options);
    std::vector<double> norms;
    for (int s = 0; s < 3; ++s) {
      const std::vector<double> g = synthetic::random_values(params.size(), -1, 1, uint64_t(s));
      std::copy(g.begin(), g.end(), params.grads().begin());
      norms.push_back(adam.step(&params));
    }
    omp_set_num_threads(before);
    return std::make_tuple(params.values(), adam.exp_avg(), adam.exp_avg_sq(), norms);
  };
  EXPECT_TRUE(run(1) == run(4));
}

TEST(Adam, RejectsBadOptionsAndForeignParameters) {
  ParameterSet params;
  params.add("w", {4}, ParameterGroup::kMlp);
  AdamOptions options;
  options.lrate_decay_steps = 0;
  EXPECT_THROW(Adam(params, options), InvalidArgument);
  options = AdamOptions();
  options.beta2 = 1.0;
  EXPECT_THROW(Adam(params, options), InvalidArgument);
  Adam adam(params, AdamOptions());
  ParameterSet other;
  other.add("w", {5}, ParameterGroup::kMlp);
  EXPECT_THROW(adam.step(&other), InvalidArgument);
  EXPECT_THROW(adam.restore(1, std::vector<float>(3), std::vector<float>(4)), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::nn
