// The IBRNet training step on a CUDA device (internal to the train library): what IbrnetModel's
// CPU step computes, with every array in device memory. The feature network runs on cuDNN, the
// rendering core on its kernels (ops/render_ops.h, namespace cuda), the aggregation networks on
// cuBLAS and theirs; results differ from the CPU step's only by rounding.
//
// The parameters stay the host ParameterSet's: each step uploads their values, and adds the
// device's gradients into the host gradients as each range becomes final. So the optimiser,
// checkpoints, the MPI all-reduce, gradient accumulation, the NaN policy and every other check
// of the trainer work unchanged, at the price of moving 8 bytes per parameter over the bus per
// step (for the ibrnet preset about 80 MB: a few milliseconds on PCIe 4 or 5).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/geom/camera.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/train/config.h"
#include "mvibr/train/ibrnet_model.h"

namespace mvibr::train {

// The compositing the config asks for (delta, white_bkgd), for both steps.
inline CompositeOptions composite_options(const TrainConfig& c) {
  return {c.delta, c.white_bkgd};
}

// Whether the config's `device` selects the CUDA step: kCuda throws InvalidArgument unless the
// CUDA backend is built and a device is present; kAuto takes the device when there is one.
bool use_cuda_step(Device device);

// The source views of a sample as the host holds them: cameras [V] and images [V,H,W,3] in [0,1].
struct HostSources {
  int n_views = 0, height = 0, width = 0;
  const PinholeCamera<float>* cameras = nullptr;
  const float* images = nullptr;
};

class DeviceStep {
 public:
  virtual ~DeviceStep() = default;

  // Uploads the parameters' values, the images and cameras, and runs the feature network. With
  // `training`, also zeroes the device gradients and the feature maps' gradients.
  virtual void prepare_sources(const nn::ParameterSet& parameters, const HostSources& sources,
                               bool training) = 0;
  // The coarse and fine passes on n_rays rays of `target` (pixels [R,2], target_rgb [R,3], host),
  // forward and backward: as IbrnetModel::accumulate. Adds each phase's time (the device
  // synchronised at every boundary) to `times`.
  virtual RaySums accumulate(const data::View& target, const float* pixels, const float* target_rgb,
                             int n_rays, RandomKey key, uint32_t first_ray, PhaseTimes* times) = 0;
  // As IbrnetModel::end_step: divides the gradients by the denominators and runs the feature
  // network's backward. Each range of `order`, once final, is added into parameters' host
  // gradients (+=) before `ready` is called with it; or, with `keep_on_device`, `ready` is called
  // with the range final in device_gradients() (the device idle), for a reduction there, and
  // gradients_to_host adds them to the host's afterwards.
  virtual void end_step(double coarse_denominator, double fine_denominator,
                        const std::vector<ParameterRange>& order, nn::ParameterSet& parameters,
                        const std::function<void(ParameterRange)>& ready, bool keep_on_device,
                        PhaseTimes* times) = 0;
  // The device gradient buffer, in the ParameterSet's layout.
  virtual float* device_gradients() = 0;
  // parameters' host gradients += the device's.
  virtual void gradients_to_host(nn::ParameterSet& parameters) = 0;
  // The factor the next backward passes start from (the fp16 loss scale; 1 otherwise): the
  // gradients are divided by it again in end_step.
  virtual void set_loss_scale(double scale) = 0;
  // Renders n_rays rays of `target` without gradients into host rgb [R,3] and depth [R] (the
  // fine pass, or the coarse one when there is none).
  virtual void render(const data::View& target, const float* pixels, int n_rays, RandomKey key,
                      uint32_t first_ray, float* rgb, float* depth) = 0;
};

// The CUDA step for these networks (their wiring and parameter offsets; the networks need not
// outlive it). Throws RuntimeFailure in a build without the CUDA backend.
std::unique_ptr<DeviceStep> make_cuda_step(const TrainConfig& config,
                                           const nn::ResUNet& feature_net,
                                           const nn::IbrnetAggregator& net_coarse,
                                           const nn::IbrnetAggregator* net_fine);

}  // namespace mvibr::train
