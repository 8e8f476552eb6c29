// The IBRNet step on one backend (internal to the train library): the CPU's
// (ibrnet_cpu_backend.cpp) and the CUDA one (ibrnet_cuda_backend.cpp) are siblings behind this
// interface.
// - Each holds the parameters, gradients and Adam's moments where it computes: the CPU's are the
//   host ParameterSet and nn::Adam themselves; the CUDA one's stay in device memory, copied to
//   and from the host only by load_state and store_state.
// - IbrnetModel (ibrnet_model.cpp) turns samples into HostSources and rays, and keeps the host
//   copy current; the math lives here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/geom/camera.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/optimizer.h"
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

// The source views of a sample as the host holds them: cameras [V] and images [V,H,W,3] in [0,1]
// (the model keeps them until the next sample).
struct HostSources {
  int n_views = 0, height = 0, width = 0;
  const PinholeCamera<float>* cameras = nullptr;
  const float* images = nullptr;
};

// The networks a backend runs (their wiring and parameter offsets; they outlive the backend).
struct IbrnetNetworks {
  nn::ResUNet& feature_net;
  nn::IbrnetAggregator& net_coarse;
  nn::IbrnetAggregator* net_fine;  // null when coarse_only
};

class IbrnetBackend {
 public:
  virtual ~IbrnetBackend() = default;

  // host -> backend: the parameters' values and Adam's moments.
  virtual void load_state(const nn::ParameterSet& parameters, const nn::Adam& adam) = 0;
  // backend -> host: values, gradients and Adam's moments (its step count is the host's).
  virtual void store_state(nn::ParameterSet* parameters, nn::Adam* adam) = 0;

  // The feature network on the sources; with `training`, gradients and the feature maps'
  // gradients zeroed.
  virtual void prepare_sources(const HostSources& sources, bool training) = 0;
  // The coarse and fine passes on n_rays rays of `target` (pixels [R,2], target_rgb [R,3], host),
  // forward and backward: gradients of the summed squared errors accumulate. Adds each phase's
  // time to `times`.
  virtual RaySums accumulate(const data::View& target, const float* pixels, const float* target_rgb,
                             int n_rays, RandomKey key, uint32_t first_ray, PhaseTimes* times) = 0;
  // Divides the gradients by the global denominators, runs the feature network's backward, and
  // calls `ready` with each range of `order` once it is final in gradients() (the device idle).
  virtual void end_step(double coarse_denominator, double fine_denominator,
                        const std::vector<ParameterRange>& order,
                        const std::function<void(ParameterRange)>& ready, PhaseTimes* times) = 0;
  virtual float* gradients() = 0;  // the ParameterSet's layout, where the backend computes
  virtual double gradient_norm() = 0;
  // Clipping (adam's max_grad_norm, from `gradient_norm`) and Adam's update of the values; the
  // step count advances in `adam`.
  virtual void update(nn::Adam& adam, double gradient_norm) = 0;
  // The factor the next backward passes start from (the fp16 loss scale; 1 otherwise): the
  // gradients are divided by it again in end_step.
  virtual void set_loss_scale(double scale) = 0;
  // Renders n_rays rays of `target` without gradients into host rgb [R,3] and depth [R] (the
  // fine pass, or the coarse one when there is none).
  virtual void render(const data::View& target, const float* pixels, int n_rays, RandomKey key,
                      uint32_t first_ray, float* rgb, float* depth) = 0;
};

// The CPU step, on `parameters` (the model's host set) itself.
std::unique_ptr<IbrnetBackend> make_cpu_backend(const TrainConfig& config,
                                                nn::ParameterSet& parameters,
                                                const IbrnetNetworks& networks);
// The CUDA step; RuntimeFailure in a build without the CUDA backend or without a device.
std::unique_ptr<IbrnetBackend> make_cuda_backend(const TrainConfig& config,
                                                 const IbrnetNetworks& networks);

}  // namespace mvibr::train
