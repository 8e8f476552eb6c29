// The pose model's whole training step against PyTorch: PoseModel::train_step (float32, every
// backward hand-written) and test/reference/pose_model_reference.py (float64 autograd, composed
// from the backbone and pose-layer references) on the same weights (loaded from our checkpoint by
// name) and the same instants. Each layer is checked on its own elsewhere (pose_layers_test,
// feature_net_test); this checks their composition: the heatmap and confidence channels, the
// pooling, the weights' normalisation over views, the two loss terms and where their gradients
// meet, and with cross-view fusion the heatmaps' way into and out of the fusion, the two paths'
// terms and the fusion weights' gradients. Bounds as normwise relative errors: the loss and its
// terms within 1e-5, the joints within 1e-5, every parameter's gradient within 1e-4 (the project's
// fp32 bounds) at a multiplier of 10, ten times those at the published 100; with bf16
// convolutions against the reference on bf16 operands, looser (step_bounds says why).
// Also: the data set's own 2D labels triangulate back to its 3D joints, and samples that disagree
// are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/data/pose_scene.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/pose_model.h"
#include "npy.h"
#include "relu_masks.h"
#include "support/bf16_operands.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;

data::Scene small_pose_scene() {
  data::PoseSceneOptions o;
  o.width = 48;
  o.height = 40;
  o.n_cameras = 3;
  o.n_sequences = 2;
  o.n_frames = 2;
  o.n_test_sequences = 1;
  o.samples_per_side = 1;
  o.seed = 4;
  return data::make_pose_scene(o);
}

// Instant k of the scene (its camera-0 view is view k * cameras) as the reader hands it out.
data::TrainingSample instant(const data::Scene& scene, int k) {
  const int cameras = int(scene.neighbours[0].size()) + 1;
  data::TrainingSample s;
  s.target_view = k * cameras;
  s.target = scene.views[size_t(s.target_view)];
  for (int v : scene.neighbours[size_t(s.target_view)]) {
    s.source_views.push_back(v);
    s.sources.push_back(scene.views[size_t(v)]);
  }
  return s;
}

TrainConfig pose_config(bool use_confidences, double multiplier = 10, bool fusion = false) {
  TrainConfig c;
  c.model = ModelKind::kPose;
  c.device = Device::kCpu;
  c.feature_net = nn::ResUNetPreset::kSmall;
  c.confidence_channels = 4;
  c.confidence_hidden = 8;
  c.pose_batch = 2;
  c.w_joints_2d = 0.5;
  c.use_confidences = use_confidences;
  c.heatmap_multiplier = multiplier;
  c.cross_view_fusion = fusion;
  c.fusion_init_scale = 1;  // the published weights: every pair's map non-zero
  return c;
}

std::vector<const data::View*> cameras_of(const std::vector<data::TrainingSample>& samples) {
  std::vector<const data::View*> views;
  for (const data::TrainingSample& s : samples) {
    views.push_back(&s.target);
    for (const data::View& v : s.sources) views.push_back(&v);
  }
  return views;
}

