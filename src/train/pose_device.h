// The pose model's network on a CUDA device, for the model's step (internal to the train library).
// - What runs here, per micro-batch, forward and backward: the backbone, soft-argmax, the channel
//   means, the confidence head, the weights, the cross-view fusion and the triangulation
//   (nn/cuda_pose.h): the network. With fusion, both paths: the fused heatmaps' joints and the
//   raw ones'.
// - What stays on the host: loading the instants, the loss and its gradients with respect to the
//   joints (O(B J) numbers). Images and projections go in; the 2D points, weights, 3D joints and
//   triangulated flags come back; the joints' gradients go in again. The maps and activations
//   stay on the device.
// - The training state lives on the device too (as IBRNet's GPU step's): the parameters, their
//   gradients (which the trainer all-reduces there with NCCL) and Adam's moments; the gradient
//   norm and Adam's update run there. The host's copy is sent (load_state) and fetched
//   (store_state) only when it changes or is read: a checkpoint, an evaluation, a test.
// - Every micro-batch keeps its own activations (a backbone of its own): all of a step's forwards
//   run before its backwards. With recompute_backbone one backbone serves every instant, and the
//   backward runs each instant's forward again before its backward.
// - pose_cuda_network.cpp; without CUDA, make_pose_device_network throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mvibr/nn/cross_view_fusion.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/layers.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"
#include "state_copies.h"

namespace mvibr::train {

// The host networks whose wiring and parameter offsets the device copies.
struct PoseNetworks {
  const nn::ResUNet& backbone;
  const nn::ParameterBlock& head_block;
  const nn::Linear& head_hidden;
  const nn::Linear& head_out;
  const nn::ParameterBlock& fusion_block;
  const nn::CrossViewFusion* fusion;  // null: no fusion
};

// A micro-batch of B instants of V views: images [BV,H,W,3] in [0,1], projections [B,V,3,4].
struct PoseDeviceInputs {
  int instants = 0, views = 0, height = 0, width = 0;
  const float* images = nullptr;
  const float* projections = nullptr;
};

// Host arrays the forward fills: points [BV,J,2] (pixels), weights [B,V,J], joints [B,J,3],
// triangulated [B,J]; with fusion, those of the fused heatmaps, and the raw_ ones the raw
// heatmaps' (unused without).
struct PoseDeviceOutputs {
  float* points = nullptr;
  float* weights = nullptr;
  float* joints = nullptr;
  uint8_t* triangulated = nullptr;
  float* raw_points = nullptr;
  float* raw_joints = nullptr;
  uint8_t* raw_triangulated = nullptr;
};

// The loss's gradients (host) with respect to a path's 3D joints [B,J,3] and, the 2D term's, its
// 2D joints [BV,J,2]: the fused path's, and with fusion the raw path's (null without).
struct PoseDeviceGradients {
  const float* joints = nullptr;
  const float* points = nullptr;
  const float* raw_joints = nullptr;
  const float* raw_points = nullptr;
};

// The training state's half of the interface is DeviceTrainingState's (state_copies.h).
class PoseDeviceNetwork : public DeviceTrainingState {
 public:
  // Micro-batch `batch` forward; its activations stay until its next forward.
  virtual void forward(int batch, const PoseDeviceInputs& in, const PoseDeviceOutputs& out) = 0;
  // Its backward from the loss's gradients: each path's joints' through its triangulation, its
  // points' added to what comes out; parameter gradients accumulate on the device.
  virtual void backward(int batch, const PoseDeviceGradients& grads) = 0;
  // Device bytes the backbones' workspaces hold.
  virtual size_t activation_bytes() const = 0;
};

// Throws RuntimeFailure in a build without CUDA.
std::unique_ptr<PoseDeviceNetwork> make_pose_device_network(const TrainConfig& config,
                                                            const PoseNetworks& networks);

}  // namespace mvibr::train
