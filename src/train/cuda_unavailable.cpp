// The CUDA backends (IBRNet's step, DynIBaR's and the pose model's networks) in a build without
// CUDA: `auto` means the CPU, `cuda` is an error that says how to get it.
#include "dynibar_device.h"
#include "ibrnet_backend.h"
#include "mvibr/core/error.h"
#include "pose_device.h"

namespace mvibr::train {

std::unique_ptr<IbrnetBackend> make_cuda_backend(const TrainConfig&, const IbrnetNetworks&) {
  throw RuntimeFailure("this mvibr was built without CUDA (configure with MVIBR_CUDA=ON)");
}

std::unique_ptr<DynibarDeviceNetworks> make_dynibar_device_networks(const TrainConfig&,
                                                                    const DynibarNetworks&) {
  throw RuntimeFailure("this mvibr was built without CUDA (configure with MVIBR_CUDA=ON)");
}

std::unique_ptr<PoseDeviceNetwork> make_pose_device_network(const TrainConfig&,
                                                            const PoseNetworks&) {
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
