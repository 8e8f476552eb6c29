// The device API of core/device.h on the CUDA runtime. A machine without a driver or a GPU is
// a normal case (build machines, CPU-only runs): it reports zero devices. Every other CUDA
// failure is a RuntimeFailure.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "check.h"
#include "mvibr/core/device.h"

namespace mvibr {

bool cuda_backend_built() {
  return true;
}

int cuda_device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear it, so the next launch check does not report it
    return 0;
  }
  MVIBR_CUDA_CHECK(status);
  return count;
}

std::string cuda_device_description(int device) {
  if (device < 0 || device >= cuda_device_count()) return "";
  cudaDeviceProp properties;
  MVIBR_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  // Whole GiB rounded up: the size printed on the box (141 GB for an H200's 140.4 GiB).
  constexpr size_t kGiB = size_t(1) << 30;
  const size_t memory_gb = (properties.totalGlobalMem + kGiB - 1) / kGiB;
  char text[320];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %zu GB, %d SMs)", properties.name,
                properties.major, properties.minor, memory_gb, properties.multiProcessorCount);
  return text;
}

void* device_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  MVIBR_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  return pointer;
}

void device_free(void* pointer) {
  if (!pointer) return;  // empty arrays never touch the runtime (no device needed)
  const cudaError_t status = cudaFree(pointer);
  // Called from destructors, which must not throw (std::terminate would hide the error): a
  // failure is reported here, and the broken context fails the next checked call again.
  if (status != cudaSuccess && std::uncaught_exceptions() == 0) {
    std::fprintf(stderr, "mvibr: cudaFree failed: %s\n", cudaGetErrorString(status));
  }
}

void copy_host_to_device(void* device_destination, const void* host_source, size_t bytes) {
  if (bytes == 0) return;
  MVIBR_CUDA_CHECK(cudaMemcpy(device_destination, host_source, bytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* host_destination, const void* device_source, size_t bytes) {
  if (bytes == 0) return;
  MVIBR_CUDA_CHECK(cudaMemcpy(host_destination, device_source, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* device_destination, const void* device_source, size_t bytes) {
  if (bytes == 0) return;
  MVIBR_CUDA_CHECK(cudaMemcpy(device_destination, device_source, bytes, cudaMemcpyDeviceToDevice));
}

void device_memset_zero(void* device_destination, size_t bytes) {
  if (bytes == 0) return;
  MVIBR_CUDA_CHECK(cudaMemset(device_destination, 0, bytes));
}

void device_synchronize() {
  MVIBR_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace mvibr
