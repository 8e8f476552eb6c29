// Linear layers: the forward is one GEMM, then one pass over its output for the bias and the
// activation (the output is still in cache, and the caller saves a pass of its own); the
// backward two GEMMs (input gradient, weight gradient accumulated) and a column sum for the bias.
// Float runs on small_gemm (a fixed summation order, the same for a row in any chunk), double,
// the oracle's precision, on cblas_dgemm; bf16 operands on bf16_gemm in both.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "bf16_gemm.h"
#include "mvibr/nn/layers.h"
#include "small_gemm.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

void gemm(Operands operands, GemmForm form, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (operands == Operands::kBf16) {
    bf16_gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  } else {
    small_gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
}

void gemm(Operands operands, GemmForm form, size_t m, size_t n, size_t k, const double* a,
          size_t lda, const double* b, size_t ldb, bool accumulate, double* c, size_t ldc) {
  if (operands == Operands::kBf16) {
    bf16_gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
    return;
  }
  cblas_dgemm(CblasRowMajor, form == GemmForm::kTN ? CblasTrans : CblasNoTrans,
              form == GemmForm::kNT ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0, a,
              int(lda), b, int(ldb), accumulate ? 1.0 : 0.0, c, int(ldc));
}

// The backward's products for the input columns [first, first + count) of a layer [out, in], x
// [n, count]: grad_x (nullable; added to when `accumulate`) = grad_y W[:, first:first + count],
// and grad_w (that part of the weight's gradient) += grad_y^T x. With bf16 operands in float,
// grad_y, which both read, is rounded once.
template <typename T>
void backward_products(Operands operands, size_t n, int out, int in, int first, int count,
                       const T* w, const T* x, const T* grad_y, T* grad_x, bool accumulate,
                       T* grad_w) {
  if constexpr (std::is_same_v<T, float>) {
    if (operands == Operands::kBf16) {
      const size_t o = size_t(out), c = size_t(count);
      uint16_t* g16 = bf16_buffer(Bf16Buffer::kShared, n * o);
      round_rows_to_bf16(n, o, grad_y, o, g16);
      if (grad_x) {
        const uint16_t* w16 = bf16_weights(GemmForm::kNN, c, o, w + first, size_t(in));
        bf16_gemm(GemmForm::kNN, n, c, o, g16, w16, accumulate, grad_x, c);
      }
      uint16_t* x16 = bf16_buffer(Bf16Buffer::kA, n * c);
      round_rows_to_bf16(n, c, x, c, x16);
      bf16_gemm(GemmForm::kTN, o, c, n, g16, x16, true, grad_w + first, size_t(in));
      return;
    }
  }
  if (grad_x) {
    gemm(operands, GemmForm::kNN, n, count, out, grad_y, out, w + first, in, accumulate, grad_x,
         count);
  }
  gemm(operands, GemmForm::kTN, out, count, n, grad_y, out, x, count, true, grad_w + first, in);
}

// sums[o] += sum_i y[i, o], in row order.
template <typename T>
void add_column_sums(size_t n, int out, const T* y, T* sums) {
  for (size_t i = 0; i < n; ++i) {
    for (int o = 0; o < out; ++o) sums[o] += y[i * out + o];
  }
}

}  // namespace

Linear::Linear(ParameterBlock& block, const std::string& name, int in, int out, bool bias,
               Operands operands)
    : in_(in),
      out_(out),
      weight_(block.add(name + ".weight", {out, in})),
      has_bias_(bias),
      operands_(operands) {
  bias_ = bias ? block.add(name + ".bias", {out}) : 0;
}

void Linear::init_default(float* params, Initializer& init) const {
  const float bound = float(1.0 / std::sqrt(double(in_)));
  init.uniform(params + weight_, size_t(out_) * in_, bound);
  if (has_bias_) init.uniform(params + bias_, size_t(out_), bound);
}