// The case folder pose_model_reference.py reads (see its docstring).
void write_case(const TrainConfig& c, const PoseModel& model,
                const std::vector<data::TrainingSample>& samples, const fs::path& dir) {
  fs::create_directories(dir);
  const nn::Adam adam(model.parameters(), nn::AdamOptions{});
  TrainingState state;
  state.config = c.to_text();
  state.cursors = {data::ReaderCursor{}};
  fs::rename(save_checkpoint((dir / "run").string(), model.parameters(), adam, state, 0),
             dir / "checkpoint.h5");
  fs::remove_all(dir / "run");
  const int joints = data::kPoseJoints;
  const nn::ResUNetOptions backbone = pose_backbone_options(c, joints);
  const size_t B = samples.size(), V = samples[0].sources.size() + 1, J = size_t(joints);
  const nlohmann::json spec = {{"widths", backbone.widths},
                               {"blocks", backbone.blocks},
                               {"joints", joints},
                               {"confidence_channels", c.confidence_channels},
                               {"multiplier", c.heatmap_multiplier},
                               {"stride", 4},
                               {"w_joints_2d", c.w_joints_2d},
                               {"use_confidences", c.use_confidences},
                               {"cross_view_fusion", c.cross_view_fusion},
                               {"instants", B},
                               {"views", V},
                               {"conv_operands", name_of(c.precision)}};
  std::ofstream(dir / "case.json") << spec.dump();
  const data::View& first = samples[0].target;
  const size_t H = size_t(first.camera.height), W = size_t(first.camera.width);
  NpyArray images{{B * V, H, W, 3}, {}}, projections{{B, V, 3, 4}, {}};
  NpyArray joints_3d{{B, J, 3}, {}}, joints_2d{{B * V, J, 2}, {}}, visible{{B * V, J}, {}};
  for (const data::View* view : cameras_of(samples)) {
    images.data.insert(images.data.end(), view->rgb.begin(), view->rgb.end());
    double p[12];
    projection_matrix(view->camera, p);
    projections.data.insert(projections.data.end(), p, p + 12);
    joints_2d.data.insert(joints_2d.data.end(), view->pose.joints_image.begin(),
                          view->pose.joints_image.end());
    visible.data.insert(visible.data.end(), view->pose.visible.begin(), view->pose.visible.end());
  }
  for (const data::TrainingSample& s : samples) {
    joints_3d.data.insert(joints_3d.data.end(), s.target.pose.joints_world.begin(),
                          s.target.pose.joints_world.end());
  }
  test::write_npy(dir / "images.npy", images);
  test::write_npy(dir / "projections.npy", projections);
  test::write_npy(dir / "joints.npy", joints_3d);
  test::write_npy(dir / "joints_2d.npy", joints_2d);
  test::write_npy(dir / "visible.npy", visible);

  // The fp32 side's ReLU masks, from a copy of the backbone on the same images (model_parity_test
  // says why the reference follows them).
  nn::ParameterSet copy;
  const nn::ResUNet net(backbone, &copy, "backbone.");
  for (const nn::ParameterInfo& info : copy.infos()) {
    const float* values = model.parameters().value(model.parameters().find(info.name));
    std::copy(values, values + info.size, copy.values().begin() + long(info.offset));
  }
  std::vector<float> pixels;
  for (double value : images.data) pixels.push_back(float(value) / 255.0f);
  const auto [hf, wf] = nn::ResUNet::output_size(int(H), int(W));
  std::vector<float> out(B * V * size_t(hf) * size_t(wf) * size_t(backbone.out_channels()));
  nn::ResUNet::Workspace workspace;
  net.forward(int(B * V), int(H), int(W), pixels.data(), &workspace, out.data(), nullptr);
  for (const auto& [unit, mask] : test::relu_masks(net, workspace)) {
    test::write_npy(dir / ("mask_" + unit + ".npy"), mask);
  }
}

double max_abs(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

// max|ours - ref| / scale; scale 0: max|ref|.
double normwise(const std::vector<float>& ours, const std::vector<double>& ref, double scale = 0) {
  double difference = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ours[i])) return INFINITY;
    difference = std::max(difference, std::abs(double(ours[i]) - ref[i]));
  }
  if (scale == 0) scale = max_abs(ref);
  return scale > 0 ? difference / scale : difference;
}

// Normwise relative bounds on one step's loss (and its terms), joints and gradients.
struct StepBounds {
  double loss = 1e-5, joints = 1e-5, gradients = 1e-4;
};

// The bounds of a step at `multiplier` in `precision`:
// - fp32: the softmax multiplies the heatmaps' rounding by the multiplier, so the joints and
//   gradients get 10x at learnable triangulation's 100;
// - bf16 convolutions, against the reference on bf16 operands too (multiplier 10): a value within
//   fp32 rounding of a bf16 tie rounds one way on each side, and on these small maps the instance
//   norms amplify such flips. The reference alone, its conv inputs moved by relative noise of 1e-6
//   before rounding, moves its loss by up to 4e-4, joints 9e-3 and gradients 0.27 (0.7 without
//   rounding at all); ours are within 6e-4, 7e-3 and 2e-2, and the bounds are 2-5x those.
StepBounds step_bounds(double multiplier, Precision precision) {
  if (precision == Precision::kBf16) return {2e-3, 2e-2, 1e-1};
  const double factor = multiplier > 10 ? 10 : 1;
  return {1e-5, 1e-5 * factor, 1e-4 * factor};
}

