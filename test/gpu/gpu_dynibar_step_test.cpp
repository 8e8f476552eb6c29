// DynIBaR's step with its networks on a CUDA device (device = cuda) against the CPU step on the
// same weights, sample, rays and draws: the two feature networks, the three branches' gathers and
// networks, and the motion MLP on the device, the rest on the host (train/dynibar_device.h).
// Each device part is compared with its CPU counterpart alone in the other gpu tests; this checks
// their composition: which arrays go where, the micro-batches kept apart, the gradients handed
// back, fp16's loss scale divided out, and the renders.
//
// Bounds (normwise, max |gpu - cpu| / max |cpu|, per parameter tensor): both sides are fp32 with
// sums in different orders (cuBLAS and cuDNN against the CPU's GEMMs and oneDNN), so within
// IBRNet's GPU step bounds (gpu_train_step_test): the loss and its terms 2e-5, the gradients 2e-4.
// Plain C++: every test skips without a device; CI runs it on the emulated one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../train/training_fixture.h"
#include "mvibr/core/device.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/synthetic/random_scene.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/ray_batch.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

constexpr int kFrames = 12, kReach = 6;

class GpuDynibarStep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    root_ = fs::temp_directory_path() / ("mvibr-gpu-dynibar-" + std::to_string(::getpid()));
    testing::prepare_small_video(root_, "gpu_dynibar_step_test", kFrames, kReach);
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }

  static TrainConfig config(Device device, int n_rand, Precision precision = Precision::kFp32) {
    TrainConfig c = testing::small_dynibar_config(root_, "gpu", 1, n_rand, kReach);
    c.coarse_feat_dim = c.fine_feat_dim = 8;
    c.seed = 5;
    c.device = device;
    c.precision = precision;
    return with_video_frames(c);
  }

  // A sample whose target has every dynamic source (frames 3 .. 8).
  static data::TrainingSample sample(const TrainConfig& c) {
    return testing::video_sample(c, 3, kFrames - 4);
  }

  static StepResult step(DynibarModel* model, const data::TrainingSample& s, int micro_batches,
                         double loss_scale = 1) {
    model->set_loss_scale(loss_scale);
    model->begin_step(s);
    LossSums sums(model->loss_sums_size(), 0.0);
    for (int m = 0; m < micro_batches; ++m) {
      const LossSums batch = model->accumulate(RandomKey{7, 3}, m);
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += batch[i];
    }
    return model->end_step(sums, {});
  }

  static inline fs::path root_;
};

double relative(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
}

// The worst parameter tensor's normwise gradient error, and its name.
std::pair<double, std::string> worst_gradient(const nn::ParameterSet& actual,
                                              const nn::ParameterSet& expected) {
  std::pair<double, std::string> worst{0, ""};
  for (const nn::ParameterInfo& info : expected.infos()) {
    const auto first = std::ptrdiff_t(info.offset), last = first + std::ptrdiff_t(info.size);
    const double error = mvibr::normwise_relative_error(
        std::vector<float>(actual.grads().begin() + first, actual.grads().begin() + last),
        std::vector<float>(expected.grads().begin() + first, expected.grads().begin() + last));
    if (error > worst.first) worst = {error, info.name};
  }
  return worst;
}

// The main loop (update 12) in one and in two micro-batches, and the static bootstrap (update 11):
// the loss, every term and every gradient as the CPU's.
TEST_F(GpuDynibarStep, MatchesTheCpuStep) {
  for (const auto& [at, micro_batches] : {std::pair{12, 1}, std::pair{12, 2}, std::pair{11, 1}}) {
    SCOPED_TRACE("update " + std::to_string(at) + ", " + std::to_string(micro_batches) +
                 " micro-batches");
    TrainConfig cpu_config = config(Device::kCpu, 8), gpu_config = config(Device::kCuda, 8);
    // AdamW: its decay moves every value of a group the update takes, gradient or not, so the
    // bootstrap's update shows which groups the device leaves out.
    for (TrainConfig* c : {&cpu_config, &gpu_config}) {
      c->optimizer = nn::OptimizerKind::kAdamW;
      c->weight_decay = 0.5;
    }
    const data::TrainingSample s = sample(cpu_config);
    const auto cpu = testing::dynibar_model_at(cpu_config, uint64_t(at));
    const auto gpu = testing::dynibar_model_at(gpu_config, uint64_t(at));
    EXPECT_TRUE(gpu->on_device());  // its training state lives there: NCCL all-reduces it
    const StepResult expected = step(cpu.get(), s, micro_batches);
    const StepResult actual = step(gpu.get(), s, micro_batches);
    EXPECT_EQ(actual.valid_rays, expected.valid_rays);
    EXPECT_LE(relative(actual.loss, expected.loss), 2e-5);
    double worst_term = 0;
    for (size_t i = 0; i < expected.terms.size(); ++i) {
      const double error = std::abs(actual.terms[i].value - expected.terms[i].value) /
                           std::max(std::abs(expected.loss), 1e-30);
      EXPECT_LE(error, 2e-5) << expected.terms[i].key;
      worst_term = std::max(worst_term, error);
    }
    const auto [worst, name] = worst_gradient(gpu->parameters(), cpu->parameters());
    EXPECT_LE(worst, 2e-4) << name;
    // The update on the device (AdamW's moments and the group mask there): each value as the
    // CPU's within two steps of its group's rate (a gradient near zero may take the other sign
    // on either side), the groups the bootstrap leaves out unchanged, and the basis the host's
    // trajectories read back.
    const double norm = gpu->gradient_norm();
    EXPECT_LE(relative(norm, cpu->gradient_norm()), 1e-4);
    const std::vector<float> before = gpu->parameters().values();
    std::array<double, nn::kParameterGroupCount> rates{};
    for (int g = 0; g < nn::kParameterGroupCount; ++g) {
      rates[size_t(g)] = gpu->learning_rate(nn::ParameterGroup(g));
    }
    cpu->update(cpu->gradient_norm());
    gpu->update(norm);
    const nn::ParameterSet& want = std::as_const(*cpu).parameters();
    const nn::ParameterSet& got = std::as_const(*gpu).parameters();
    std::array<size_t, nn::kParameterGroupCount> cpu_changed{};
    for (const nn::ParameterInfo& info : want.infos()) {
      for (size_t i = info.offset; i < info.offset + info.size; ++i) {
        cpu_changed[size_t(info.group)] += want.values()[i] != before[i];
      }
    }
    size_t changed = 0;
    for (const nn::ParameterInfo& info : want.infos()) {
      const double rate = rates[size_t(info.group)];
      const bool left_out = cpu_changed[size_t(info.group)] == 0;
      for (size_t i = info.offset; i < info.offset + info.size; ++i) {
        const float g = got.values()[i];
        EXPECT_LE(std::abs(double(g) - double(want.values()[i])), 2.01 * rate) << info.name;
        if (left_out) {
          EXPECT_EQ(g, before[i]) << info.name;
        }
        changed += g != before[i];
      }
    }
    EXPECT_GT(changed, 0u);
    std::cout << "[          ] update " << at << " x" << micro_batches << ": loss "
              << relative(actual.loss, expected.loss) << ", worst term " << worst_term
              << ", worst gradient " << worst << " (" << name << "), " << changed
              << " values updated\n";
  }
}

