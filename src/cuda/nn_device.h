// Device helpers shared by the layers' kernels: the activations and their slopes with the CPU
// layers' float semantics, and warp and block sums that add in a fixed order (the same bits on
// every run for the same launch shape).
#pragma once

#include <cuda_runtime.h>

#include "mvibr/nn/layers.h"  // Activation

namespace mvibr::nn::cuda {

constexpr int kWarpSize = 32;

// ELU (alpha 1), ReLU or nothing. expm1f where the CPU's float ELU takes exp(x) - 1 (within an
// ulp of 1 absolute near zero) and instance norm std::expm1: the same function to rounding.
__device__ __forceinline__ float activate(Activation activation, float z) {
  switch (activation) {
    case Activation::kRelu:
      return z > 0.0f ? z : 0.0f;
    case Activation::kElu:
      return z > 0.0f ? z : expm1f(z);
    case Activation::kNone:
      break;
  }
  return z;
}

// act'(z) from y = act(z): ELU's is 1 above zero and y + 1 below (elu_slope), ReLU's [y > 0].
// The gradient is scaled exactly as the CPU does (one multiplication, or a select).
__device__ __forceinline__ float activation_gradient(Activation activation, float y, float grad) {
  switch (activation) {
    case Activation::kRelu:
      return y > 0.0f ? grad : 0.0f;
    case Activation::kElu:
      return y > 0.0f ? grad : __fmul_rn(grad, __fadd_rn(y, 1.0f));
    case Activation::kNone:
      break;
  }
  return grad;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_down_sync(0xffffffffu, x, offset);
  }
  return x;  // valid in lane 0
}

template <typename T>
__device__ __forceinline__ T warp_all_sum(T x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;  // the same bits in every lane
}

// The sum of x over a block of blockDim.x threads (a multiple of 32, at most 1024), returned to
// every thread. `shared` holds 32 values. Starts with a barrier, so consecutive calls may share
// `shared`; other writes to it after a call need a barrier first.
template <typename T>
__device__ __forceinline__ T block_all_sum(T x, T* shared) {
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const int warps = int(blockDim.x) / kWarpSize;
  __syncthreads();
  x = warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_all_sum(total);  // every warp adds the same values in the same order
  return total;
}

// The block of a column reduction over a row-major [rows, width] array, 256 threads as
// (columns, row lanes): columns = the smallest power of two >= width, at most 32, and
// 256 / columns row lanes (a power of two), so that a warp always reads 32 consecutive floats,
// even of an array 1 wide.
constexpr int kColumnBlockThreads = 256;
inline dim3 column_block(int width) {
  int columns = 1;
  while (columns < width && columns < kWarpSize) columns *= 2;
  return dim3(unsigned(columns), unsigned(kColumnBlockThreads / columns));
}

}  // namespace mvibr::nn::cuda