void Linear::init_kaiming(float* params, Initializer& init) const {
  init.kaiming_normal(params + weight_, size_t(out_) * in_, in_);
  if (has_bias_) init.constant(params + bias_, size_t(out_), 0.0f);
}

template <typename T>
void Linear::forward(const T* params, size_t n, const T* x, T* y, Activation activation) const {
  if (n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (operands_ == Operands::kBf16) {  // the bias and the activation in oneDNN's pass
      bf16_gemm(GemmForm::kNT, n, size_t(out_), size_t(in_), x, size_t(in_), params + weight_,
                size_t(in_), false, y, size_t(out_),
                {has_bias_ ? params + bias_ : nullptr, activation});
      return;
    }
  }
  gemm(operands_, GemmForm::kNT, n, out_, in_, x, in_, params + weight_, in_, false, y, out_);
  const T* b = has_bias_ ? params + bias_ : nullptr;
  const size_t out = size_t(out_);
  // In blocks of rows that stay in L1 between the bias and the activation, which then runs over
  // the block as one flat array: full vectors whatever the layer's width (some are 1 wide).
  constexpr size_t kBlock = 2048;
  const size_t rows_per_block = std::max<size_t>(1, kBlock / out);
  for (size_t first = 0; first < n; first += rows_per_block) {
    const size_t rows = std::min(rows_per_block, n - first);
    T* block = y + first * out;
    if (b) {
      for (size_t i = 0; i < rows; ++i) {
        for (size_t o = 0; o < out; ++o) block[i * out + o] += b[o];
      }
    }
    if (activation == Activation::kElu) {
      for (size_t i = 0; i < rows * out; ++i) block[i] = elu_of(block[i]);
    } else if (activation == Activation::kRelu) {
      for (size_t i = 0; i < rows * out; ++i) block[i] = block[i] > 0 ? block[i] : T(0);
    }
  }
}

template <typename T>
void Linear::backward(const T* params, T* grads, size_t n, const T* x, const T* grad_y, T* grad_x,
                      bool accumulate) const {
  if (n == 0) return;
  backward_products(operands_, n, out_, in_, 0, in_, params + weight_, x, grad_y, grad_x,
                    accumulate, grads + weight_);
  if (has_bias_) add_column_sums(n, out_, grad_y, grads + bias_);
}

template <typename T>
void Linear::forward_slice(const T* params, size_t n, int first, int count, bool with_bias,
                           const T* x, T* y) const {
  if (n == 0) return;
  gemm(operands_, GemmForm::kNT, n, out_, count, x, count, params + weight_ + first, in_, false, y,
       out_);
  if (!with_bias || !has_bias_) return;
  const T* b = params + bias_;
  for (size_t i = 0; i < n; ++i) {
    for (int o = 0; o < out_; ++o) y[i * out_ + o] += b[o];
  }
}

template <typename T>
void Linear::backward_slice(const T* params, T* grads, size_t n, int first, int count,
                            bool with_bias, const T* x, const T* grad_y, T* grad_x) const {
  if (n == 0) return;
  backward_products(operands_, n, out_, in_, first, count, params + weight_, x, grad_y, grad_x,
                    false, grads + weight_);
  if (with_bias && has_bias_) add_column_sums(n, out_, grad_y, grads + bias_);
}

#define MVIBR_LINEAR(T)                                                                          \
  template void Linear::forward(const T*, size_t, const T*, T*, Activation) const;               \
  template void Linear::backward(const T*, T*, size_t, const T*, const T*, T*, bool) const;      \
  template void Linear::forward_slice(const T*, size_t, int, int, bool, const T*, T*) const;     \
  template void Linear::backward_slice(const T*, T*, size_t, int, int, bool, const T*, const T*, \
                                       T*) const;
MVIBR_LINEAR(float)
MVIBR_LINEAR(double)
#undef MVIBR_LINEAR

}  // namespace mvibr::nn
