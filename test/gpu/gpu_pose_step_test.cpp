// The pose model with its network on a CUDA device (device = cuda) against the CPU model on the
// same weights and instants, and the pose layers of nn/cuda_pose.h one by one against the CPU's.
// - The step: the backbone, soft-argmax, channel means, confidence head, fusion and triangulation
//   on the device, the loss and the optimiser on the host (train/pose_device.h). Bounds as the
//   other GPU steps' (gpu_dynibar_step_test): both sides fp32 with sums in other orders (cuDNN and
//   cuBLAS against oneDNN and the CPU's GEMMs), so the loss and its terms 2e-5, the gradients 2e-4
//   normwise per tensor, the predicted joints 1e-4.
// - The layers run the CPU's per-map and per-joint math: 1e-6 normwise (a real GPU's expf and
//   fused multiply-adds round differently; on the emulated device they agree to the bit).
// Plain C++: every test skips without a device; CI runs it on the emulated one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "../train/training_fixture.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/data/pose_scene.h"
#include "mvibr/data/shards.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/nn/channel_mean.h"
#include "mvibr/nn/cross_view_fusion.h"
#include "mvibr/nn/cuda_pose.h"
#include "mvibr/nn/soft_argmax.h"
#include "mvibr/synthetic/random_scene.h"
#include "mvibr/train/pose_evaluate.h"
#include "mvibr/train/pose_model.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

class GpuPoseStep : public ::testing::Test {
 protected:
  // A tiny pose data set: 4 cameras at 48x48 (12x12 heatmaps), 2 training instants.
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    root_ = fs::temp_directory_path() / ("mvibr-gpu-pose-" + std::to_string(::getpid()));
    testing::write_pose_data(root_, 48, 2, 2, 1, 3, 1, "gpu_pose_step_test");
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }

  static TrainConfig config(Device device, bool use_confidences, int pose_batch,
                            bool recompute = false, bool fusion = false) {
    TrainConfig c = testing::small_pose_config(root_, "gpu", 1, pose_batch);
    c.device = device;
    c.use_confidences = use_confidences;
    c.recompute_backbone = recompute;
    c.cross_view_fusion = fusion;
    c.fusion_init_scale = 1;  // the published start: the fusion's GEMMs see non-zero weights
    c.accumulation_steps = 2 / pose_batch;
    return c;
  }
  static PoseRig rig() { return pose_rig(data::read_scene_index((root_ / "data").string()).scene); }

  static std::vector<data::TrainingSample> instants() {
    return pose_instants((root_ / "data").string(), data::Split::kTrain, 2);
  }

  static StepResult step(PoseModel* model, const std::vector<data::TrainingSample>& samples,
                         int micro_batches) {
    model->begin_step(samples);
    LossSums sums(model->loss_sums_size(), 0.0);
    for (int m = 0; m < micro_batches; ++m) {
      const LossSums batch = model->accumulate({}, m);
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += batch[i];
    }
    return model->end_step(sums, {});
  }

  static inline fs::path root_;
};

double relative(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-30);
}

