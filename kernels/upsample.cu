// Bilinear upsampling by 2 with align_corners=True on the GPU, forward and backward (see
// nn/cuda_layers.h). Output index o samples the input at o (n - 1) / (2n - 1), computed in double
// and rounded to float weights exactly as the CPU layer's taps.
//
// Forward: one thread per output element, four taps. Backward: one thread per input element,
// gathering instead of scattering: output row i samples source rows within [i/2 - 1/2, i/2]
// (the scale is below 1/2 by at most 1/2 over the whole axis), so the outputs that touch input
// row r are among rows 2r - 2 .. 2r + 2, and likewise for columns. Each tap is recomputed and
// the terms added in the CPU's scatter order (output rows, then columns, then its four
// statements), so the result has the CPU's bits.
#include "common.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::nn::cuda {

namespace {

struct Tap {
  int low, high;
  float low_weight, high_weight;
};

// Where output index o of an axis upsampled from n samples the input.
__device__ __forceinline__ Tap tap(int o, int n) {
  // Rounded step by step as the CPU's (built without FMA contraction); nvcc would fuse them.
  const double scale = __ddiv_rn(double(n - 1), double(2 * n - 1));
  const double source = __dmul_rn(scale, double(o));
  const int low = int(source);
  const int high = low < n - 1 ? low + 1 : low;
  const float fraction = float(__dsub_rn(source, double(low)));
  return {low, high, __fsub_rn(1.0f, fraction), fraction};
}

// Element e of [planes, height, width] maps.
struct Element {
  int row, column;
  size_t plane;
};
__device__ __forceinline__ Element element_of(size_t e, int height, int width) {
  const size_t rest = e / size_t(width);
  return {int(rest % size_t(height)), int(e % size_t(width)), rest / size_t(height)};
}

__global__ void upsample2x_forward_kernel(size_t count, int height, int width, const float* x,
                                          float* y) {
  const int out_height = 2 * height, out_width = 2 * width;
  for (size_t e = grid_thread_index(); e < count; e += grid_thread_count()) {
    const auto [i, j, plane] = element_of(e, out_height, out_width);
    const Tap r = tap(i, height), c = tap(j, width);
    const float* low = x + (plane * size_t(height) + size_t(r.low)) * size_t(width);
    const float* high = x + (plane * size_t(height) + size_t(r.high)) * size_t(width);
    const float low_row =
        __fadd_rn(__fmul_rn(c.low_weight, low[c.low]), __fmul_rn(c.high_weight, low[c.high]));
    const float high_row =
        __fadd_rn(__fmul_rn(c.low_weight, high[c.low]), __fmul_rn(c.high_weight, high[c.high]));
    y[e] = __fadd_rn(__fmul_rn(r.low_weight, low_row), __fmul_rn(r.high_weight, high_row));
  }
}

__global__ void upsample2x_backward_kernel(size_t count, int height, int width, const float* grad_y,
                                           float* grad_x, bool accumulate) {
  const int out_height = 2 * height, out_width = 2 * width;
  for (size_t e = grid_thread_index(); e < count; e += grid_thread_count()) {
    const auto [row, col, plane] = element_of(e, height, width);
    const float* in = grad_y + plane * size_t(out_height) * size_t(out_width);
    const int first_i = max(0, 2 * row - 2), last_i = min(out_height - 1, 2 * row + 2);
    const int first_j = max(0, 2 * col - 2), last_j = min(out_width - 1, 2 * col + 2);
    Tap columns[5];
    for (int j = first_j; j <= last_j; ++j) columns[j - first_j] = tap(j, width);
    float sum = 0.0f;
    for (int i = first_i; i <= last_i; ++i) {
      const Tap r = tap(i, height);
      if (r.low != row && r.high != row) continue;
      for (int j = first_j; j <= last_j; ++j) {
        const Tap c = columns[j - first_j];
        if (c.low != col && c.high != col) continue;
        const float g = in[size_t(i) * size_t(out_width) + size_t(j)];
        // The CPU's four statements for output (i, j), in order: low row (low, high column),
        // then high row; one output may reach this element through several of them.
        if (r.low == row && c.low == col) {
          sum = __fadd_rn(sum, __fmul_rn(__fmul_rn(r.low_weight, c.low_weight), g));
        }
        if (r.low == row && c.high == col) {
          sum = __fadd_rn(sum, __fmul_rn(__fmul_rn(r.low_weight, c.high_weight), g));
        }
        if (r.high == row && c.low == col) {
          sum = __fadd_rn(sum, __fmul_rn(__fmul_rn(r.high_weight, c.low_weight), g));
        }
        if (r.high == row && c.high == col) {
          sum = __fadd_rn(sum, __fmul_rn(__fmul_rn(r.high_weight, c.high_weight), g));
        }
      }
    }
    grad_x[e] = accumulate ? __fadd_rn(grad_x[e], sum) : sum;
  }
}

void check(int planes, int height, int width) {
  if (planes < 0 || height < 1 || width < 1) {
    throw InvalidArgument("upsampling on the GPU: bad shape (" + std::to_string(planes) + " x " +
                          std::to_string(height) + " x " + std::to_string(width) + ")");
  }
}

}  // namespace

void upsample2x_forward(int planes, int height, int width, const float* x, float* y,
                        StreamHandle stream) {
  check(planes, height, width);
  const size_t count = size_t(planes) * 4 * size_t(height) * size_t(width);
  if (count == 0) return;
  MVIBR_LAUNCH(upsample2x_forward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (count, height, width, x, y);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void upsample2x_backward(int planes, int height, int width, const float* grad_y, float* grad_x,
                         StreamHandle stream, bool accumulate) {
  check(planes, height, width);
  const size_t count = size_t(planes) * size_t(height) * size_t(width);
  if (count == 0) return;
  MVIBR_LAUNCH(upsample2x_backward_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (count, height, width, grad_y, grad_x, accumulate);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
