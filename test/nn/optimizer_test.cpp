// Adam, the step decay and gradient clipping against PyTorch (adam_reference.py: torch.optim.Adam
// with IBRNet's two parameter groups, StepLR stepped once per iteration, clip_grad_norm_) over
// several steps of random gradients, within 1e-6 (normwise relative, float); plus the schedule's
// first decay, the first update's size, and bit-identical results for any thread count.
// Adam's weight decay against torch.optim.Adam's L2 penalty and AdamW against torch.optim.AdamW
// (float, the same bound), LAMB against a float64 PyTorch LAMB
// (apex's arithmetic; float against float64: 1e-6), the warm-up-then-cosine rates bit for bit
// against transformers' formula in Python, and a restore mid-run continuing bit for bit.
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

// Two groups, interleaved so that the optimiser meets several runs of each; 1-D tensors (which
// weight decay spares by default) between the others; the last tensor starts at zero (LAMB's
// trust ratio of 1).
ParameterSet reference_parameters() {
  ParameterSet set;
  set.add("feature_net.conv1.weight", {4, 3, 3, 3}, ParameterGroup::kFeature);
  set.add("net_coarse.base_fc.0.weight", {8, 5}, ParameterGroup::kMlp);
  set.add("feature_net.conv1.bias", {4}, ParameterGroup::kFeature);
  set.add("net_coarse.base_fc.0.bias", {8}, ParameterGroup::kMlp);
  set.add("net_coarse.out_geometry_fc.weight", {3, 8}, ParameterGroup::kMlp);
  // Small values, so that a wrong update shows against the values' own rounding.
  const size_t zero_tensor = set.infos().back().size;
  const std::vector<double> values =
      synthetic::random_values(set.size() - zero_tensor, -0.01, 0.01, 21);
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

// Steps [first, last) of the reference gradients on `params` and `adam`.
void take_steps(ParameterSet* params, Adam* adam, int first, int last,
                std::vector<double>* lr_feature = nullptr, std::vector<double>* lr_mlp = nullptr,
                std::vector<double>* norms = nullptr) {
  const std::vector<std::vector<float>> grads = reference_gradients(params->size());
  for (int s = first; s < last; ++s) {
    params->grads() = grads[size_t(s)];
    if (lr_feature) lr_feature->push_back(adam->learning_rate(ParameterGroup::kFeature));
    if (lr_mlp) lr_mlp->push_back(adam->learning_rate(ParameterGroup::kMlp));
    const double norm = adam->step(params);
    if (norms) norms->push_back(norm);
  }
}

Trajectory run_ours(const AdamOptions& options) {
  ParameterSet params = reference_parameters();
  Adam adam(params, options);
  std::vector<double> lr_feature, lr_mlp, norms;
  take_steps(&params, &adam, 0, kSteps, &lr_feature, &lr_mlp, &norms);
  return {std::move(params), std::move(adam), lr_feature, lr_mlp, norms};
}

// A case of the reference: Adam with IBRNet's step decay unless it says otherwise.
struct ReferenceCase {
  double max_grad_norm = 0;
  OptimizerKind kind = OptimizerKind::kAdam;
  double weight_decay = 0;
  bool weight_decay_1d = false;
  bool cosine = false;  // warm-up over 3 updates, then cosine to 0.1 at update 12
};

AdamOptions reference_options(const ReferenceCase& c) {
  AdamOptions options;
  options.lrate_feature = 1e-3;
  options.lrate_mlp = 5e-4;
  options.lrate_decay_factor = 0.7;
  options.lrate_decay_steps = 5;  // decays before updates 6 and 11
  options.max_grad_norm = c.max_grad_norm;
  options.kind = c.kind;
  options.weight_decay = c.weight_decay;
  options.weight_decay_1d = c.weight_decay_1d;
  if (c.cosine) {
    options.lr_schedule = LrSchedule::kCosine;
    options.warmup_steps = 3;
    options.total_steps = kSteps;
    options.min_lr_ratio = 0.1;
  }
  return options;
}

const char* kind_name(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam ? "adam" : kind == OptimizerKind::kAdamW ? "adamw" : "lamb";
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
    for (const auto& [name, c] : cases()) {
      const fs::path dir = root_ / name;
      fs::create_directories(dir);
      const AdamOptions o = reference_options(c);
      nlohmann::json spec = {{"steps", kSteps},
                             {"lrate_feature", o.lrate_feature},
                             {"lrate_mlp", o.lrate_mlp},
                             {"lrate_decay_factor", o.lrate_decay_factor},
                             {"lrate_decay_steps", o.lrate_decay_steps},
                             {"max_grad_norm", o.max_grad_norm},
                             {"optimizer", kind_name(o.kind)},
                             {"weight_decay", o.weight_decay},
                             {"schedule", c.cosine ? "cosine" : "step"},
                             {"warmup_steps", o.warmup_steps},
                             {"total_steps", o.total_steps},
                             {"min_lr_ratio", o.min_lr_ratio},
                             {"groups", nlohmann::json::array()},
                             {"decays", nlohmann::json::array()}};
      for (size_t p = 0; p < params.infos().size(); ++p) {
        const ParameterInfo& info = params.infos()[p];
        spec["groups"].push_back(info.group == ParameterGroup::kFeature ? "feature" : "mlp");
        spec["decays"].push_back(o.weight_decay_1d || info.shape.size() > 1);
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

  // max_grad_norm 0.5 lies between the smallest gradient norm (about 0.07) and the largest
  // (about 70). A weight decay of 0.25 moves the values by about 1e-3 of themselves over the
  // run, a thousand times the bound.
  static std::map<std::string, ReferenceCase> cases() {
    using K = OptimizerKind;
    return {{"plain", {}},
            {"clipped", {0.5}},
            {"adam_l2", {0, K::kAdam, 0.25}},
            {"adamw", {0, K::kAdamW, 0.25}},
            {"adamw_cosine_1d", {0.5, K::kAdamW, 0.25, true, true}},
            {"lamb", {0, K::kLamb, 0.25}},
            {"lamb_cosine_1d", {0.5, K::kLamb, 0.25, true, true}}};
  }

  static void check(const std::string& name) {
    ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch: "
                             "scripts/setup.sh installs it)";
    const ReferenceCase c = cases().at(name);
    const double max_norm = c.max_grad_norm;
    const Trajectory run = run_ours(reference_options(c));
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
    // The cosine's rates are the formula's bits (StepLR's are products, step after step).
    EXPECT_LE(worst_lr, c.cosine ? 0.0 : 1e-12) << name;
    EXPECT_LE(worst_norm, 1e-6) << name;
    if (max_norm > 0) {
      EXPECT_GT(clipped, 0);
      EXPECT_LT(clipped, kSteps);
    }
    if (c.cosine) {
      // Warm-up from 0 over updates 1..3, the peak at update 4, then down towards 0.1 x.
      EXPECT_EQ(lr[0], 0.0);
      EXPECT_EQ(lr[2 * 3], 1e-3);
      EXPECT_GT(lr[2 * (kSteps - 1)], 1e-4);
      EXPECT_LT(lr[2 * (kSteps - 1)], 2e-4);
    } else {
      // The schedule itself: update 6 is the first decayed one.
      EXPECT_EQ(lr[2 * 4], 1e-3);
      EXPECT_NEAR(lr[2 * 5], 7e-4, 1e-18);
    }
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

TEST_F(AdamReference, AdamWithWeightDecayMatchesTorchAdamsL2Penalty) {
  check("adam_l2");
}

TEST_F(AdamReference, AdamWMatchesTorchAdamWSparingOneDimensionalTensors) {
  check("adamw");
}

TEST_F(AdamReference, AdamWMatchesTorchWithCosineScheduleDecayingEveryTensor) {
  check("adamw_cosine_1d");
}

TEST_F(AdamReference, LambMatchesAFloat64Lamb) {
  check("lamb");
}

TEST_F(AdamReference, LambMatchesAFloat64LambWithCosineScheduleAndClipping) {
  check("lamb_cosine_1d");
}

// cosine_learning_rate against transformers' lambda in Python (adam_reference.py --cosine) at
// every update of three schedules, bit for bit in double.
TEST(CosineSchedule, EqualsTransformersFormulaBitForBit) {
  struct Shape {
    double initial;
    uint64_t warmup, total;
    double min_lr_ratio;
  };
  const Shape shapes[] = {{1e-3, 10, 100, 0.0}, {5e-4, 0, 37, 0.1}, {3e-4, 1, 250, 0.03}};
  nlohmann::json points = nlohmann::json::array();
  std::vector<double> ours;
  for (const Shape& s : shapes) {
    for (uint64_t completed = 0; completed <= s.total; ++completed) {
      points.push_back({{"initial", s.initial},
                        {"warmup_steps", s.warmup},
                        {"total_steps", s.total},
                        {"min_lr_ratio", s.min_lr_ratio},
                        {"completed", completed}});
      ours.push_back(cosine_learning_rate(s.initial, s.warmup, s.total, s.min_lr_ratio, completed));
    }
  }
  const fs::path dir =
      fs::temp_directory_path() / ("mvibr-cosine-reference-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "points.json") << points.dump();
  const char* source = std::getenv("MVIBR_SOURCE_DIR");
  const std::string script =
      std::string(source ? source : MVIBR_TEST_SOURCE_DIR) + "/test/reference/adam_reference.py";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " --cosine " +
                         (dir / "points.json").string() + " " + (dir / "rates.npy").string())
                            .c_str()),
            0);
  const std::vector<double> reference = test::read_npy((dir / "rates.npy").string()).data;
  fs::remove_all(dir);
  ASSERT_EQ(reference.size(), ours.size());
  size_t differing = 0;
  for (size_t i = 0; i < ours.size(); ++i) differing += ours[i] != reference[i];
  EXPECT_EQ(differing, 0u) << "of " << ours.size() << " rates";
  // The shape: 0 first, the full rate after the warm-up, min_lr_ratio x at the end.
  EXPECT_EQ(cosine_learning_rate(1e-3, 10, 100, 0.0, 0), 0.0);
  EXPECT_EQ(cosine_learning_rate(1e-3, 10, 100, 0.0, 10), 1e-3);
  EXPECT_EQ(cosine_learning_rate(5e-4, 0, 37, 0.1, 37), 5e-4 * 0.1);
  EXPECT_EQ(cosine_learning_rate(5e-4, 0, 37, 0.1, 1000), 5e-4 * 0.1);
}

// A run restored mid-way (values, moments and counts, as a checkpoint holds them) continues as
// the run that never stopped, bit for bit, with each optimiser and the cosine schedule.
TEST(Adam, RestoredMidRunContinuesBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW, OptimizerKind::kLamb}) {
    SCOPED_TRACE(kind_name(kind));
    ReferenceCase c;
    c.kind = kind;
    c.weight_decay = kind == OptimizerKind::kAdam ? 0.0 : 0.25;
    c.cosine = true;
    const AdamOptions options = reference_options(c);
    const Trajectory whole = run_ours(options);
    ParameterSet params = reference_parameters();
    Adam first(params, options);
    take_steps(&params, &first, 0, 5);
    Adam second(params, options);  // a new process: fresh moments, then the checkpoint's
    second.restore(first.steps(), first.exp_avg(), first.exp_avg_sq(), first.group_steps());
    EXPECT_EQ(second.learning_rate(ParameterGroup::kMlp),
              first.learning_rate(ParameterGroup::kMlp));
    take_steps(&params, &second, 5, kSteps);
    EXPECT_TRUE(params.values() == whole.params.values());
    EXPECT_TRUE(second.exp_avg() == whole.adam.exp_avg());
    EXPECT_TRUE(second.exp_avg_sq() == whole.adam.exp_avg_sq());
    // Not vacuous: a restore without the moments continues differently.
    ParameterSet fresh = reference_parameters();
    Adam forgetful(fresh, options);
    take_steps(&fresh, &forgetful, 0, 5);
    Adam restarted(fresh, options);
    restarted.restore(forgetful.steps(), std::vector<float>(fresh.size()),
                      std::vector<float>(fresh.size()), forgetful.group_steps());
    take_steps(&fresh, &restarted, 5, kSteps);
    EXPECT_FALSE(fresh.values() == whole.params.values());
  }
}

// LAMB's first update with no weight decay: m_hat = g, v_hat = g^2, so u = g / (|g| + eps), and
// each tensor moves by lr x ||p|| / ||u|| along u; a tensor at zero moves by lr along u.
TEST(Lamb, FirstUpdateScalesEachTensorByItsTrustRatio) {
  ParameterSet params;
  params.add("w", {2, 2}, ParameterGroup::kMlp);
  params.add("b", {2}, ParameterGroup::kMlp);
  const float values[6] = {3.0f, 4.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const float grads[6] = {1.0f, -2.0f, 0.5f, 0.0f, -1.0f, 4.0f};
  std::copy(values, values + 6, params.values().begin());
  std::copy(grads, grads + 6, params.grads().begin());
  AdamOptions options;
  options.kind = OptimizerKind::kLamb;
  options.lrate_mlp = 1e-2;
  Adam lamb(params, options);
  lamb.step(&params);
  const double trust = 5.0 / std::sqrt(3.0);  // ||p|| = 5; u is +-1 where g != 0, else 0
  for (int i = 0; i < 6; ++i) {
    const double g = grads[i], u = g / (std::abs(g) + 1e-8);
    const double expected = values[i] - 1e-2 * (i < 4 ? trust : 1.0) * u;
    // Within a float's rounding of the value (the update is 1e-2 or 2.9e-2).
    EXPECT_NEAR(params.values()[size_t(i)], expected, 1.2e-7 * std::max(1.0, std::abs(expected)))
        << i;
  }
  EXPECT_THROW(lamb.begin_update(), InvalidArgument);  // no device path: it needs the norms
}

// AdamW's decay is decoupled: with a zero gradient a decayed value only shrinks by
// 1 - lr x weight_decay (then Adam's update of 0); a 1-D tensor is spared unless weight_decay_1d.
TEST(AdamW, DecaysTwoDimensionalTensorsAndSparesOneDimensionalOnesByDefault) {
  for (bool decay_1d : {false, true}) {
    ParameterSet params;
    params.add("w", {1, 2}, ParameterGroup::kFeature);
    params.add("b", {2}, ParameterGroup::kFeature);
    std::fill(params.values().begin(), params.values().end(), 1.0f);
    AdamOptions options;
    options.kind = OptimizerKind::kAdamW;
    options.weight_decay = 0.5;
    options.weight_decay_1d = decay_1d;
    Adam adamw(params, options);
    adamw.step(&params);
    const float decayed = float(1 - 1e-3 * 0.5);
    EXPECT_EQ(params.values(), (std::vector<float>{decayed, decayed, decay_1d ? decayed : 1.0f,
                                                   decay_1d ? decayed : 1.0f}));
    EXPECT_EQ(adamw.spans().size(), decay_1d ? 1u : 2u);
  }
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

// The pose model's fusion weights (kFusion) train at lrate_fusion, apart from lrate_mlp.
TEST(Adam, TheFusionGroupTrainsAtLrateFusion) {
  ParameterSet params;
  params.add("mlp", {1}, ParameterGroup::kMlp);
  params.add("fusion", {1}, ParameterGroup::kFusion);
  AdamOptions options;
  options.lrate_mlp = 1e-3;
  options.lrate_fusion = 1e-6;
  Adam adam(params, options);
  EXPECT_EQ(adam.learning_rate(ParameterGroup::kFusion), 1e-6);
  std::fill(params.grads().begin(), params.grads().end(), 1.0f);
  adam.step(&params);
  EXPECT_NEAR(params.values()[0], -1e-3, 1e-6 * 1e-3);
  EXPECT_NEAR(params.values()[1], -1e-6, 1e-6 * 1e-6);
  options.lrate_fusion = -1;
  EXPECT_THROW(Adam(params, options), InvalidArgument);
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
  options = AdamOptions();
  options.weight_decay = -0.1;
  EXPECT_THROW(Adam(params, options), InvalidArgument);
  options.weight_decay = 0.1;  // Adam's L2 penalty
  EXPECT_NO_THROW(Adam(params, options));
  options.kind = OptimizerKind::kAdamW;
  options.lr_schedule = LrSchedule::kCosine;
  options.warmup_steps = 10;
  options.total_steps = 10;
  EXPECT_THROW(Adam(params, options), InvalidArgument);
  Adam adam(params, AdamOptions());
  ParameterSet other;
  other.add("w", {5}, ParameterGroup::kMlp);
  EXPECT_THROW(adam.step(&other), InvalidArgument);
  EXPECT_THROW(adam.restore(1, std::vector<float>(3), std::vector<float>(4)), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::nn
