// A model's training state (parameters, gradients, Adam's moments) when its step runs on a CUDA
// device and keeps that state there (DynIBaR's and the pose model's; IBRNet's backend has its own
// interface). Internal to the train library.
// - DeviceTrainingState: what such a step's device networks offer for it; one implementation,
//   over a DeviceParameters, in device_parameters.h.
// - StateCopies: which copy is current, the host's (after an edit there), the device's (after a
//   step) or both. fetch before reading the host's copy (it stores the device's when that is
//   newer); edit before writing it; send before the device computes from its copy; stepped
//   after it changed it. Without a device every call is free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

class DeviceTrainingState {
 public:
  virtual ~DeviceTrainingState() = default;

  // The host's values and Adam's moments to the device, and back with the gradients.
  virtual void load_state(const nn::ParameterSet& parameters, const nn::Adam& adam) = 0;
  virtual void store_state(nn::ParameterSet* parameters, nn::Adam* adam) = 0;
  virtual void zero_gradients() = 0;
  // fp16's loss scale: the backward passes start from the gradients sent times `scale` (1 by
  // default), and unscale_gradients divides it out of the device's gradients in `range`.
  virtual void set_gradient_scale(double scale) = 0;
  virtual void unscale_gradients(ParameterRange range) = 0;
  // The device's gradients in `range` += grads[range] (host pointer to the whole set's): those
  // the host computes.
  virtual void add_host_gradients(ParameterRange range, const float* grads) = 0;
  // Waits for the queued work: the gradients are final for the all-reduce.
  virtual void synchronize() = 0;
  virtual float* gradients() = 0;  // device memory
  // After the gradients' all-reduce: their norm, and Adam's update of `groups` (clipping first).
  virtual double gradient_norm() = 0;
  virtual void update(nn::Adam& adam, double gradient_norm, uint32_t groups) = 0;
  // values[range] = the device's values there (host pointer to the whole set's values).
  virtual void read_values(ParameterRange range, float* values) = 0;
};

class StateCopies {
 public:
  StateCopies() = default;
  // The host's `parameters` and `adam`, and `device`'s copy of them (a DeviceTrainingState, or
  // IBRNet's CUDA backend: anything with load_state and store_state).
  template <typename Device>
  StateCopies(Device* device, nn::ParameterSet* parameters, nn::Adam* adam)
      : store_([=] { device->store_state(parameters, adam); }),
        load_([=] { device->load_state(*parameters, *adam); }) {}

  void fetch() {
    if (current_ != Current::kDevice) return;
    store_();
    current_ = Current::kBoth;
  }
  void edit() {
    fetch();
    current_ = Current::kHost;
  }
  void send() {
    if (!load_ || current_ != Current::kHost) return;
    load_();
    current_ = Current::kBoth;
  }
  void stepped() {
    if (load_) current_ = Current::kDevice;
  }

 private:
  enum class Current { kBoth, kHost, kDevice };
  std::function<void()> store_, load_;
  Current current_ = Current::kHost;
};

// A model's State (CRTP) with its copies: fetch() and edit() hand back the State. The step_*
// calls run on the training state where the step keeps it: the State's `device` (a
// DeviceTrainingState) when it has one, else its `parameters` and `adam`.
template <typename State>
struct WithStateCopies {
  StateCopies copies;
  State& fetch() {
    copies.fetch();
    return static_cast<State&>(*this);
  }
  State& edit() {
    copies.edit();
    return static_cast<State&>(*this);
  }

  float* step_gradients() {
    State& s = static_cast<State&>(*this);
    return s.device ? s.device->gradients() : s.parameters.grads().data();
  }
  double step_gradient_norm() {
    State& s = static_cast<State&>(*this);
    if (s.device) return s.device->gradient_norm();
    return nn::global_grad_norm(s.parameters.grads().data(), s.parameters.size());
  }
  // Adam's update of `groups`; on the device after any edit of the host's copy since the step.
  void step_update(double gradient_norm, uint32_t groups) {
    State& s = static_cast<State&>(*this);
    if (!s.device) {
      s.adam.step(&s.parameters, gradient_norm, groups);
      return;
    }
    copies.send();
    s.device->update(s.adam, gradient_norm, groups);
    copies.stepped();
  }
};

}  // namespace mvibr::train
