// DynIBaR's networks on a CUDA device, for the model's step (internal to the train library).
// - What runs here: the two feature networks, each branch's gather and its network (static,
//   dynamic at the target's time, dynamic at the anchor's), and the motion MLP, forward and
//   backward, wherever DynibarModel would call the CPU ones: nearly all of a step's FLOPs.
// - What stays on the host: ray sampling, the trajectories and their basis, the renders and every
//   loss, as on the CPU. Between the two go per-sample arrays (where each view reads a sample, the
//   networks' outputs and their gradients, O(R S V)); the activations, O(R S V width), stay on
//   the device.
// - The training state lives on the device (as IBRNet's GPU step's): the parameters, their
//   gradients (which the trainer all-reduces there with NCCL) and Adam's moments; the norm and
//   Adam's update run there. The host's copy is sent (load_state) and fetched (store_state) only
//   when it changes or is read. The trajectory basis's gradient, which the host computes, is added
//   in (add_host_gradients), and its values come back after each update (read_values).
// - A micro-batch's branches and motion keep their activations apart (indexed by `batch`), since
//   every micro-batch's forward runs before any backward.
// - GEMMs in config.precision (bf16 or fp16 inputs, fp32 sums); the host's arrays stay fp32.
// - dynibar_cuda_networks.cpp; without CUDA, make_dynibar_device_networks throws.
#pragma once

#include <memory>

#include "mvibr/geom/camera.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/dynibar_motion.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/motion_mlp.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"
#include "state_copies.h"

namespace mvibr::train {

// Whose images and feature maps: the dynamic feature network's (the dynamic then the anchor set)
// or the static one's.
enum class DynibarSet { kDynamic, kStatic };
// The branches of a micro-batch.
enum class DynibarBranch { kStatic, kDynamic, kAnchor };
constexpr int kDynibarBranches = 3;
// The motion MLP's runs in a micro-batch: the target's samples, and the anchor's.
enum class DynibarMotionRun { kReference, kAnchor };

// A branch's inputs, host arrays: `moved` [R,S,V,3] where view v reads each sample of `points`
// [R,S,3]; the set's cameras [V] and its first view in its DynibarSet's images and maps; the
// network's inputs other than the gathered ones (xyz, and src_rays and target_rays or time and
// view_dir), as the variant reads them.
struct DynibarBranchInputs {
  int n_rays = 0, n_samples = 0, n_views = 0;
  const float* points = nullptr;
  const float* moved = nullptr;
  const PinholeCamera<float>* cameras = nullptr;
  int first_view = 0;
  Vec3<float> target_center;
  nn::AggregatorInputs<float> network;
};

// The networks whose wiring and parameter offsets the device copies.
struct DynibarNetworks {
  const nn::ResUNet& feature_net;     // dynamic sets
  const nn::ResUNet& feature_net_st;  // static set
  const nn::IbrnetAggregator& net_st;
  const nn::IbrnetAggregator& net_dy;
  const nn::MotionMlp& motion_mlp;
};

// The training state's half of the interface is DeviceTrainingState's (state_copies.h).
class DynibarDeviceNetworks : public DeviceTrainingState {
 public:
  // The set's images [V,H,W,3] to the device, without feature maps: gathers read colour only
  // (the dynamic sets in DynIBaR's bootstrap) until `features`.
  virtual void set_images(DynibarSet set, int n_views, int height, int width,
                          const float* images) = 0;
  // The set's images through its feature network; the maps stay until the next set_images.
  // `training`: keeps the workspace and zeroes the maps' gradients.
  virtual void features(DynibarSet set, bool training) = 0;
  // Both feature networks' backward from the maps' gradients the branches accumulated.
  virtual void features_backward() = 0;

  // A branch of micro-batch `batch`: the gather, then (static) the colour mask, then the network.
  // Writes rgb [R,S,3], sigma [R,S] and the gather's mask [R,S,V] to the host; with rgb and sigma
  // null the network does not run (the gather's mask alone). Without `training` the network
  // keeps nothing for a backward.
  virtual void branch_forward(int batch, DynibarBranch branch, const DynibarBranchInputs& in,
                              bool training, float* rgb, float* sigma, float* mask) = 0;
  // Its backward from grad_rgb [R,S,3] and grad_sigma [R,S] (host): parameter and map gradients
  // accumulate on the device; grad_moved [R,S,V,3] and (the dynamic network) grad_xyz [R,S,3] are
  // written to the host where not null.
  virtual void branch_backward(int batch, DynibarBranch branch, const float* grad_rgb,
                               const float* grad_sigma, float* grad_moved, float* grad_xyz) = 0;

  // The motion MLP's calls for one run of a micro-batch (host arrays in and out).
  virtual nn::MotionMlpCalls<float> motion_mlp(int batch, DynibarMotionRun run) = 0;
};

// Throws RuntimeFailure in a build without CUDA.
std::unique_ptr<DynibarDeviceNetworks> make_dynibar_device_networks(
    const TrainConfig& config, const DynibarNetworks& networks);

}  // namespace mvibr::train
