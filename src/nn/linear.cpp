// Linear layers on BLAS: the forward is one GEMM with the bias preloaded into the output, the
// backward two GEMMs (input gradient, weight gradient accumulated with beta = 1) and a column
// sum for the bias. cblas_sgemm for training, cblas_dgemm for the double-precision oracle.
#include <cblas.h>

#include <cmath>

#include "mvibr/nn/layers.h"

namespace mvibr::nn {
namespace {

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta,
              c, int(ldc));
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, size_t m, size_t n, size_t k, const double* a,
          size_t lda, const double* b, size_t ldb, double beta, double* c, size_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c,
              int(ldc));
}

}  // namespace

Linear::Linear(ParameterBlock& block, const std::string& name, int in, int out, bool bias)
    : in_(in), out_(out), weight_(block.add(name + ".weight", {out, in})), has_bias_(bias) {
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
void Linear::forward(const T* params, size_t n, const T* x, T* y) const {
  if (n == 0) return;
  if (has_bias_) {
    const T* b = params + bias_;
    for (size_t i = 0; i < n; ++i) {
      for (int o = 0; o < out_; ++o) y[i * out_ + o] = b[o];
    }
  }
  gemm(CblasNoTrans, CblasTrans, n, out_, in_, x, in_, params + weight_, in_,
       has_bias_ ? T(1) : T(0), y, out_);
}

template <typename T>
void Linear::backward(const T* params, T* grads, size_t n, const T* x, const T* grad_y, T* grad_x,
                      bool accumulate) const {
  if (n == 0) return;
  if (grad_x) {
    gemm(CblasNoTrans, CblasNoTrans, n, in_, out_, grad_y, out_, params + weight_, in_,
         accumulate ? T(1) : T(0), grad_x, in_);
  }
  gemm(CblasTrans, CblasNoTrans, out_, in_, n, grad_y, out_, x, in_, T(1), grads + weight_, in_);
  if (has_bias_) {
    T* gb = grads + bias_;
    for (size_t i = 0; i < n; ++i) {
      for (int o = 0; o < out_; ++o) gb[o] += grad_y[i * out_ + o];
    }
  }
}

template void Linear::forward(const float*, size_t, const float*, float*) const;
template void Linear::forward(const double*, size_t, const double*, double*) const;
template void Linear::backward(const float*, float*, size_t, const float*, const float*, float*,
                               bool) const;
template void Linear::backward(const double*, double*, size_t, const double*, const double*,
                               double*, bool) const;

}  // namespace mvibr::nn
