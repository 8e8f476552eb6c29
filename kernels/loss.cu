// CUDA launchers of IBRNet's masked MSE. The loss is one number over a few thousand rays, so a
// single block sums it: each thread accumulates a fixed stride of rays in double, then a warp
// shuffle tree and a tree over warps add those partial sums in a fixed order. One block means
// no second pass or atomics, and the result is the same bits on every run. The backward is
// elementwise, a thread per ray.
#include "common.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/render/loss.h"

namespace mvibr::cuda {

constexpr int kWarpSize = 32;
constexpr int kLossThreads = 512;

__device__ double warp_sum(double x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_down_sync(0xffffffffu, x, offset);
  }
  return x;
}

// The sum of x over the block, valid in thread 0. Ends with a barrier so that the next call
// may reuse the shared partial sums.
__device__ double block_sum(double x) {
  __shared__ double warp_sums[kLossThreads / kWarpSize];
  const int warp = int(threadIdx.x / kWarpSize), lane = int(threadIdx.x % kWarpSize);
  x = warp_sum(x);
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) x = warp_sum(lane < kLossThreads / kWarpSize ? warp_sums[lane] : 0.0);
  __syncthreads();
  return x;
}

__global__ void __launch_bounds__(kLossThreads)
    masked_mse_kernel(int n_rays, const float* predicted, const float* target,
                      const float* ray_mask, float* loss_and_denominator) {
  double squared_error = 0, mask_sum = 0;
  for (size_t r = threadIdx.x; r < size_t(n_rays); r += kLossThreads) {
    squared_error += masked_squared_error(predicted + 3 * r, target + 3 * r, ray_mask[r]);
    mask_sum += ray_mask[r];
  }
  squared_error = block_sum(squared_error);
  mask_sum = block_sum(mask_sum);
  if (threadIdx.x == 0) {
    const double denominator = masked_mse_denominator(mask_sum);
    loss_and_denominator[0] = float(squared_error / denominator);
    loss_and_denominator[1] = float(denominator);
  }
}

// Launched even for zero rays: the outputs {0, 1e-6} are still written, as on the CPU.
void masked_mse(int n_rays, const float* predicted, const float* target, const float* ray_mask,
                float* loss_and_denominator, StreamHandle stream) {
  MVIBR_LAUNCH(masked_mse_kernel, 1, kLossThreads, 0, stream)
  (n_rays, predicted, target, ray_mask, loss_and_denominator);
  MVIBR_CUDA_CHECK_LAUNCH();
}

__global__ void masked_mse_backward_kernel(int n_rays, const float* predicted, const float* target,
                                           const float* ray_mask, const float* loss_and_denominator,
                                           float grad_loss, float* grad_predicted) {
  const float scale = grad_loss / loss_and_denominator[1];
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    masked_squared_error_backward(predicted + 3 * r, target + 3 * r, ray_mask[r], scale,
                                  grad_predicted + 3 * r);
  }
}

void masked_mse_backward(int n_rays, const float* predicted, const float* target,
                         const float* ray_mask, const float* loss_and_denominator, float grad_loss,
                         float* grad_predicted, StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(masked_mse_backward_kernel, blocks_for(size_t(n_rays), kThreadsPerBlock),
               kThreadsPerBlock, 0, stream)
  (n_rays, predicted, target, ray_mask, loss_and_denominator, grad_loss, grad_predicted);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::cuda
