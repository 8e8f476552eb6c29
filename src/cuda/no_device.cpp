// The device API in a build without CUDA: no device, and asking for device memory or NCCL is an
// error.
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/nccl_communicator.h"

namespace mvibr {

namespace {
[[noreturn]] void no_cuda() {
  throw RuntimeFailure("this mvibr was built without CUDA (configure with MVIBR_CUDA=ON)");
}
}  // namespace

bool cuda_backend_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_device_description(int) {
  return "";
}
void* device_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  no_cuda();
}
void device_free(void*) {}
void copy_host_to_device(void*, const void*, size_t) {
  no_cuda();
}
void copy_device_to_host(void*, const void*, size_t) {
  no_cuda();
}
void copy_device_to_device(void*, const void*, size_t) {
  no_cuda();
}
void device_memset_zero(void*, size_t) {
  no_cuda();
}
void device_synchronize() {
  no_cuda();
}

}  // namespace mvibr

namespace mvibr::dist {

int select_device(const Topology&) {
  return -1;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, double) {
  throw RuntimeFailure("this mvibr was built without CUDA and NCCL (configure with MVIBR_CUDA=ON)");
}

}  // namespace mvibr::dist