// The loss, its terms, every parameter tensor's gradient and the predictions as the CPU's, with
// and without the confidence head, in one micro-batch of two instants and in two of one.
TEST_F(GpuPoseStep, MatchesTheCpuStep) {
  const std::vector<data::TrainingSample> samples = instants();
  ASSERT_EQ(samples.size(), 2u);
  struct Case {
    bool use_confidences;
    int micro_batches;
    bool recompute;  // the GPU side recomputes its backbone's activations; the CPU stores them
    bool fusion;     // cross-view fusion: the loss of both paths
  };
  for (const Case& c :
       {Case{true, 1, false, false}, Case{true, 2, false, false}, Case{false, 1, false, false},
        Case{true, 1, true, false}, Case{true, 2, false, true}, Case{true, 1, true, true}}) {
    const bool use_confidences = c.use_confidences;
    const int micro_batches = c.micro_batches;
    const std::string name = std::string(use_confidences ? "confidences" : "equal weights") + ", " +
                             std::to_string(micro_batches) + " micro-batches" +
                             (c.recompute ? ", recomputing" : "") + (c.fusion ? ", fusion" : "");
    SCOPED_TRACE(name);
    const int pose_batch = 2 / micro_batches;
    PoseModel cpu(config(Device::kCpu, use_confidences, pose_batch, false, c.fusion),
                  data::kPoseJoints, rig());
    PoseModel gpu(config(Device::kCuda, use_confidences, pose_batch, c.recompute, c.fusion),
                  data::kPoseJoints, rig());
    ASSERT_EQ(gpu.cross_view_fusion(), c.fusion);
    cpu.initialize(5);
    gpu.initialize(5);
    EXPECT_TRUE(gpu.on_device());  // its training state lives there: NCCL all-reduces it
    const StepResult expected = step(&cpu, samples, micro_batches);
    const StepResult actual = step(&gpu, samples, micro_batches);
    EXPECT_EQ(actual.valid_rays, expected.valid_rays);
    EXPECT_LE(relative(actual.loss, expected.loss), 2e-5) << actual.loss << " vs " << expected.loss;
    ASSERT_EQ(actual.terms.size(), expected.terms.size());
    for (size_t i = 0; i < expected.terms.size(); ++i) {
      EXPECT_LE(relative(actual.terms[i].value, expected.terms[i].value), 2e-5)
          << expected.terms[i].key;
    }
    double worst = 0;
    for (const nn::ParameterInfo& info : cpu.parameters().infos()) {
      const auto first = std::ptrdiff_t(info.offset), last = first + std::ptrdiff_t(info.size);
      const std::vector<float> want(cpu.parameters().grads().begin() + first,
                                    cpu.parameters().grads().begin() + last);
      const std::vector<float> got(gpu.parameters().grads().begin() + first,
                                   gpu.parameters().grads().begin() + last);
      const bool all_zero = std::all_of(want.begin(), want.end(), [](float g) { return g == 0; });
      if (all_zero) {  // the decoder's cancelled biases, or the unused head
        EXPECT_EQ(got, want) << info.name;
        continue;
      }
      double error = mvibr::normwise_relative_error(got, want);
      // Biases whose gradients nearly cancel (pose_model_test says why): the heatmaps' out_conv
      // bias (the softmax ignores a shift) and the confidence head's (normalised over views),
      // measured on their weight gradient's scale.
      const size_t bias = info.name.rfind(".bias");
      if (bias != std::string::npos &&
          (info.name == "backbone.out_conv.bias" || info.name.rfind("confidence.", 0) == 0)) {
        const nn::ParameterInfo& weight =
            cpu.parameters().info(cpu.parameters().find(info.name.substr(0, bias) + ".weight"));
        const auto* grads = cpu.parameters().grads().data();
        double difference = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          difference = std::max(difference, double(std::abs(got[i] - want[i])));
          scale = std::max(scale, double(std::abs(want[i])));
        }
        for (size_t i = 0; i < weight.size; ++i) {
          scale = std::max(scale, double(std::abs(grads[weight.offset + i])));
        }
        error = difference / scale;
      }
      EXPECT_LE(error, 2e-4) << info.name;
      worst = std::max(worst, error);
    }
    // The norm the device takes of its own gradients, as the host's of the CPU's.
    EXPECT_LE(relative(gpu.gradient_norm(), cpu.gradient_norm()), 1e-4);
    std::printf("  %s: loss %.1e, worst gradient %.1e; %.2f MB of device activations\n",
                name.c_str(), relative(actual.loss, expected.loss), worst,
                double(gpu.activation_bytes()) / 1e6);

    const std::vector<PosePrediction> want = cpu.predict(samples), got = gpu.predict(samples);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].triangulated, want[i].triangulated);
      EXPECT_LE(mvibr::normwise_relative_error(got[i].joints_world, want[i].joints_world), 1e-4);
      EXPECT_LE(mvibr::normwise_relative_error(got[i].joints_image, want[i].joints_image), 1e-4);
      EXPECT_LE(mvibr::normwise_relative_error(got[i].confidences, want[i].confidences), 1e-4);
      EXPECT_EQ(got[i].raw_triangulated, want[i].raw_triangulated);
      EXPECT_EQ(got[i].raw_joints_world.size(), want[i].raw_joints_world.size());
      if (c.fusion) {
        EXPECT_LE(mvibr::normwise_relative_error(got[i].raw_joints_world, want[i].raw_joints_world),
                  1e-4);
        EXPECT_LE(mvibr::normwise_relative_error(got[i].raw_joints_image, want[i].raw_joints_image),
                  1e-4);
      }
    }
  }
}

