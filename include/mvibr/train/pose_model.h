// The multi-view pose model (a TrainableModel; model = pose): learnable triangulation's algebraic
// network on mvibr's layers (../shared/POSE.md).
// - Every camera's image of an instant goes through one ResUNet backbone (shared weights); its
//   output's first J channels are heatmaps, the next confidence_channels feed the confidence head.
// - Soft-argmax (heatmap_multiplier) turns each heatmap into a 2D joint; the confidence head
//   (global average pool, Linear, ReLU, Linear, sigmoid) gives each view a confidence per joint,
//   normalised over the views (c / sum c + 1e-5, as the published network does).
// - Confidence-weighted DLT by normal equations (geom/triangulation.h) gives the 3D joints.
// - Loss: the mean L1 distance of the 3D joints (metres, summed over x, y, z) plus w_joints_2d
//   times the mean L1 of the visible 2D joints in image widths.
// - cross_view_fusion: each view's J heatmaps are fused with learned maps of the other views'
//   (nn/cross_view_fusion.h; one weight per ordered camera pair, so the model is built for the
//   data set's rig, PoseRig) before the soft-argmax, and the 3D joints are triangulated from the
//   fused heatmaps' 2D joints. As the published training puts JointsMSE on both the fused and
//   the raw heatmaps, summed with equal weight, the loss here is the sum of the loss above on
//   the fused path and the same loss on the raw path (the raw heatmaps' 2D joints through the
//   same confidences and triangulation): the backbone keeps heatmaps that are good alone, and
//   "without fusion" stays a meaningful score.
// - A micro-batch is pose_batch instants; a rank's step takes accumulation_steps of them, so
//   samples_per_step() is their product. Parameters: "backbone.<ResUNet state_dict name>"
//   (ParameterGroup kFeature, lrate_feature), "confidence.{0,2}.{weight,bias}" (kMlp, lrate_mlp)
//   and, with fusion, "fusion.<pair>.weight" [Hf Wf, Hf Wf] (kFusion, lrate_fusion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/scene.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/soft_argmax.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

// The loss sums of a micro-batch (summed over ranks and micro-steps before the loss is formed).
struct PoseSums {
  double joints_3d_l1 = 0;  // sum over triangulated joints of |X - X*|_1, metres
  double joints_3d = 0;     // joints triangulated (all but degenerate ones)
  double joints_2d_l1 = 0;  // sum over visible joints of |x - x*|_1 / image width
  double joints_2d = 0;     // visible (view, joint) pairs
  double joint_error = 0;   // sum of |X - X*|_2 over triangulated joints (MPJPE's numerator)
  // With cross-view fusion the sums above are the fused path's and these the raw path's (its
  // visible 2D joints are the same ones).
  double raw_joints_3d_l1 = 0, raw_joints_3d = 0, raw_joints_2d_l1 = 0, raw_joint_error = 0;

  LossSums values(bool fusion) const;          // 5 values, 9 with fusion
  static PoseSums from(const LossSums& sums);  // 5 or 9 values
};

// What the model predicts for one instant: the 3D joints [J,3] (world, metres), each view's 2D
// joints [V,J,2] (pixels) and confidences [V,J] (after normalisation over views), and which joints
// triangulated [J]; with fusion these are the fused heatmaps', and the raw_ ones the same of the
// raw heatmaps (empty without fusion).
struct PosePrediction {
  std::vector<double> joints_world, raw_joints_world;
  std::vector<float> joints_image, confidences, raw_joints_image;
  std::vector<uint8_t> triangulated, raw_triangulated;
};

// The camera rig a pose data set fixes: cameras per instant (camera 0 the target, the others in
// order) and their image size. A model with fusion is built for it; without, all zero is fine
// (the sizes come from the first instants).
struct PoseRig {
  int cameras = 0, width = 0, height = 0;
};
PoseRig pose_rig(const data::Scene& scene);  // of its first instant

// The backbone the config asks for: the feature_net preset, one output of J heatmaps followed by
// confidence_channels for the confidence head.
nn::ResUNetOptions pose_backbone_options(const TrainConfig& config, int joints);
// The soft-argmax on its output: a quarter of the image's resolution, cell (x, y) covering the
// 4x4 pixels around (4x + 1.5, 4y + 1.5), and the config's heatmap_multiplier.
nn::SoftArgmaxOptions pose_soft_argmax_options(const TrainConfig& config);

class PoseModel final : public TrainableModel {
 public:
  // Builds the backbone (feature_net preset, coarse only, J + confidence_channels outputs), the
  // confidence head for J joints and, with cross_view_fusion, the fusion for `rig` (which it then
  // needs, and holds every instant to). With device = cuda the network's forward and backward run
  // on the GPU, and its parameters, gradients (NCCL all-reduces them) and Adam's moments live
  // there (train/pose_device.h; fp32, Adam or AdamW: InvalidArgument else).
  PoseModel(const TrainConfig& config, int joints, const PoseRig& rig = {});
  ~PoseModel() override;
  PoseModel(const PoseModel&) = delete;
  PoseModel& operator=(const PoseModel&) = delete;

  const nn::ParameterSet& parameters() const override;
  nn::ParameterSet& parameters() override;
  const nn::Adam& optimizer() const override;
  nn::Adam& optimizer() override;
  void configure_optimizer(const nn::AdamOptions& options) override;
  void initialize(uint64_t seed) override;  // PyTorch's default initialisation of every layer
  uint64_t updates() const override;
  double learning_rate(nn::ParameterGroup group) const override;
  bool on_device() const override;

  size_t samples_per_step() const override;
  size_t loss_sums_size() const override;  // 5, 9 with fusion
  std::vector<ParameterRange> gradient_ready_order() const override;
  void set_loss_scale(double scale) override;  // 1 only: the step is fp32 on either backend
  // A step of one instant (samples_per_step() is ignored).
  void begin_step(const data::TrainingSample& sample) override;
  // `samples` stay the caller's: alive until end_step.
  void begin_step(const std::vector<data::TrainingSample>& samples) override;
  // Micro-batch after micro-batch of pose_batch instants (the step's samples in order): forward
  // and the loss sums; end_step runs every micro-batch's backward with the global sums.
  LossSums accumulate(RandomKey key, int batch) override;
  StepResult end_step(const LossSums& global,
                      const std::function<void(ParameterRange)>& ready) override;
  float* gradients() override;
  double gradient_norm() override;
  void update(double gradient_norm) override;
  const PhaseTimes& phase_times() const override;
  StepWork step_work() const override;  // instants
  // The last step's MPJPE over its instants, in mm (NaN before the first).
  Scalar quality(const StepResult& result) const override;
  // The pose model draws no pixels: InvalidArgument (mvibr eval and render use predict).
  void render(const data::TrainingSample& sample, const std::vector<float>& pixels, RandomKey key,
              std::vector<float>* rgb, std::vector<float>* depth,
              const std::function<void(int, int)>& on_chunk = {},
              RenderedParts* parts = nullptr) override;

  bool cross_view_fusion() const;

  // Bytes the backbone's workspaces hold for the backward (host memory, or device memory with
  // device = cuda): every micro-batch's, or with recompute_backbone one instant's.
  size_t activation_bytes() const;

  // The prediction for each instant, without gradients.
  std::vector<PosePrediction> predict(const std::vector<data::TrainingSample>& samples);
  // begin_step, accumulate and end_step over `samples` as one micro-batch with its own sums: one
  // whole step's loss and gradients (in parameters().grads()).
  StepResult train_step(const std::vector<data::TrainingSample>& samples);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::train
