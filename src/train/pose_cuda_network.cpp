// The pose model's network on a CUDA device (see pose_device.h): the CPU model's forward and
// backward of a micro-batch with each layer replaced by its device counterpart, on one stream,
// buffers kept from step to step. Compiled only in a build with the CUDA backend;
// cuda_unavailable.cpp stands in without.
#include <memory>
#include <vector>

#include "device_parameters.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_feature_net.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/cuda_pose.h"
#include "mvibr/train/pose_model.h"
#include "pose_device.h"

namespace mvibr::train {
namespace {

// One micro-batch's inputs, activations and gradients.
struct DeviceBatch {
  std::unique_ptr<nn::cuda::ResUNet> backbone;
  int instants = 0, views = 0, height = 0, width = 0, map_height = 0, map_width = 0;
  DeviceArray<float> images, projections, maps, points, pooled, hidden, confidences, weights,
      joints;
  DeviceArray<uint8_t> triangulated;
  DeviceArray<float> grad_joints, grad_points, grad_points_2d, grad_weights, grad_logits,
      grad_hidden, grad_pooled, grad_maps;
  // With fusion: the fused heatmaps [BV,Hf,Wf,J] (points, joints and triangulated are theirs),
  // the raw path's and their gradients.
  DeviceArray<float> fused, raw_points, raw_joints, grad_fused, grad_raw_joints, grad_raw_points,
      grad_raw_points_2d, grad_raw_weights;
  DeviceArray<uint8_t> raw_triangulated;
  size_t maps_views() const { return size_t(instants) * size_t(views); }
};

class CudaPoseNetwork final : public OnDeviceTrainingState<PoseDeviceNetwork> {
 public:
  CudaPoseNetwork(const TrainConfig& config, const PoseNetworks& n)
      : OnDeviceTrainingState(config, "the pose model"),
        networks_(n),
        joints_(n.head_out.out()),
        extra_(config.confidence_channels),
        hidden_(config.confidence_hidden),
        use_confidences_(config.use_confidences),
        recompute_(config.recompute_backbone),
        soft_argmax_(pose_soft_argmax_options(config)) {
    if (config.precision != Precision::kFp32) {
      throw InvalidArgument(
          "config key 'precision': the pose model's GPU step is fp32 only (set precision = fp32)");
    }
  }

  void forward(int batch, const PoseDeviceInputs& in, const PoseDeviceOutputs& out) override {
    DeviceBatch& b = batch_at(batch);
    b.instants = in.instants;
    b.views = in.views;
    std::tie(b.map_height, b.map_width) = nn::ResUNet::output_size(in.height, in.width);
    const size_t BV = b.maps_views(), J = size_t(joints_), K = size_t(extra_);
    const size_t C = J + K, cells = size_t(b.map_height) * size_t(b.map_width);
    const StreamHandle stream = context_.stream();
    const float* images = b.images.upload(in.images, BV * size_t(in.height) * size_t(in.width) * 3);
    const float* projections =
        b.projections.upload(in.projections, size_t(in.instants) * size_t(in.views) * 12);
    float* maps = b.maps.reserve(BV * cells * C);
    b.height = in.height;
    b.width = in.width;
    if (recompute_) {
      for (int i = 0; i < b.instants; ++i) backbone_instant(b, i);
    } else {
      b.backbone->forward(context_, int(BV), in.height, in.width, images, parameters_.values(),
                          maps, nullptr);
    }
    float* points = b.points.reserve(BV * J * 2);
    float* raw_points = networks_.fusion ? b.raw_points.reserve(BV * J * 2) : points;
    nn::cuda::soft_argmax_forward(int(BV), b.map_height, b.map_width, int(C), int(J), maps,
                                  soft_argmax_, raw_points, stream);
    if (networks_.fusion) {
      float* fused = b.fused.reserve(BV * cells * J);
      nn::cuda::cross_view_fusion_forward(context_, *networks_.fusion, fusion_values(), b.instants,
                                          int(C), joints_, maps, fused);
      nn::cuda::soft_argmax_forward(int(BV), b.map_height, b.map_width, joints_, joints_, fused,
                                    soft_argmax_, points, stream);
    }
    float* weights = b.weights.reserve(BV * J);
    if (use_confidences_) {
      float* pooled = b.pooled.reserve(BV * K);
      nn::cuda::channel_mean_forward(int(BV), int(cells), int(C), int(J), int(K), maps, pooled,
                                     stream);
      float* hidden = b.hidden.reserve(BV * size_t(hidden_));
      nn::cuda::linear_forward(
          context_, {BV, extra_, hidden_}, pooled, head(networks_.head_hidden.weight_offset()),
          head(networks_.head_hidden.bias_offset()), nn::Activation::kRelu, hidden);
      float* confidences = b.confidences.reserve(BV * J);
      nn::cuda::linear_forward(
          context_, {BV, hidden_, joints_}, hidden, head(networks_.head_out.weight_offset()),
          head(networks_.head_out.bias_offset()), nn::Activation::kNone, confidences);
      nn::cuda::sigmoid_forward(BV * J, confidences, stream);
      nn::cuda::triangulation_weights(b.instants, b.views, joints_, confidences, weights, stream);
    } else {
      const std::vector<float> ones(BV * J, 1.0f);
      b.weights.upload(ones.data(), ones.size());
    }
    float* joints = b.joints.reserve(size_t(b.instants) * J * 3);
    uint8_t* triangulated = b.triangulated.reserve(size_t(b.instants) * J);
    nn::cuda::triangulate_joints(b.instants, b.views, joints_, projections, points, weights, joints,
                                 triangulated, stream);
    if (networks_.fusion) {
      nn::cuda::triangulate_joints(b.instants, b.views, joints_, projections, raw_points, weights,
                                   b.raw_joints.reserve(size_t(b.instants) * J * 3),
                                   b.raw_triangulated.reserve(size_t(b.instants) * J), stream);
    }
    context_.synchronize();
    copy_device_to_host(out.points, points, BV * J * 2 * sizeof(float));
    copy_device_to_host(out.weights, weights, BV * J * sizeof(float));
    copy_device_to_host(out.joints, joints, size_t(b.instants) * J * 3 * sizeof(float));
    copy_device_to_host(out.triangulated, triangulated, size_t(b.instants) * J);
    if (networks_.fusion) {
      copy_device_to_host(out.raw_points, raw_points, BV * J * 2 * sizeof(float));
      copy_device_to_host(out.raw_joints, b.raw_joints.data(),
                          size_t(b.instants) * J * 3 * sizeof(float));
      copy_device_to_host(out.raw_triangulated, b.raw_triangulated.data(), size_t(b.instants) * J);
    }
  }