// Each layer of nn/cuda_pose.h against its CPU function on the instants' cameras and joints.
TEST_F(GpuPoseStep, LayersMatchTheCpuLayers) {
  const std::vector<data::TrainingSample> samples = instants();
  const int B = int(samples.size()), V = 4, J = data::kPoseJoints, K = 3, C = J + K;
  const int H = 6, W = 5, N = B * V, cells = H * W;
  const auto random = [](size_t count, float lo, float hi, uint64_t seed) {
    const std::vector<double> v = synthetic::random_values(count, lo, hi, seed);
    return std::vector<float>(v.begin(), v.end());
  };
  const std::vector<float> maps = random(size_t(N) * cells * C, -1, 1, 1);
  const std::vector<float> grad_points = random(size_t(N) * J * 2, -1, 1, 2);
  const std::vector<float> grad_means = random(size_t(N) * K, -1, 1, 3);
  const std::vector<float> confidences = random(size_t(N) * J, 0.1f, 1, 4);
  const std::vector<float> grad_weights = random(size_t(N) * J, -1, 1, 5);
  const std::vector<float> grad_joints = random(size_t(B) * J * 3, -1, 1, 6);
  std::vector<float> projections, points;
  for (const data::TrainingSample& s : samples) {
    for (int v = 0; v < V; ++v) {
      const data::View& view = v == 0 ? s.target : s.sources[size_t(v - 1)];
      float p[12];
      projection_matrix(camera_cast<float>(view.camera), p);
      projections.insert(projections.end(), p, p + 12);
      points.insert(points.end(), view.pose.joints_image.begin(), view.pose.joints_image.end());
    }
  }
  const nn::SoftArgmaxOptions options = nn::SoftArgmaxOptions::for_stride(4, 10);
  DeviceArray<float> d_maps(maps), d_grad_points(grad_points), d_grad_means(grad_means),
      d_confidences(confidences), d_grad_weights(grad_weights), d_grad_joints(grad_joints),
      d_projections(projections), d_points(points);
  const auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want,
                               const char* what) {
    EXPECT_LE(mvibr::normwise_relative_error(got, want), 1e-6) << what;
  };

  std::vector<float> want_points(size_t(N) * J * 2), want_grad_maps(maps.size(), 0.0f);
  nn::soft_argmax_forward(N, H, W, C, J, maps.data(), options, want_points.data());
  nn::soft_argmax_backward(N, H, W, C, J, maps.data(), options, grad_points.data(),
                           want_grad_maps.data());
  DeviceArray<float> out_points(want_points.size()), out_grad_maps(maps.size());
  out_grad_maps.zero();
  nn::cuda::soft_argmax_forward(N, H, W, C, J, d_maps.data(), options, out_points.data(), nullptr);
  nn::cuda::soft_argmax_backward(N, H, W, C, J, d_maps.data(), options, d_grad_points.data(),
                                 out_grad_maps.data(), nullptr);
  std::vector<float> want_means(size_t(N) * K);
  nn::channel_mean_forward(N, cells, C, J, K, maps.data(), want_means.data());
  nn::channel_mean_backward(N, cells, C, J, K, grad_means.data(), want_grad_maps.data());
  DeviceArray<float> out_means(want_means.size());
  nn::cuda::channel_mean_forward(N, cells, C, J, K, d_maps.data(), out_means.data(), nullptr);
  nn::cuda::channel_mean_backward(N, cells, C, J, K, d_grad_means.data(), out_grad_maps.data(),
                                  nullptr);

  std::vector<float> want_weights(size_t(N) * J), want_grad_confidences(size_t(N) * J);
  cpu::triangulation_weights(B, V, J, confidences.data(), want_weights.data());
  cpu::triangulation_weights_backward(B, V, J, confidences.data(), grad_weights.data(),
                                      want_grad_confidences.data());
  DeviceArray<float> out_weights(want_weights.size()), out_grad_confidences(want_weights.size());
  nn::cuda::triangulation_weights(B, V, J, d_confidences.data(), out_weights.data(), nullptr);
  nn::cuda::triangulation_weights_backward(B, V, J, d_confidences.data(), d_grad_weights.data(),
                                           out_grad_confidences.data(), nullptr);

  std::vector<float> want_joints(size_t(B) * J * 3), want_grad_points(points.size()),
      want_grad_tri_weights(want_weights.size());
  std::vector<uint8_t> want_ok(size_t(B) * J);
  EXPECT_EQ(cpu::triangulate_joints(B, V, J, projections.data(), points.data(), want_weights.data(),
                                    want_joints.data(), want_ok.data()),
            0);
  cpu::triangulate_joints_backward(B, V, J, projections.data(), points.data(), want_weights.data(),
                                   grad_joints.data(), want_grad_points.data(),
                                   want_grad_tri_weights.data());
  DeviceArray<float> out_joints(want_joints.size()), out_grad_tri_points(points.size()),
      out_grad_tri_weights(want_weights.size());
  DeviceArray<uint8_t> out_ok(want_ok.size());
  nn::cuda::triangulate_joints(B, V, J, d_projections.data(), d_points.data(), out_weights.data(),
                               out_joints.data(), out_ok.data(), nullptr);
  nn::cuda::triangulate_joints_backward(
      B, V, J, d_projections.data(), d_points.data(), out_weights.data(), d_grad_joints.data(),
      out_grad_tri_points.data(), out_grad_tri_weights.data(), nullptr);
  device_synchronize();

  expect_close(out_points.to_host(), want_points, "soft-argmax");
  expect_close(out_grad_maps.to_host(), want_grad_maps, "soft-argmax and channel mean gradients");
  expect_close(out_means.to_host(), want_means, "channel means");
  expect_close(out_weights.to_host(), want_weights, "weights");
  expect_close(out_grad_confidences.to_host(), want_grad_confidences, "confidence gradients");
  expect_close(out_joints.to_host(), want_joints, "joints");
  expect_close(out_grad_tri_points.to_host(), want_grad_points, "point gradients");
  expect_close(out_grad_tri_weights.to_host(), want_grad_tri_weights, "weight gradients");
  EXPECT_EQ(out_ok.to_host(), want_ok);
  // The labels are exact: the joints come back to the data set's own.
  std::vector<float> truth;
  for (const data::TrainingSample& s : samples) {
    truth.insert(truth.end(), s.target.pose.joints_world.begin(), s.target.pose.joints_world.end());
  }
  EXPECT_LE(mvibr::normwise_relative_error(out_joints.to_host(), truth), 1e-5);
}

