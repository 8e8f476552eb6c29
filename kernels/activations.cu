// CUDA launchers of the element-wise activations, in place, and their backward passes from the
// output, and a plain scaling (see nn/cuda_layers.h): one thread per element in a grid-stride loop,
// 256 threads a block. Memory-bound; the layers that can fuse them (Linear, instance norm) do.
#include <cmath>

#include "../src/cuda/nn_device.h"
#include "common.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::nn::cuda {

namespace {

__global__ void activation_forward_kernel(Activation activation, size_t count, float* x) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    x[i] = activate(activation, x[i]);
  }
}

__global__ void activation_backward_kernel(Activation activation, size_t count, const float* y,
                                           float* grad) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    grad[i] = activation_gradient(activation, y[i], grad[i]);
  }
}

// The CPU's float sigmoid: from e = exp(-|x|), which cannot overflow.
__global__ void sigmoid_forward_kernel(size_t count, float* x) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const float v = x[i];
    const float e = expf(-fabsf(v));
    x[i] = __fdiv_rn(v >= 0.0f ? 1.0f : e, __fadd_rn(1.0f, e));
  }
}

__global__ void sigmoid_backward_kernel(size_t count, const float* y, float* grad) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    // grad * (y (1 - y)), rounded as the CPU's grad[i] *= y[i] * (1 - y[i]).
    grad[i] = __fmul_rn(grad[i], __fmul_rn(y[i], __fsub_rn(1.0f, y[i])));
  }
}

__global__ void scale_kernel(size_t count, float factor, float* x) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    x[i] = __fmul_rn(x[i], factor);
  }
}

}  // namespace

void activation_forward(Activation activation, size_t count, float* x, StreamHandle stream) {
  if (count == 0 || activation == Activation::kNone) return;
  MVIBR_LAUNCH(activation_forward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (activation, count, x);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void activation_backward(Activation activation, size_t count, const float* y, float* grad,
                         StreamHandle stream) {
  if (count == 0 || activation == Activation::kNone) return;
  MVIBR_LAUNCH(activation_backward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (activation, count, y, grad);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void sigmoid_forward(size_t count, float* x, StreamHandle stream) {
  if (count == 0) return;
  MVIBR_LAUNCH(sigmoid_forward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (count, x);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void sigmoid_backward(size_t count, const float* y, float* grad, StreamHandle stream) {
  if (count == 0) return;
  MVIBR_LAUNCH(sigmoid_backward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (count, y, grad);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void scale(size_t count, float factor, float* x, StreamHandle stream) {
  if (count == 0) return;
  MVIBR_LAUNCH(scale_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0, stream)
  (count, factor, x);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
