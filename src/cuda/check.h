// Error checks and launch geometry shared by every .cu file. A CUDA failure becomes a
// RuntimeFailure naming the call, CUDA's error string and the source line, so a failing run
// says where it failed without a debugger. Kernels use grid-stride loops over size_t indices:
// one launch shape covers any element count, and a count of threads past 2^31 cannot overflow.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::cuda_detail {

inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw RuntimeFailure(std::string("CUDA error in ") + call + ": " + cudaGetErrorString(status) +
                       " (" + file + ":" + std::to_string(line) + ")");
}

// MVIBR_CUDA_SYNC=1 in the environment (read at each launch: a few nanoseconds beside one).
inline bool synchronous_launches() {
  const char* value = std::getenv("MVIBR_CUDA_SYNC");
  return value != nullptr && value[0] == '1' && value[1] == '\0';
}

inline void check_launch(const char* file, int line) {
  check(cudaGetLastError(), "kernel launch", file, line);
  if (synchronous_launches())
    check(cudaDeviceSynchronize(), "kernel (MVIBR_CUDA_SYNC=1)", file, line);
}

// Blocks for a grid-stride loop over `threads` threads; the cap only bounds the grid, the loop
// covers the rest. Callers skip the launch when there is no work (a zero grid is an error).
inline unsigned blocks_for(size_t threads, int threads_per_block) {
  constexpr size_t kMaxBlocks = size_t(1) << 20;
  return unsigned(std::min((threads + threads_per_block - 1) / threads_per_block, kMaxBlocks));
}

__device__ inline size_t grid_thread_index() {
  return size_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline size_t grid_thread_count() {
  return size_t(gridDim.x) * blockDim.x;
}

}  // namespace mvibr::cuda_detail

#define MVIBR_CUDA_CHECK(expr) ::mvibr::cuda_detail::check((expr), #expr, __FILE__, __LINE__)

// Every kernel launch: MVIBR_LAUNCH(kernel, grid, block, shared_bytes, stream)(arguments...) is
// kernel<<<grid, block, shared_bytes, stream>>>(arguments...) under nvcc, and the emulated
// device's launch (test/emulated_cuda/) where the kernels are compiled as host C++ for tests.
#if defined(MVIBR_EMULATED_CUDA)
#define MVIBR_LAUNCH(kernel, ...) ::mvibr::emulated::Launch(kernel, __VA_ARGS__)
#else
#define MVIBR_LAUNCH(kernel, ...) kernel<<<__VA_ARGS__>>>
#endif

// After every launch: a bad configuration is reported here; a fault in the kernel at the next
// synchronizing call, or here too when MVIBR_CUDA_SYNC=1 (each launch then waits for its kernel).
#define MVIBR_CUDA_CHECK_LAUNCH() ::mvibr::cuda_detail::check_launch(__FILE__, __LINE__)
