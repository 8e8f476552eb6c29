// Linear layers on cuBLAS (see nn/cuda_layers.h), with the bias and the activation fused into one
// element-wise pass after the forward GEMM, and the activation's backward fused with the bias
// gradient's column sums before the backward GEMMs.
//
// cuBLAS is column-major; a row-major matrix M [r, c] with row stride ld is, to cuBLAS, the
// column-major M^T [c, r] with leading dimension ld. So with x [rows, in] (ld in), W [out, in]
// (ld stride), y and grad [rows, out] (ld out):
//   forward      y^T [out, rows]     = op_T(W^T) x^T       Sgemm(T, N, out, rows, in)
//   grad input   grad_x^T [in, rows] = W^T grad^T          Sgemm(N, N, in, rows, out)
//   grad weight  grad_W^T [in, out] += x^T op_T(grad^T)    Sgemm(N, T, in, out, rows), beta 1
// where W^T, x^T, grad^T are the buffers as cuBLAS sees them. In the 16-bit GEMM precisions
// (Context::set_gemm_precision) the same products run as cublasGemmEx on fp32 data with a
// FAST_16BF / FAST_16F compute type.
#include <algorithm>
#include <climits>
#include <string>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "common.h"

namespace mvibr::nn::cuda {

namespace {

// Row chunks of the bias gradient's partial sums (blocks along y) aim at this many blocks.
constexpr int kTargetBlocks = 1024;

void check_shape(const LinearShape& s) {
  if (s.in < 1 || s.out < 1 || s.stride() < s.in || s.rows > size_t(INT_MAX)) {
    throw InvalidArgument("linear layer on the GPU: bad shape (rows " + std::to_string(s.rows) +
                          ", in " + std::to_string(s.in) + ", out " + std::to_string(s.out) +
                          ", weight stride " + std::to_string(s.stride()) + ")");
  }
}

// y = act(y + bias[column]) over the GEMM's output, one element a thread.
__global__ void bias_activation_kernel(size_t count, int out, const float* bias,
                                       Activation activation, float* y) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    float z = y[i];
    if (bias) z = __fadd_rn(z, bias[i % size_t(out)]);
    y[i] = activate(activation, z);
  }
}

// On a column_block: grad[r, c] = act'(y[r, c]) grad[r, c] (when there is an activation), and the
// partial column sums of the result: partials[blockIdx.y, c] = sum over this block's rows (r =
// blockIdx.y * blockDim.y + threadIdx.y + k * gridDim.y * blockDim.y), each thread summing its rows
// in order, then a tree over the row lanes in shared memory. Partials null: no sums.
__global__ void __launch_bounds__(kColumnBlockThreads)
    activation_bias_backward_kernel(size_t rows, int out, Activation activation, const float* y,
                                    float* grad, float* partials) {
  __shared__ float sums[kColumnBlockThreads];
  const int column = int(blockIdx.x * blockDim.x + threadIdx.x);
  float sum = 0.0f;
  if (column < out) {
    const size_t step = size_t(gridDim.y) * blockDim.y;
    for (size_t r = size_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += step) {
      const size_t i = r * size_t(out) + size_t(column);
      float g = grad[i];
      if (activation != Activation::kNone) {
        g = activation_gradient(activation, y[i], g);
        grad[i] = g;
      }
      sum += g;
    }
  }
  if (!partials) return;  // the same for the whole block: no barrier is skipped by some threads
  const int t = int(threadIdx.y * blockDim.x + threadIdx.x);
  sums[t] = sum;
  __syncthreads();
  for (int half = int(blockDim.y) / 2; half > 0; half /= 2) {
    if (int(threadIdx.y) < half) sums[t] += sums[t + half * int(blockDim.x)];
    __syncthreads();
  }
  if (threadIdx.y == 0 && column < out) partials[size_t(blockIdx.y) * out + column] = sums[t];
}

