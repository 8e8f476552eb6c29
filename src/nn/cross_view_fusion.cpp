// Cross-view fusion (nn/cross_view_fusion.h): one GEMM per ordered view pair and pass, on cblas.
#include "mvibr/nn/cross_view_fusion.h"

#include <cblas.h>

#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {
namespace {

// C += alpha op(A) op(B), row-major; op(A) [m, k], op(B) [k, n].
void gemm_add(bool transpose_a, bool transpose_b, size_t m, size_t n, size_t k, double alpha,
              const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), float(alpha), a,
              int(transpose_a ? m : k), b, int(transpose_b ? k : n), 1.0f, c, int(n));
}

void gemm_add(bool transpose_a, bool transpose_b, size_t m, size_t n, size_t k, double alpha,
              const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a,
              int(transpose_a ? m : k), b, int(transpose_b ? k : n), 1.0, c, int(n));
}

// out = scale x over n values.
template <typename T>
void scaled_copy(size_t n, double scale, const T* x, T* out) {
  for (size_t i = 0; i < n; ++i) out[i] = T(scale) * x[i];
}

}  // namespace

CrossViewFusion::CrossViewFusion(ParameterBlock& block, int views, int pixels)
    : views_(views), pixels_(pixels), weights_(0) {
  if (views < 2 || pixels < 1) {
    throw InvalidArgument("cross-view fusion of " + std::to_string(views) + " views of " +
                          std::to_string(pixels) +
                          " heatmap pixels: needs at least two views and one pixel");
  }
  for (int k = 0; k < pairs(); ++k) {
    const size_t offset = block.add(std::to_string(k) + ".weight", {pixels, pixels});
    if (k == 0) weights_ = offset;
  }
}

int CrossViewFusion::pair(int target, int source) const {
  return target * (views_ - 1) + (source < target ? source : source - 1);
}

void CrossViewFusion::initialize(float* params, Initializer& init) const {
  // The published uniform_(0, 0.1): Initializer draws symmetric bounds, so U(-0.05, 0.05) + 0.05.
  const size_t count = size_t(pairs()) * size_t(pixels_) * size_t(pixels_);
  float* weights = params + weights_;
  init.uniform(weights, count, 0.05f);
  for (size_t i = 0; i < count; ++i) weights[i] += 0.05f;
}

void CrossViewFusion::check(int views, int rows, int pixels) const {
  if (views != views_ || pixels != pixels_ || rows < 1) {
    throw InvalidArgument("cross-view fusion: heatmaps of " + std::to_string(views) + " views x " +
                          std::to_string(rows) + " rows x " + std::to_string(pixels) +
                          " pixels, the layer fuses " + std::to_string(views_) + " views of " +
                          std::to_string(pixels_) + " pixels (and needs a row)");
  }
}

template <typename T>
void CrossViewFusion::forward(const T* params, int views, int rows, int pixels, const T* heatmaps,
                              T* fused) const {
  check(views, rows, pixels);
  const size_t R = size_t(rows), P = size_t(pixels), map = R * P;
  for (int t = 0; t < views; ++t) {
    T* out = fused + size_t(t) * map;
    scaled_copy(map, kOwnWeight, heatmaps + size_t(t) * map, out);
    for (int s = 0; s < views; ++s) {
      if (s == t) continue;
      const T* weight = params + weight_offset(pair(t, s));
      gemm_add(false, false, R, P, P, other_weight(), heatmaps + size_t(s) * map, weight, out);
    }
  }
}

template <typename T>
void CrossViewFusion::backward(const T* params, T* grads, int views, int rows, int pixels,
                               const T* heatmaps, const T* grad_fused, T* grad_heatmaps) const {
  check(views, rows, pixels);
  const size_t R = size_t(rows), P = size_t(pixels), map = R * P;
  for (int s = 0; s < views; ++s) {
    T* grad_source = grad_heatmaps + size_t(s) * map;
    scaled_copy(map, kOwnWeight, grad_fused + size_t(s) * map, grad_source);
    for (int t = 0; t < views; ++t) {
      if (t == s) continue;
      const size_t weight = weight_offset(pair(t, s));
      const T* grad_target = grad_fused + size_t(t) * map;
      gemm_add(false, true, R, P, P, other_weight(), grad_target, params + weight, grad_source);
      gemm_add(true, false, P, P, R, other_weight(), heatmaps + size_t(s) * map, grad_target,
               grads + weight);
    }
  }
}

template void CrossViewFusion::forward(const float*, int, int, int, const float*, float*) const;
template void CrossViewFusion::forward(const double*, int, int, int, const double*, double*) const;
template void CrossViewFusion::backward(const float*, float*, int, int, int, const float*,
                                        const float*, float*) const;
template void CrossViewFusion::backward(const double*, double*, int, int, int, const double*,
                                        const double*, double*) const;

}  // namespace mvibr::nn
