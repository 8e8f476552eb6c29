// Reflect padding on the GPU, forward and backward (see nn/cuda_layers.h), PyTorch's 'reflect'
// (row -1 is row 1). Forward: one thread per padded element, a gather. Backward: one thread per
// element of the unpadded map, gathering the (at most 3 x 3) padded elements that were copied
// from it: no atomics, and the terms are added in the CPU's order (padded rows ascending, then
// columns), so the result has the CPU's bits.
#include <string>

#include "common.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::nn::cuda {

namespace {

void check(int planes, int height, int width, int pad) {
  if (planes < 0 || height < 1 || width < 1 || pad < 0 || pad >= height || pad >= width) {
    throw InvalidArgument("reflect padding by " + std::to_string(pad) +
                          " needs a map larger than " + std::to_string(height) + "x" +
                          std::to_string(width));
  }
}

// The source index of padded index i - pad along an axis of length n (-1 -> 1, n -> n - 2).
__device__ __forceinline__ int reflect(int i, int n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

// The padded indices whose source is index k of an axis of length n, ascending: the reflection
// across the low edge (k in [1, pad]), the copy itself, the reflection across the high edge
// (k in [n - 1 - pad, n - 2]). Returns how many (1 to 3).
__device__ __forceinline__ int padded_sources(int k, int n, int pad, int* sources) {
  int count = 0;
  if (k >= 1 && k <= pad) sources[count++] = pad - k;
  sources[count++] = pad + k;
  if (k <= n - 2 && k >= n - 1 - pad) sources[count++] = pad + 2 * (n - 1) - k;
  return count;
}

__global__ void reflect_pad_forward_kernel(size_t count, int height, int width, int pad,
                                           const float* x, float* padded) {
  const int padded_height = height + 2 * pad, padded_width = width + 2 * pad;
  for (size_t e = grid_thread_index(); e < count; e += grid_thread_count()) {
    const int j = int(e % size_t(padded_width));
    const size_t rest = e / size_t(padded_width);
    const int i = int(rest % size_t(padded_height));
    const size_t plane = rest / size_t(padded_height);
    const size_t source = (plane * size_t(height) + size_t(reflect(i - pad, height))) * width +
                          size_t(reflect(j - pad, width));
    padded[e] = x[source];
  }
}

__global__ void reflect_pad_backward_kernel(size_t count, int height, int width, int pad,
                                            const float* grad_padded, float* grad_x) {
  const size_t padded_width = size_t(width) + 2 * size_t(pad);
  const size_t padded_plane = (size_t(height) + 2 * size_t(pad)) * padded_width;
  for (size_t e = grid_thread_index(); e < count; e += grid_thread_count()) {
    const int c = int(e % size_t(width));
    const size_t rest = e / size_t(width);
    const int r = int(rest % size_t(height));
    const size_t plane = rest / size_t(height);
    int rows[3], columns[3];
    const int n_rows = padded_sources(r, height, pad, rows);
    const int n_columns = padded_sources(c, width, pad, columns);
    const float* in = grad_padded + plane * padded_plane;
    float sum = grad_x[e];
    for (int a = 0; a < n_rows; ++a) {
      for (int b = 0; b < n_columns; ++b) {
        sum = __fadd_rn(sum, in[size_t(rows[a]) * padded_width + size_t(columns[b])]);
      }
    }
    grad_x[e] = sum;
  }
}

}  // namespace

void reflect_pad_forward(int planes, int height, int width, int pad, const float* x, float* padded,
                         StreamHandle stream) {
  check(planes, height, width, pad);
  const size_t count = size_t(planes) * size_t(height + 2 * pad) * size_t(width + 2 * pad);
  if (count == 0) return;
  MVIBR_LAUNCH(reflect_pad_forward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (count, height, width, pad, x, padded);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x, StreamHandle stream) {
  check(planes, height, width, pad);
  const size_t count = size_t(planes) * size_t(height) * size_t(width);
  if (count == 0) return;
  MVIBR_LAUNCH(reflect_pad_backward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock,
               0, stream)
  (count, height, width, pad, grad_padded, grad_x);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