// fp16's loss scale multiplies the gradients the device's backward passes start from and is
// divided out of every gradient read back: a power of two gives the fp32 step's gradients.
TEST_F(GpuDynibarStep, LossScaleIsDividedOut) {
  const TrainConfig c = config(Device::kCuda, 8);
  const data::TrainingSample s = sample(c);
  const auto unscaled = testing::dynibar_model_at(c, 12), scaled = testing::dynibar_model_at(c, 12);
  const StepResult a = step(unscaled.get(), s, 1), b = step(scaled.get(), s, 1, 1024);
  EXPECT_EQ(a.loss, b.loss);
  const auto [worst, name] = worst_gradient(scaled->parameters(), unscaled->parameters());
  EXPECT_LE(worst, 1e-6) << name;
}

// bf16 and fp16 GEMM inputs against fp32 on the device: the loss within 1e-2 and the whole
// gradient within 5e-2 (relative L2), as IBRNet's step.
TEST_F(GpuDynibarStep, MixedPrecisionStepsStayCloseToFp32) {
  const data::TrainingSample s = sample(config(Device::kCuda, 8));
  const auto reference = testing::dynibar_model_at(config(Device::kCuda, 8), 12);
  const StepResult fp32 = step(reference.get(), s, 1);
  const std::vector<float>& g = reference->parameters().grads();
  for (const auto& [precision, scale] :
       {std::pair{Precision::kBf16, 1.0}, std::pair{Precision::kFp16, 65536.0}}) {
    const auto model = testing::dynibar_model_at(config(Device::kCuda, 8, precision), 12);
    const StepResult result = step(model.get(), s, 1, scale);
    const std::vector<float>& h = model->parameters().grads();
    double difference = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      difference += (double(h[i]) - g[i]) * (double(h[i]) - g[i]);
      norm += double(g[i]) * g[i];
    }
    const double loss = relative(result.loss, fp32.loss), gradient = std::sqrt(difference / norm);
    EXPECT_LE(loss, 1e-2) << name_of(precision);
    EXPECT_LE(gradient, 5e-2) << name_of(precision);
    std::cout << "[          ] " << name_of(precision) << " vs fp32: loss " << loss << ", gradient "
              << gradient << " (relative L2)\n";
  }
}

// Rendering (no backward: the networks keep nothing) gives the CPU's frame and its parts.
TEST_F(GpuDynibarStep, RendersWhatTheCpuRenders) {
  const TrainConfig cpu_config = config(Device::kCpu, 8), gpu_config = config(Device::kCuda, 8);
  const data::TrainingSample s = sample(cpu_config);
  const auto cpu = testing::dynibar_model_at(cpu_config, 12),
             gpu = testing::dynibar_model_at(gpu_config, 12);
  std::vector<float> pixels;
  for (int y = 0; y < s.target.camera.height; y += 3) {
    for (int x = 0; x < s.target.camera.width; x += 3) {
      pixels.push_back(float(x) + 0.5f);
      pixels.push_back(float(y) + 0.5f);
    }
  }
  std::vector<float> rgb_cpu, depth_cpu, rgb_gpu, depth_gpu;
  RenderedParts parts_cpu, parts_gpu;
  cpu->render(s, pixels, RandomKey{1, 0}, &rgb_cpu, &depth_cpu, {}, &parts_cpu);
  gpu->render(s, pixels, RandomKey{1, 0}, &rgb_gpu, &depth_gpu, {}, &parts_gpu);
  ASSERT_EQ(rgb_gpu.size(), rgb_cpu.size());
  EXPECT_LE(mvibr::normwise_relative_error(rgb_gpu, rgb_cpu), 1e-4);
  EXPECT_LE(mvibr::normwise_relative_error(depth_gpu, depth_cpu), 1e-4);
  EXPECT_LE(mvibr::normwise_relative_error(parts_gpu.static_rgb, parts_cpu.static_rgb), 1e-4);
  EXPECT_LE(mvibr::normwise_relative_error(parts_gpu.dynamic_rgb, parts_cpu.dynamic_rgb), 1e-4);
}

}  // namespace
}  // namespace mvibr::train