  void backward(int batch, const PoseDeviceGradients& grads) override {
    DeviceBatch& b = batch_at(batch);
    const size_t BV = b.maps_views(), J = size_t(joints_), K = size_t(extra_);
    const size_t C = J + K, cells = size_t(b.map_height) * size_t(b.map_width);
    const StreamHandle stream = context_.stream();
    float* grad_points = b.grad_points.reserve(BV * J * 2);
    float* grad_weights = b.grad_weights.reserve(BV * J);
    path_backward(b, b.points.data(),
                  b.grad_joints.upload(grads.joints, size_t(b.instants) * J * 3),
                  b.grad_points_2d.upload(grads.points, BV * J * 2), grad_points, grad_weights);
    float* grad_maps = b.grad_maps.reserve(BV * cells * C);
    device_memset_zero(grad_maps, BV * cells * C * sizeof(float));
    if (networks_.fusion) {
      // The raw path as the CPU's: its weights' gradients added to the fused path's, its points'
      // back into the maps; then the fused path's points' through the fusion.
      float* grad_raw_points = b.grad_raw_points.reserve(BV * J * 2);
      float* grad_raw_weights = b.grad_raw_weights.reserve(BV * J);
      path_backward(b, b.raw_points.data(),
                    b.grad_raw_joints.upload(grads.raw_joints, size_t(b.instants) * J * 3),
                    b.grad_raw_points_2d.upload(grads.raw_points, BV * J * 2), grad_raw_points,
                    grad_raw_weights);
      nn::cuda::add_into(BV * J, grad_raw_weights, grad_weights, stream);
      nn::cuda::soft_argmax_backward(int(BV), b.map_height, b.map_width, int(C), int(J),
                                     b.maps.data(), soft_argmax_, grad_raw_points, grad_maps,
                                     stream);
      float* grad_fused = b.grad_fused.reserve(BV * cells * J);
      nn::cuda::soft_argmax_backward(int(BV), b.map_height, b.map_width, joints_, joints_,
                                     b.fused.data(), soft_argmax_, grad_points, grad_fused, stream);
      nn::cuda::cross_view_fusion_backward(context_, *networks_.fusion, fusion_values(),
                                           fusion_grads(), b.instants, int(C), joints_,
                                           b.maps.data(), grad_fused, grad_maps);
    } else {
      nn::cuda::soft_argmax_backward(int(BV), b.map_height, b.map_width, int(C), int(J),
                                     b.maps.data(), soft_argmax_, grad_points, grad_maps, stream);
    }
    if (use_confidences_) {
      float* grad_logits = b.grad_logits.reserve(BV * J);
      nn::cuda::triangulation_weights_backward(b.instants, b.views, joints_, b.confidences.data(),
                                               grad_weights, grad_logits, stream);
      nn::cuda::sigmoid_backward(BV * J, b.confidences.data(), grad_logits, stream);
      float* grad_hidden = b.grad_hidden.reserve(BV * size_t(hidden_));
      nn::cuda::linear_backward(context_, {BV, hidden_, joints_}, nn::Activation::kNone, nullptr,
                                grad_logits, b.hidden.data(),
                                head(networks_.head_out.weight_offset()), grad_hidden, false,
                                head_grad(networks_.head_out.weight_offset()),
                                head_grad(networks_.head_out.bias_offset()));
      float* grad_pooled = b.grad_pooled.reserve(BV * K);
      nn::cuda::linear_backward(context_, {BV, extra_, hidden_}, nn::Activation::kRelu,
                                b.hidden.data(), grad_hidden, b.pooled.data(),
                                head(networks_.head_hidden.weight_offset()), grad_pooled, false,
                                head_grad(networks_.head_hidden.weight_offset()),
                                head_grad(networks_.head_hidden.bias_offset()));
      nn::cuda::channel_mean_backward(int(BV), int(cells), int(C), int(J), int(K), grad_pooled,
                                      grad_maps, stream);
    }
    if (recompute_) {
      // Each instant's activations again (the same maps, rewritten), then its backward.
      const size_t instant_maps = size_t(b.views) * cells * C;
      for (int i = 0; i < b.instants; ++i) {
        backbone_instant(b, i);
        recompute_backbone_->backward(context_, parameters_.values(), parameters_.grads(),
                                      grad_maps + size_t(i) * instant_maps, nullptr);
      }
    } else {
      b.backbone->backward(context_, parameters_.values(), parameters_.grads(), grad_maps, nullptr);
    }
  }

