// Instance norm with the residual add and activation that follow it, forward and backward, on
// the GPU (see nn/cuda_layers.h). One block per plane (grid-stride over planes), sized to the
// plane: a warp for planes up to 256 values (the encoder's deepest are 2x3), 128 threads up to
// 2048, 256 above. Statistics in double as the CPU layer (two passes: mean, then squared
// deviations), block sums through warp shuffles in a fixed order, and the per-element
// expressions rounded exactly as the CPU writes them (explicit _rn intrinsics: no contraction).
//
// Backward: each plane's block recomputes the statistics from x, writes the gradient of x in
// place and its two sums (of g and of g x̂, double) to the workspace; a second kernel adds those
// per channel over the batch in the CPU's order (plane after plane) into grad_gamma, grad_beta.
#include <algorithm>
#include <string>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "common.h"

namespace mvibr::nn::cuda {

namespace {

constexpr int kMaxThreads = 256;

void check(const InstanceNormShape& s) {
  if (s.batch < 0 || s.channels < 1 || s.plane_size < 1) {
    throw InvalidArgument("instance norm on the GPU: bad shape (batch " + std::to_string(s.batch) +
                          ", channels " + std::to_string(s.channels) + ", plane size " +
                          std::to_string(s.plane_size) + ")");
  }
  if (s.layout != MapLayout::kPlanar) {
    throw InvalidArgument(
        "instance norm on the GPU: maps must be planar (NCHW), not channels last");
  }
}

int threads_for_plane(int plane_size) {
  if (plane_size <= 256) return kWarpSize;
  if (plane_size <= 2048) return 128;
  return kMaxThreads;
}

struct Statistics {
  double mean, inverse_std;
};

// The plane's mean and 1 / sqrt(biased variance + eps), in every thread of the block.
__device__ Statistics plane_statistics(const float* values, size_t n, double* shared) {
  double sum = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
  const double mean = block_all_sum(sum, shared) / double(n);
  double squares = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = values[i] - mean;
    squares += d * d;
  }
  const double variance = block_all_sum(squares, shared) / double(n);
  return {mean, 1.0 / sqrt(variance + double(kInstanceNormEps))};
}

__global__ void __launch_bounds__(kMaxThreads)
    instance_norm_forward_kernel(int planes, int channels, size_t n, const float* x,
                                 const float* gamma, const float* beta, const float* residual,
                                 Activation activation, float* out) {
  __shared__ double shared[kWarpSize];
  for (int p = int(blockIdx.x); p < planes; p += int(gridDim.x)) {
    const size_t offset = size_t(p) * n;
    const float* values = x + offset;
    const Statistics s = plane_statistics(values, n, shared);
    const int c = p % channels;
    const double scale = __dmul_rn(double(gamma[c]), s.inverse_std);
    const double shift = __dsub_rn(double(beta[c]), __dmul_rn(scale, s.mean));
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      float z = float(__dadd_rn(__dmul_rn(scale, double(values[i])), shift));
      if (residual) z = __fadd_rn(z, residual[offset + i]);
      out[offset + i] = activate(activation, z);
    }
  }
}

// sums[2 p] = sum of g x̂ (for gamma), sums[2 p + 1] = sum of g (for beta), of plane p.
__global__ void __launch_bounds__(kMaxThreads)
    instance_norm_backward_kernel(int planes, int channels, size_t n, const float* x,
                                  const float* gamma, float* grad, double* sums) {
  __shared__ double shared[kWarpSize];
  for (int p = int(blockIdx.x); p < planes; p += int(gridDim.x)) {
    const size_t offset = size_t(p) * n;
    const float* values = x + offset;
    float* g = grad + offset;
    const Statistics s = plane_statistics(values, n, shared);
    double sum = 0, dot = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      sum += g[i];
      dot += g[i] * ((values[i] - s.mean) * s.inverse_std);
    }
    sum = block_all_sum(sum, shared);
    dot = block_all_sum(dot, shared);
    if (threadIdx.x == 0) {
      sums[2 * size_t(p)] = dot;
      sums[2 * size_t(p) + 1] = sum;
    }
    // dx = gamma rstd (g - mean(g) - x̂ mean(g x̂)), as the CPU rounds it.
    const double scale = __dmul_rn(double(gamma[p % channels]), s.inverse_std);
    const double mean_grad = sum / double(n), mean_dot = dot / double(n);
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double normalised = __dmul_rn(__dsub_rn(double(values[i]), s.mean), s.inverse_std);
      const double inner =
          __dsub_rn(__dsub_rn(double(g[i]), mean_grad), __dmul_rn(normalised, mean_dot));
      g[i] = float(__dmul_rn(scale, inner));
    }
  }
}

__global__ void instance_norm_parameter_kernel(int batch, int channels, const double* sums,
                                               float* grad_gamma, float* grad_beta) {
  for (size_t c = grid_thread_index(); c < size_t(channels); c += grid_thread_count()) {
    float gamma_sum = grad_gamma[c], beta_sum = grad_beta[c];
    for (int b = 0; b < batch; ++b) {
      const size_t p = size_t(b) * size_t(channels) + c;
      gamma_sum += float(sums[2 * p]);
      beta_sum += float(sums[2 * p + 1]);
    }
    grad_gamma[c] = gamma_sum;
    grad_beta[c] = beta_sum;
  }
}

unsigned plane_blocks(int planes) {
  return unsigned(std::min(planes, 1 << 20));
}

}  // namespace

void instance_norm_forward(Context& context, const InstanceNormShape& shape, const float* x,
                           const float* gamma, const float* beta, const float* residual,
                           Activation activation, float* out) {
  check(shape);
  const int planes = shape.batch * shape.channels;
  if (planes == 0) return;
  MVIBR_LAUNCH(instance_norm_forward_kernel, plane_blocks(planes),
               threads_for_plane(shape.plane_size), 0, context.impl().stream)
  (planes, shape.channels, size_t(shape.plane_size), x, gamma, beta, residual, activation, out);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void instance_norm_backward(Context& context, const InstanceNormShape& shape, const float* x,
                            const float* gamma, float* grad, float* grad_gamma, float* grad_beta) {
  check(shape);
  const int planes = shape.batch * shape.channels;
  if (planes == 0) return;
  Context::Impl& c = context.impl();
  double* sums = c.workspace_of<double>(2 * size_t(planes));
  MVIBR_LAUNCH(instance_norm_backward_kernel, plane_blocks(planes),
               threads_for_plane(shape.plane_size), 0, c.stream)
  (planes, shape.channels, size_t(shape.plane_size), x, gamma, grad, sums);
  MVIBR_CUDA_CHECK_LAUNCH();
  MVIBR_LAUNCH(instance_norm_parameter_kernel, blocks_for(size_t(shape.channels), kMaxThreads),
               kMaxThreads, 0, c.stream)
  (shape.batch, shape.channels, sums, grad_gamma, grad_beta);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
