// A model's parameters on a CUDA device for networks that run there while the optimiser stays on
// the host (DynIBaR's and the pose model's device networks): the host's values copied in, the
// gradients accumulated on the device and added back into the host's. Only for the files built
// with the CUDA backend.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_layers.h"
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

  const float* values() const { return values_.data(); }
  float* grads() { return grads_.data(); }

 private:
  size_t count_ = 0;
  DeviceArray<float> values_, grads_;
};

}  // namespace mvibr::train