  size_t activation_bytes() const override {
    size_t bytes = recompute_backbone_ ? recompute_backbone_->workspace_bytes() : 0;
    for (const DeviceBatch& b : batches_) bytes += b.backbone ? b.backbone->workspace_bytes() : 0;
    return bytes;
  }

 private:
  DeviceBatch& batch_at(int batch) {
    if (batch < 0) throw InvalidArgument("the pose model on the device: a negative micro-batch");
    if (recompute_ && !recompute_backbone_) {
      recompute_backbone_ = std::make_unique<nn::cuda::ResUNet>(networks_.backbone);
    }
    while (batches_.size() <= size_t(batch)) {
      batches_.emplace_back();
      if (!recompute_) {
        batches_.back().backbone = std::make_unique<nn::cuda::ResUNet>(networks_.backbone);
      }
    }
    return batches_[size_t(batch)];
  }

  // The shared backbone over instant i's views of `b` (into its maps).
  void backbone_instant(DeviceBatch& b, int i) {
    const size_t V = size_t(b.views), image = size_t(b.height) * size_t(b.width) * 3;
    const size_t map = size_t(b.map_height) * size_t(b.map_width) * size_t(joints_ + extra_);
    recompute_backbone_->forward(context_, b.views, b.height, b.width,
                                 b.images.data() + size_t(i) * V * image, parameters_.values(),
                                 b.maps.data() + size_t(i) * V * map, nullptr);
  }
  // One path's triangulation backward from its joints' gradients, plus its 2D term's: its points'
  // and the weights' gradients (overwritten).
  void path_backward(const DeviceBatch& b, const float* points, const float* grad_joints,
                     const float* grad_points_2d, float* grad_points, float* grad_weights) {
    nn::cuda::triangulate_joints_backward(b.instants, b.views, joints_, b.projections.data(),
                                          points, b.weights.data(), grad_joints, grad_points,
                                          grad_weights, context_.stream());
    nn::cuda::add_into(b.maps_views() * size_t(joints_) * 2, grad_points_2d, grad_points,
                       context_.stream());
  }
  // The fusion's block of parameters and of gradients.
  const float* fusion_values() const {
    return parameters_.values() + networks_.fusion_block.offset();
  }
  float* fusion_grads() { return parameters_.grads() + networks_.fusion_block.offset(); }
  // The head's parameters and gradients at an offset within its block.
  const float* head(size_t offset) const {
    return parameters_.values() + networks_.head_block.offset() + offset;
  }
  float* head_grad(size_t offset) {
    return parameters_.grads() + networks_.head_block.offset() + offset;
  }

  PoseNetworks networks_;
  int joints_, extra_, hidden_;
  bool use_confidences_, recompute_;
  std::unique_ptr<nn::cuda::ResUNet> recompute_backbone_;  // recompute_: every instant's
  nn::SoftArgmaxOptions soft_argmax_;
  std::vector<DeviceBatch> batches_;
};

}  // namespace

std::unique_ptr<PoseDeviceNetwork> make_pose_device_network(const TrainConfig& config,
                                                            const PoseNetworks& networks) {
  return std::make_unique<CudaPoseNetwork>(config, networks);
}

}  // namespace mvibr::train
