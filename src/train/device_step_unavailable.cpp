// The device step in a build without the CUDA backend: `auto` means the CPU, `cuda` is an error
// that says how to get it.
#include "device_step.h"
#include "mvibr/core/error.h"

namespace mvibr::train {

std::unique_ptr<DeviceStep> make_cuda_step(const TrainConfig&, const nn::ResUNet&,
                                           const nn::IbrnetAggregator&,
                                           const nn::IbrnetAggregator*) {
  throw RuntimeFailure("this mvibr was built without CUDA (configure with MVIBR_CUDA=ON)");
}

bool use_cuda_step(Device device) {
  if (device == Device::kCuda) {
    throw InvalidArgument(
        "config key 'device': cuda, but this mvibr was built without CUDA (configure with "
        "MVIBR_CUDA=ON)");
  }
  return false;
}

}  // namespace mvibr::train