// The fusion on the maps' layout against the CPU layer on rows, for 2 and 4 views: the fused
// heatmaps, the heatmaps' gradients added into the maps' first J channels (the others untouched)
// and the weights' gradients. Both sum each GEMM in fp32 in its own order (the emulated cuBLAS in
// double): 1e-5 normwise.
TEST_F(GpuPoseStep, FusionMatchesTheCpuLayer) {
  for (const int V : {2, 4}) {
    SCOPED_TRACE(std::to_string(V) + " views");
    const int B = 2, J = 3, C = 5, P = 4 * 3, BJ = B * J;
    nn::ParameterSet parameters;
    nn::ParameterBlock block(parameters, "fusion.", nn::ParameterGroup::kMlp);
    const nn::CrossViewFusion layer(block, V, P);
    nn::Initializer init(7);
    layer.initialize(block.values(), init);
    const auto random = [](size_t count, uint64_t seed) {
      const std::vector<double> v = synthetic::random_values(count, -1, 1, seed);
      return std::vector<float>(v.begin(), v.end());
    };
    const size_t maps_size = size_t(B) * V * P * C, fused_size = size_t(B) * V * P * J;
    const std::vector<float> maps = random(maps_size, 11), grad_fused = random(fused_size, 12),
                             grad_maps_before = random(maps_size, 13);
    // f(m, f, r): the maps' index m, the fused maps' f and the rows' r of each heatmap cell.
    const auto for_each_cell = [&](auto visit) {
      for (int i = 0; i < B; ++i) {
        for (int v = 0; v < V; ++v) {
          for (int p = 0; p < P; ++p) {
            for (int j = 0; j < J; ++j) {
              const size_t cell = (size_t(i) * V + size_t(v)) * P + size_t(p);
              visit(cell * C + size_t(j), cell * J + size_t(j),
                    ((size_t(v) * B + size_t(i)) * J + size_t(j)) * P + size_t(p));
            }
          }
        }
      }
    };
    std::vector<float> rows(size_t(V) * BJ * P), grad_rows_fused(rows.size());
    for_each_cell([&](size_t m, size_t f, size_t r) {
      rows[r] = maps[m];
      grad_rows_fused[r] = grad_fused[f];
    });
    std::vector<float> fused_rows(rows.size()), grad_rows(rows.size());
    std::vector<float> want_grad_weights(block.size(), 0.0f);
    layer.forward(block.values(), V, BJ, P, rows.data(), fused_rows.data());
    layer.backward(block.values(), want_grad_weights.data(), V, BJ, P, rows.data(),
                   grad_rows_fused.data(), grad_rows.data());
    std::vector<float> want_fused(fused_size), want_grad_maps = grad_maps_before;
    for_each_cell([&](size_t m, size_t f, size_t r) {
      want_fused[f] = fused_rows[r];
      want_grad_maps[m] += grad_rows[r];
    });

    const std::vector<float> weights(block.values(), block.values() + block.size());
    DeviceArray<float> d_weights(weights), d_maps(maps), d_grad_fused(grad_fused),
        d_grad_maps(grad_maps_before), d_fused(fused_size), d_grad_weights(block.size());
    d_grad_weights.zero();
    nn::cuda::Context context;
    nn::cuda::cross_view_fusion_forward(context, layer, d_weights.data(), B, C, J, d_maps.data(),
                                        d_fused.data());
    nn::cuda::cross_view_fusion_backward(context, layer, d_weights.data(), d_grad_weights.data(), B,
                                         C, J, d_maps.data(), d_grad_fused.data(),
                                         d_grad_maps.data());
    context.synchronize();
    const double fused_error = mvibr::normwise_relative_error(d_fused.to_host(), want_fused);
    const double maps_error = mvibr::normwise_relative_error(d_grad_maps.to_host(), want_grad_maps);
    const double weights_error =
        mvibr::normwise_relative_error(d_grad_weights.to_host(), want_grad_weights);
    EXPECT_LE(fused_error, 1e-5);
    EXPECT_LE(maps_error, 1e-5);
    EXPECT_LE(weights_error, 1e-5);
    std::printf("  %d views: fused %.1e, heatmap gradients %.1e, weight gradients %.1e\n", V,
                fused_error, maps_error, weights_error);
  }
}

