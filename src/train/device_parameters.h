// A model's training state on a CUDA device, for the steps that run there (IBRNet's, DynIBaR's and
// the pose model's): the parameters, their gradients and Adam's moments.
// - Values and moments go in (load_state) and out with the gradients (store_state) only when the
//   host's copy is wanted (train/state_copies.h); the gradients are all-reduced where they are
//   (NCCL), and the norm and Adam's update run on the device.
// - Only for the files built with the CUDA backend.
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
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

class DeviceParameters {
 public:
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

  // grads[range] /= scale (fp16's loss scale; each value rounded once, exact for its powers of
  // two), on the context's stream.
  void unscale_gradients(nn::cuda::Context& context, ParameterRange range, double scale) {
    check(range);
    if (scale == 1 || range.count == 0) return;
    nn::cuda::scale(range.count, float(1 / scale), grads_.data() + range.offset, context.stream());
  }
  // grads[range] += host_grads[range] (host pointer to the whole set's gradients).
  void add_host_gradients(nn::cuda::Context& context, ParameterRange range,
                          const float* host_grads) {
    check(range);
    if (range.count == 0) return;
    nn::cuda::add_into(range.count, host_grads_.upload(host_grads + range.offset, range.count),
                       grads_.data() + range.offset, context.stream());
  }
  // host_values[range] = the device's values there (after the queued work).
  void read_values(ParameterRange range, float* host_values) const {
    check(range);
    device_synchronize();
    if (range.count) {
      copy_device_to_host(host_values + range.offset, values_.data() + range.offset,
                          range.count * sizeof(float));
    }
  }

  const float* values() const { return values_.data(); }
  float* grads() { return grads_.data(); }

 private:
  void check(ParameterRange range) const {
    if (range.offset + range.count > count_) {
      throw InvalidArgument("device parameters: a range past the " + std::to_string(count_) +
                            " values");
    }
  }

  size_t count_ = 0;
  DeviceArray<float> values_, grads_, exp_avg_, exp_avg_sq_, host_grads_;
  DeviceArray<double> norm_partials_;
};

// DeviceTrainingState (state_copies.h) over a DeviceParameters, for a device network's interface
// that extends it (PoseDeviceNetwork, DynibarDeviceNetworks): the network's Context and parameters
// are these. Adam and AdamW only: LAMB's per-tensor norms are the CPU step's (InvalidArgument).
template <typename Interface>
class OnDeviceTrainingState : public Interface {
 public:
  OnDeviceTrainingState(const TrainConfig& config, const std::string& model) {
    if (config.optimizer == nn::OptimizerKind::kLamb) {
      throw InvalidArgument(
          "config key 'optimizer': lamb runs on the CPU step only (device = cpu): " + model +
          "'s GPU step has no per-tensor norms");
    }
  }

  void load_state(const nn::ParameterSet& parameters, const nn::Adam& adam) override {
    parameters_.load_state(parameters, adam);
  }
  void store_state(nn::ParameterSet* parameters, nn::Adam* adam) override {
    parameters_.store_state(parameters, adam);
  }
  void zero_gradients() override { parameters_.zero_gradients(); }
  void set_gradient_scale(double scale) override { gradient_scale_ = scale; }
  void unscale_gradients(ParameterRange range) override {
    parameters_.unscale_gradients(context_, range, gradient_scale_);
  }
  void add_host_gradients(ParameterRange range, const float* grads) override {
    parameters_.add_host_gradients(context_, range, grads);
  }
  void synchronize() override { context_.synchronize(); }
  float* gradients() override { return parameters_.grads(); }
  double gradient_norm() override { return parameters_.gradient_norm(context_); }
  void update(nn::Adam& adam, double gradient_norm, uint32_t groups) override {
    parameters_.update(context_, adam, gradient_norm, groups);
  }
  void read_values(ParameterRange range, float* values) override {
    parameters_.read_values(range, values);
  }

 protected:
  nn::cuda::Context context_;
  DeviceParameters parameters_;
  double gradient_scale_ = 1;
};

}  // namespace mvibr::train
