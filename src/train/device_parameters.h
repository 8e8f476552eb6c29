// A model's parameters on a CUDA device, for the networks that run there. Two ways to train them:
// - the optimiser on the host (DynIBaR's device networks): the host's values copied in each step
//   (load), the gradients accumulated on the device and added back into the host's
//   (add_gradients), which MPI all-reduces;
// - the whole training state on the device (the pose model's): values and Adam's moments in
//   (load_state) and out (store_state) only when the host's copy is wanted, the gradients
//   all-reduced where they are (NCCL), the norm and Adam's update on the device.
// Only for the files built with the CUDA backend.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/cuda_optimizer.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

class DeviceParameters {
 public:
  // The host's values to the device; with `training`, the device gradients zeroed.
  void load(const nn::ParameterSet& parameters, bool training) {
    count_ = parameters.size();
    values_.upload(parameters.values().data(), count_);
    if (training) device_memset_zero(grads_.reserve(count_), count_ * sizeof(float));
  }

  // grads[range] += the device's gradients there divided by `scale` (fp16's loss scale; each
  // value rounded to float once when it is not 1), once `context`'s queued work is done. `owner`
  // names the model in the error for a range past the parameters.
  void add_gradients(nn::cuda::Context& context, ParameterRange range, float* grads,
                     const std::string& owner, double scale = 1) {
    if (range.offset + range.count > count_) {
      throw InvalidArgument(owner + " on the device: a gradient range past the parameters");
    }
    context.synchronize();
    std::vector<float> device(range.count);
    if (range.count) {
      copy_device_to_host(device.data(), grads_.data() + range.offset, range.count * sizeof(float));
    }
    const double factor = 1 / scale;
    for (size_t i = 0; i < range.count; ++i) {
      const float value = scale == 1 ? device[i] : float(double(device[i]) * factor);
      grads[range.offset + i] += value;
    }
  }

  // The host's values and Adam's moments to the device (the gradients zeroed the first time).
  void load_state(const nn::ParameterSet& parameters, const nn::Adam& adam) {
    const size_t count = parameters.size();
    if (grads_.size() < count) device_memset_zero(grads_.reserve(count), count * sizeof(float));
    count_ = count;
    values_.upload(parameters.values().data(), count);
    exp_avg_.upload(adam.exp_avg().data(), count);
    exp_avg_sq_.upload(adam.exp_avg_sq().data(), count);
    norm_partials_.reserve(nn::cuda::gradient_norm_partials(count));
  }
  // The device's values, gradients and moments into the host's (after the queued work).
  void store_state(nn::ParameterSet* parameters, nn::Adam* adam) const {
    const size_t count = parameters->size();
    if (count != count_) throw InvalidArgument("device parameters: a set of another size");
    device_synchronize();
    copy_device_to_host(parameters->values().data(), values_.data(), count * sizeof(float));
    copy_device_to_host(parameters->grads().data(), grads_.data(), count * sizeof(float));
    std::vector<float> exp_avg(count), exp_avg_sq(count);
    copy_device_to_host(exp_avg.data(), exp_avg_.data(), count * sizeof(float));
    copy_device_to_host(exp_avg_sq.data(), exp_avg_sq_.data(), count * sizeof(float));
    adam->restore(adam->steps(), std::move(exp_avg), std::move(exp_avg_sq), adam->group_steps());
  }
  void zero_gradients() { device_memset_zero(grads_.data(), count_ * sizeof(float)); }
  // nn::global_grad_norm of the gradients, after all the device's queued work (the gradients'
  // all-reduce runs on another stream).
  double gradient_norm(nn::cuda::Context& context) {
    device_synchronize();
    return nn::cuda::gradient_norm(count_, grads_.data(), norm_partials_.data(), context.stream());
  }
  // Adam's (or AdamW's) update of `groups` on the device, clipping first as nn::Adam::step.
  void update(nn::cuda::Context& context, nn::Adam& adam, double gradient_norm,
              uint32_t groups = nn::Adam::kAllGroups) {
    const double max_norm = adam.options().max_grad_norm;
    const double clip = max_norm > 0 ? max_norm / (gradient_norm + 1e-6) : 1.0;
    const float clip_factor = clip < 1.0 ? float(clip) : 1.0f;
    const nn::AdamCoefficients c = adam.begin_update(groups);
    for (const nn::Adam::Span& span : adam.spans()) {
      if (!(groups & (1u << unsigned(span.group)))) continue;
      nn::cuda::adam_update(span.begin, span.end, c, span.group, span.decays, clip_factor,
                            values_.data(), grads_.data(), exp_avg_.data(), exp_avg_sq_.data(),
                            context.stream());
    }
  }

  const float* values() const { return values_.data(); }
  float* grads() { return grads_.data(); }

 private:
  size_t count_ = 0;
  DeviceArray<float> values_, grads_, exp_avg_, exp_avg_sq_;
  DeviceArray<double> norm_partials_;
};

}  // namespace mvibr::train