TEST_F(GpuPoseStep, BadShapesAndPrecisionsAreRefused) {
  DeviceArray<float> buffer(64);
  EXPECT_THROW(
      nn::cuda::soft_argmax_forward(1, 2, 2, 3, 4, buffer.data(), {}, buffer.data(), nullptr),
      InvalidArgument);
  EXPECT_THROW(nn::cuda::channel_mean_forward(1, 4, 3, 2, 2, buffer.data(), buffer.data(), nullptr),
               InvalidArgument);
  EXPECT_THROW(nn::cuda::triangulate_joints(1, 0, 1, buffer.data(), buffer.data(), buffer.data(),
                                            buffer.data(), nullptr, nullptr),
               InvalidArgument);
  {
    nn::ParameterSet parameters;
    nn::ParameterBlock block(parameters, "fusion.", nn::ParameterGroup::kMlp);
    const nn::CrossViewFusion layer(block, 2, 4);
    nn::cuda::Context context;
    // More heatmaps than channels, and no instant.
    EXPECT_THROW(nn::cuda::cross_view_fusion_forward(context, layer, buffer.data(), 1, 2, 3,
                                                     buffer.data(), buffer.data()),
                 InvalidArgument);
    EXPECT_THROW(
        nn::cuda::cross_view_fusion_backward(context, layer, buffer.data(), buffer.data(), 0, 3, 3,
                                             buffer.data(), buffer.data(), buffer.data()),
        InvalidArgument);
  }
  TrainConfig c = config(Device::kCuda, true, 2);
  c.precision = Precision::kBf16;
  EXPECT_THROW(PoseModel(c, data::kPoseJoints), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::train