// target[c] += sum over chunks k of partials[k, c], in order of k.
__global__ void add_partial_sums_kernel(int out, int chunks, const float* partials, float* target) {
  for (size_t c = grid_thread_index(); c < size_t(out); c += grid_thread_count()) {
    float sum = 0.0f;
    for (int k = 0; k < chunks; ++k) sum += partials[size_t(k) * out + c];
    target[c] += sum;
  }
}

// C = alpha op(A) op(B) + beta C (column-major, as cublasSgemm) in the context's GEMM precision:
// fp32 throughout, or fp32 data with inputs rounded to bf16/fp16 on tensor cores and fp32 sums.
void gemm(const Context::Impl& c, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n,
          int k, const float* a, int lda, const float* b, int ldb, const float* beta, float* out,
          int ld_out) {
  const float one = 1.0f;
  if (c.gemm_precision == GemmPrecision::kFp32) {
    MVIBR_CUBLAS_CHECK(
        cublasSgemm(c.cublas, op_a, op_b, m, n, k, &one, a, lda, b, ldb, beta, out, ld_out));
    return;
  }
  const cublasComputeType_t compute = c.gemm_precision == GemmPrecision::kBf16
                                          ? CUBLAS_COMPUTE_32F_FAST_16BF
                                          : CUBLAS_COMPUTE_32F_FAST_16F;
  MVIBR_CUBLAS_CHECK(cublasGemmEx(c.cublas, op_a, op_b, m, n, k, &one, a, CUDA_R_32F, lda, b,
                                  CUDA_R_32F, ldb, beta, out, CUDA_R_32F, ld_out, compute,
                                  CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void linear_forward(Context& context, const LinearShape& shape, const float* x, const float* weight,
                    const float* bias, Activation activation, float* y) {
  check_shape(shape);
  if (shape.rows == 0) return;
  Context::Impl& c = context.impl();
  const float zero = 0.0f;
  gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, shape.out, int(shape.rows), shape.in, weight, shape.stride(), x,
       shape.in, &zero, y, shape.out);
  if (!bias && activation == Activation::kNone) return;
  const size_t count = shape.rows * size_t(shape.out);
  MVIBR_LAUNCH(bias_activation_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0,
               c.stream)
  (count, shape.out, bias, activation, y);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void linear_backward(Context& context, const LinearShape& shape, Activation activation,
                     const float* y, float* grad_y, const float* x, const float* weight,
                     float* grad_x, bool accumulate_grad_x, float* grad_weight, float* grad_bias) {
  check_shape(shape);
  if (shape.rows == 0) return;
  Context::Impl& c = context.impl();
  if (activation != Activation::kNone || grad_bias) {
    const dim3 block = column_block(shape.out);
    const unsigned column_blocks = (unsigned(shape.out) + block.x - 1) / block.x;
    const size_t row_chunks_needed = (shape.rows + block.y - 1) / block.y;
    const unsigned chunks = unsigned(std::min<size_t>(
        row_chunks_needed, size_t(std::max(1u, unsigned(kTargetBlocks) / column_blocks))));
    float* partials =
        grad_bias ? c.workspace_of<float>(size_t(chunks) * size_t(shape.out)) : nullptr;
    MVIBR_LAUNCH(activation_bias_backward_kernel, dim3(column_blocks, chunks), block, 0, c.stream)
    (shape.rows, shape.out, activation, y, grad_y, partials);
    MVIBR_CUDA_CHECK_LAUNCH();
    if (grad_bias) {
      MVIBR_LAUNCH(add_partial_sums_kernel, blocks_for(size_t(shape.out), kThreadsPerBlock),
                   kThreadsPerBlock, 0, c.stream)
      (shape.out, int(chunks), partials, grad_bias);
      MVIBR_CUDA_CHECK_LAUNCH();
    }
  }
  const float one = 1.0f, zero = 0.0f;
  if (grad_x) {
    gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, shape.in, int(shape.rows), shape.out, weight, shape.stride(),
         grad_y, shape.out, accumulate_grad_x ? &one : &zero, grad_x, shape.in);
  }
  gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, shape.in, shape.out, int(shape.rows), x, shape.in, grad_y,
       shape.out, &one, grad_weight, shape.stride());
}

}  // namespace mvibr::nn::cuda