// One step on both sides.
void check_step(bool use_confidences, double multiplier, const std::string& name,
                bool fusion = false, nn::ConvAlgorithm conv_algorithm = nn::ConvAlgorithm::kDirect,
                Precision precision = Precision::kFp32) {
  const StepBounds bound = step_bounds(multiplier, precision);
  const data::Scene scene = small_pose_scene();
  const std::vector<data::TrainingSample> samples = {instant(scene, 0), instant(scene, 3)};
  TrainConfig config = pose_config(use_confidences, multiplier, fusion);
  config.conv_algorithm = conv_algorithm;
  config.precision = precision;
  PoseModel model(config, data::kPoseJoints, pose_rig(scene));
  model.initialize(5);
  const fs::path root =
      fs::temp_directory_path() / ("mvibr-pose-parity-" + std::to_string(::getpid()));
  const fs::path dir = root / name / "step";
  write_case(config, model, samples, dir);
  const StepResult ours = model.train_step(samples);
  const std::vector<PosePrediction> predicted = model.predict(samples);

  const char* source = std::getenv("MVIBR_SOURCE_DIR");
  const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                             "/test/reference/pose_model_reference.py";
  const std::string command = "/usr/bin/python3 " + script + " " + dir.parent_path().string();
  ASSERT_EQ(std::system(command.c_str()), 0) << "the PyTorch reference failed";

  const NpyArray ref_loss = test::read_npy(dir / "ref_loss.npy");
  const auto relative = [](double a, double b) { return std::abs(a - b) / std::abs(b); };
  EXPECT_LE(relative(ours.loss, ref_loss.data[0]), bound.loss)
      << ours.loss << " vs " << ref_loss.data[0];
  EXPECT_LE(relative(ours.term("joints_3d"), ref_loss.data[1]), bound.loss);
  EXPECT_LE(relative(ours.term("joints_2d"), ref_loss.data[2]), bound.loss);
  ASSERT_EQ(ref_loss.data.size(), fusion ? 5u : 3u);
  if (fusion) {
    EXPECT_LE(relative(ours.term("raw_joints_3d"), ref_loss.data[3]), bound.loss);
    EXPECT_LE(relative(ours.term("raw_joints_2d"), ref_loss.data[4]), bound.loss);
  }
  std::vector<float> joints;
  for (const PosePrediction& p : predicted) {
    joints.insert(joints.end(), p.joints_world.begin(), p.joints_world.end());
    EXPECT_EQ(std::count(p.triangulated.begin(), p.triangulated.end(), 1), data::kPoseJoints);
  }
  const double joint_error = normwise(joints, test::read_npy(dir / "ref_joints.npy").data);
  EXPECT_LE(joint_error, bound.joints);

  const nn::ParameterSet& params = model.parameters();
  double worst = 0;
  std::string worst_name;
  for (const nn::ParameterInfo& info : params.infos()) {
    const NpyArray ref = test::read_npy(dir / ("ref_grad." + info.name + ".npy"));
    ASSERT_EQ(ref.data.size(), info.size) << info.name;
    const std::vector<float> grad(params.grads().begin() + long(info.offset),
                                  params.grads().begin() + long(info.offset + info.size));
    const double largest = max_abs(ref.data);
    // The decoder's conv biases feed an instance norm, which cancels them, and without
    // confidences the head is unused: ours is exactly zero, the reference's zero or rounding.
    const bool cancelled = info.name.find("conv.bias") != std::string::npos &&
                           info.name.find("out_conv") == std::string::npos;
    const bool unused = !use_confidences && info.name.rfind("confidence.", 0) == 0;
    if (cancelled || unused) {
      EXPECT_EQ(*std::max_element(grad.begin(), grad.end()), 0.0f) << info.name;
      EXPECT_EQ(*std::min_element(grad.begin(), grad.end()), 0.0f) << info.name;
      EXPECT_LE(largest, unused ? 0.0 : 1e-10) << info.name;
      continue;
    }
    // Biases whose gradients cancel: a heatmap channel's bias shifts all its logits alike, which
    // the softmax ignores (zero but for rounding); the confidences are normalised over views, so
    // a shift common to the views moves the weights only through their spread, small while the
    // confidences are alike (near 0.5 at initialisation). Each is a sum of terms of its weight
    // gradient's size that nearly cancel, so it is measured on that scale.
    double error = normwise(grad, ref.data);
    const size_t bias = info.name.rfind(".bias");
    if (bias != std::string::npos &&
        (info.name == "backbone.out_conv.bias" || info.name.rfind("confidence.", 0) == 0)) {
      const std::string weight = info.name.substr(0, bias) + ".weight";
      const double scale =
          std::max(largest, max_abs(test::read_npy(dir / ("ref_grad." + weight + ".npy")).data));
      error = normwise(grad, ref.data, scale);
    }
    EXPECT_LE(error, bound.gradients) << info.name;
    if (std::getenv("MVIBR_VERBOSE")) std::printf("    %-45s %.2e\n", info.name.c_str(), error);
    EXPECT_GT(largest, 0) << info.name << ": a parameter the step should train got no gradient";
    if (error >= worst) {
      worst = error;
      worst_name = info.name;
    }
  }
  if (precision == Precision::kBf16) {
    EXPECT_GT(worst, StepBounds{}.gradients) << "within fp32's bounds: were the operands rounded?";
  }
  std::printf("  %s: loss %.1e, joints %.1e, worst gradient %.1e (%s)\n", name.c_str(),
              relative(ours.loss, ref_loss.data[0]), joint_error, worst, worst_name.c_str());
  if (!::testing::Test::HasFailure()) {
    fs::remove_all(dir.parent_path());
    std::error_code ignored;
    fs::remove(root, ignored);
  }
}

