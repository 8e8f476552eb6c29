// LayerNorm over the last dimension on the GPU (see nn/cuda_layers.h). Rows are short (IBRNet's
// ray transformer normalises 16 values), so one warp takes a row, each lane a strided share of
// its columns, and warp shuffles make the sums: 8 rows per 256-thread block, grid-stride over
// rows. Arithmetic in float as the CPU layer does for float: mean, then the biased variance of
// the deviations, rstd = 1 / sqrt(var + eps).
//
// Backward: grad_x = rstd (g - mean(g) - xhat mean(g xhat)), g = grad_y weight, per row as above;
// the parameter gradients are column sums over all rows, made deterministically in two kernels:
// partial sums per block of rows (a column_block), then the partials added in order.
#include <algorithm>
#include <string>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "common.h"

namespace mvibr::nn::cuda {

namespace {

constexpr int kRowsPerBlock = kThreadsPerBlock / kWarpSize;
constexpr int kTargetBlocks = 1024;

void check(size_t rows, int dim) {
  if (dim < 1) {
    throw InvalidArgument("layer norm on the GPU: bad shape (rows " + std::to_string(rows) +
                          ", dim " + std::to_string(dim) + ")");
  }
}

unsigned row_blocks(size_t rows) {
  return blocks_for(rows * kWarpSize, kThreadsPerBlock);
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    layer_norm_forward_kernel(size_t rows, int dim, float eps, const float* weight,
                              const float* bias, const float* x, float* y, float* xhat,
                              float* rstd) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const size_t first_row = size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const size_t row_step = size_t(gridDim.x) * kRowsPerBlock;
  for (size_t row = first_row; row < rows; row += row_step) {
    const float* xi = x + row * size_t(dim);
    float sum = 0.0f;
    for (int c = lane; c < dim; c += kWarpSize) sum += xi[c];
    const float mean = warp_all_sum(sum) / float(dim);
    float squares = 0.0f;
    for (int c = lane; c < dim; c += kWarpSize) {
      const float d = xi[c] - mean;
      squares += d * d;
    }
    const float r = 1.0f / sqrtf(warp_all_sum(squares) / float(dim) + eps);
    if (lane == 0) rstd[row] = r;
    for (int c = lane; c < dim; c += kWarpSize) {
      const float h = (xi[c] - mean) * r;
      xhat[row * size_t(dim) + c] = h;
      y[row * size_t(dim) + c] = h * weight[c] + bias[c];
    }
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    layer_norm_backward_kernel(size_t rows, int dim, const float* weight, const float* xhat,
                               const float* rstd, const float* grad_y, float* grad_x) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const size_t first_row = size_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const size_t row_step = size_t(gridDim.x) * kRowsPerBlock;
  for (size_t row = first_row; row < rows; row += row_step) {
    const size_t base = row * size_t(dim);
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane; c < dim; c += kWarpSize) {
      const float g = grad_y[base + c] * weight[c];
      sum_g += g;
      sum_gx += g * xhat[base + c];
    }
    const float mean_g = warp_all_sum(sum_g) / float(dim);
    const float mean_gx = warp_all_sum(sum_gx) / float(dim);
    const float r = rstd[row];
    for (int c = lane; c < dim; c += kWarpSize) {
      const float g = grad_y[base + c] * weight[c];
      grad_x[base + c] = r * (g - mean_g - xhat[base + c] * mean_gx);
    }
  }
}

// On a column_block: partials[blockIdx.y, c] = sum of grad_y[r, c] xhat[r, c] and
// partials[blockIdx.y, dim + c] = sum of grad_y[r, c] over this block's rows.
__global__ void __launch_bounds__(kColumnBlockThreads)
    layer_norm_parameter_partials_kernel(size_t rows, int dim, const float* xhat,
                                         const float* grad_y, float* partials) {
  __shared__ float weight_sums[kColumnBlockThreads], bias_sums[kColumnBlockThreads];
  const int column = int(blockIdx.x * blockDim.x + threadIdx.x);
  float weight_sum = 0.0f, bias_sum = 0.0f;
  if (column < dim) {
    const size_t step = size_t(gridDim.y) * blockDim.y;
    for (size_t r = size_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
      const size_t i = r * size_t(dim) + size_t(column);
      weight_sum += grad_y[i] * xhat[i];
      bias_sum += grad_y[i];
    }
  }
  const int t = int(threadIdx.y * blockDim.x + threadIdx.x);
  weight_sums[t] = weight_sum;
  bias_sums[t] = bias_sum;
  __syncthreads();
  for (int half = int(blockDim.y) / 2; half > 0; half /= 2) {
    if (int(threadIdx.y) < half) {
      weight_sums[t] += weight_sums[t + half * int(blockDim.x)];
      bias_sums[t] += bias_sums[t + half * int(blockDim.x)];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && column < dim) {
    float* out = partials + size_t(blockIdx.y) * 2 * size_t(dim);
    out[column] = weight_sums[t];
    out[dim + column] = bias_sums[t];
  }
}

__global__ void layer_norm_add_partials_kernel(int dim, int chunks, const float* partials,
                                               float* grad_weight, float* grad_bias) {
  for (size_t c = grid_thread_index(); c < size_t(dim); c += grid_thread_count()) {
    float weight_sum = 0.0f, bias_sum = 0.0f;
    for (int k = 0; k < chunks; ++k) {
      weight_sum += partials[size_t(k) * 2 * dim + c];
      bias_sum += partials[size_t(k) * 2 * dim + dim + c];
    }
    grad_weight[c] += weight_sum;
    grad_bias[c] += bias_sum;
  }
}

}  // namespace

void layer_norm_forward(Context& context, size_t rows, int dim, double eps, const float* weight,
                        const float* bias, const float* x, float* y, float* xhat, float* rstd) {
  check(rows, dim);
  if (rows == 0) return;
  MVIBR_LAUNCH(layer_norm_forward_kernel, row_blocks(rows), kThreadsPerBlock, 0,
               context.impl().stream)
  (rows, dim, float(eps), weight, bias, x, y, xhat, rstd);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(Context& context, size_t rows, int dim, const float* weight,
                         const float* xhat, const float* rstd, const float* grad_y, float* grad_x,
                         float* grad_weight, float* grad_bias) {
  check(rows, dim);
  if (rows == 0) return;
  Context::Impl& c = context.impl();
  const dim3 block = column_block(dim);
  const unsigned column_blocks = (unsigned(dim) + block.x - 1) / block.x;
  const unsigned chunks =
      unsigned(std::min<size_t>((rows + block.y - 1) / block.y,
                                size_t(std::max(1u, unsigned(kTargetBlocks) / column_blocks))));
  float* partials = c.workspace_of<float>(size_t(chunks) * 2 * size_t(dim));
  MVIBR_LAUNCH(layer_norm_parameter_partials_kernel, dim3(column_blocks, chunks), block, 0,
               c.stream)
  (rows, dim, xhat, grad_y, partials);
  MVIBR_CUDA_CHECK_LAUNCH();
  MVIBR_LAUNCH(layer_norm_add_partials_kernel, blocks_for(size_t(dim), kThreadsPerBlock),
               kThreadsPerBlock, 0, c.stream)
  (dim, int(chunks), partials, grad_weight, grad_bias);
  MVIBR_CUDA_CHECK_LAUNCH();
  MVIBR_LAUNCH(layer_norm_backward_kernel, row_blocks(rows), kThreadsPerBlock, 0, c.stream)
  (rows, dim, weight, xhat, rstd, grad_y, grad_x);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
