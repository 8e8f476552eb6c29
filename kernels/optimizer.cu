// The optimiser's kernels and launchers (see nn/cuda_optimizer.h). Memory-bound: Adam reads and
// writes 4 floats a value (16 + 12 bytes), the norm reads one; this file is built with
// -fmad=false so that adam_update_value rounds as the CPU's.
#include <cmath>

#include "../src/cuda/nn_device.h"
#include "common.h"
#include "mvibr/nn/cuda_optimizer.h"

namespace mvibr::nn::cuda {

namespace {

// One block per chunk: its sum of squares in double.
__global__ void chunk_squares_kernel(size_t count, const float* grads, double* partials) {
  __shared__ double shared[kWarpSize];
  const size_t begin = size_t(blockIdx.x) * kGradNormChunk;
  const size_t end = begin + kGradNormChunk < count ? begin + kGradNormChunk : count;
  double sum = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    sum += double(grads[i]) * double(grads[i]);
  }
  sum = block_all_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// The chunks' sums added in order, as the CPU adds them; the total replaces partials[0].
__global__ void sum_in_order_kernel(size_t chunks, double* partials) {
  double total = 0;
  for (size_t c = 0; c < chunks; ++c) total += partials[c];
  partials[0] = total;
}

__global__ void adam_kernel(size_t begin, size_t end, AdamCoefficients coefficients, int group,
                            bool decays, float clip_factor, float* values, float* grads,
                            float* exp_avg, float* exp_avg_sq) {
  for (size_t i = begin + grid_thread_index(); i < end; i += grid_thread_count()) {
    float grad = grads[i];
    if (clip_factor < 1.0f) {
      grad = __fmul_rn(grad, clip_factor);
      grads[i] = grad;
    }
    adam_update_value(coefficients, group, decays, grad, &values[i], &exp_avg[i], &exp_avg_sq[i]);
  }
}

}  // namespace

size_t gradient_norm_partials(size_t count) {
  return count == 0 ? 1 : (count + kGradNormChunk - 1) / kGradNormChunk;
}

double gradient_norm(size_t count, const float* grads, double* partials, cudaStream_t stream) {
  if (count == 0) return 0;
  const size_t chunks = gradient_norm_partials(count);
  MVIBR_LAUNCH(chunk_squares_kernel, unsigned(chunks), kThreadsPerBlock, 0, stream)
  (count, grads, partials);
  MVIBR_CUDA_CHECK_LAUNCH();
  MVIBR_LAUNCH(sum_in_order_kernel, 1, 1, 0, stream)(chunks, partials);
  MVIBR_CUDA_CHECK_LAUNCH();
  double total = 0;
  MVIBR_CUDA_CHECK(cudaMemcpyAsync(&total, partials, sizeof total, cudaMemcpyDeviceToHost, stream));
  MVIBR_CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(total);
}

void adam_update(size_t begin, size_t end, const AdamCoefficients& coefficients,
                 ParameterGroup group, bool decays, float clip_factor, float* values, float* grads,
                 float* exp_avg, float* exp_avg_sq, cudaStream_t stream) {
  if (end <= begin) return;
  launch_threads(end - begin, stream, adam_kernel, begin, end, coefficients, int(group), decays,
                 clip_factor, values, grads, exp_avg, exp_avg_sq);
}

}  // namespace mvibr::nn::cuda