TEST(PoseModel, StepWithConfidencesMatchesPyTorch) {
  check_step(true, 10, "confidences");
}

TEST(PoseModel, StepWithEqualWeightsMatchesPyTorch) {
  check_step(false, 10, "equal_weights");
}

// As configs/pose_synthetic.txt runs it: the published multiplier and Winograd convolutions.
TEST(PoseModel, StepAtThePublishedMultiplierWithWinogradMatchesPyTorch) {
  check_step(true, 100, "multiplier_100_winograd", false, nn::ConvAlgorithm::kWinograd);
}

// precision = bf16 on the CPU: the backbone's convolutions above 1x1 on bf16 operands.
TEST(PoseModel, StepWithBf16ConvolutionsMatchesPyTorch) {
  if (mvibr::testing::bf16_convolutions_refused_here()) return;
  check_step(true, 10, "bf16", false, nn::ConvAlgorithm::kWinograd, Precision::kBf16);
}

// With fusion: the fused path's joints and both paths' terms, and every gradient, the fusion
// weights' among them.
TEST(PoseModel, StepWithCrossViewFusionMatchesPyTorch) {
  check_step(true, 10, "fusion", true);
}

TEST(PoseModel, TheDataSetsOwnLabelsTriangulateBackToItsJoints) {
  const data::Scene scene = small_pose_scene();
  const int cameras = int(scene.neighbours[0].size()) + 1, J = data::kPoseJoints;
  const int instants = int(scene.views.size()) / cameras;
  std::vector<float> projections, points, weights(size_t(instants * cameras * J), 1.0f), truth;
  for (const data::View& v : scene.views) {
    float p[12];
    projection_matrix(camera_cast<float>(v.camera), p);
    projections.insert(projections.end(), p, p + 12);
    points.insert(points.end(), v.pose.joints_image.begin(), v.pose.joints_image.end());
    if (v.target) truth.insert(truth.end(), v.pose.joints_world.begin(), v.pose.joints_world.end());
  }
  std::vector<float> joints(truth.size());
  std::vector<uint8_t> ok(size_t(instants * J));
  EXPECT_EQ(cpu::triangulate_joints(instants, cameras, J, projections.data(), points.data(),
                                    weights.data(), joints.data(), ok.data()),
            0);
  double worst = 0;
  for (size_t i = 0; i < truth.size(); ++i)
    worst = std::max(worst, double(std::abs(joints[i] - truth[i])));
  // The labels are float pixels (rounding ~2e-6 px at 48 px), the cameras ~4.5 m away.
  EXPECT_LE(worst, 1e-4) << "metres";
  std::printf("  worst joint of %zu recovered from the labels: %.1e m\n", truth.size() / 3, worst);
}

TEST(PoseModel, InstantsThatDisagreeAreClearErrors) {
  const data::Scene scene = small_pose_scene();
  const TrainConfig config = pose_config(true);
  PoseModel model(config, data::kPoseJoints);
  model.initialize(1);
  std::vector<data::TrainingSample> samples = {instant(scene, 0), instant(scene, 1)};
  samples[1].sources.pop_back();
  const auto message = [&](const std::vector<data::TrainingSample>& s) -> std::string {
    try {
      model.train_step(s);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(samples).find("has 2 cameras, synthetic_pose/s00/f000/c0 has 3"),
            std::string::npos)
      << message(samples);
  samples = {instant(scene, 0)};
  samples[0].sources[1].pose.joints_world.resize(3 * 16);
  EXPECT_NE(message(samples).find("has 16 labelled joints, the model 17"), std::string::npos)
      << message(samples);
  TrainConfig cuda = config;
  cuda.device = Device::kCuda;
  EXPECT_THROW(PoseModel(cuda, data::kPoseJoints), InvalidArgument);
  // Fusion is built for a rig: it needs one, and holds every instant to it.
  const TrainConfig fusion = pose_config(true, 10, true);
  EXPECT_THROW(PoseModel(fusion, data::kPoseJoints), InvalidArgument);
  PoseModel fused(fusion, data::kPoseJoints, pose_rig(scene));
  fused.initialize(1);
  samples = {instant(scene, 0)};
  samples[0].sources.pop_back();
  try {
    fused.train_step(samples);
    ADD_FAILURE() << "an instant of 2 cameras went through a fusion for 3";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("has 2 cameras, the fusion's rig 3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mvibr::train
