// LayerNorm over the last dimension. Rows are short (IBRNet's is 16 wide), so one pass per row
// with the mean and biased variance in T; the backward uses the saved xhat and rstd:
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = grad_y * weight.
#include <cmath>

#include "mvibr/nn/layers.h"
#include "parallel.h"

namespace mvibr::nn {

LayerNorm::LayerNorm(ParameterBlock& block, const std::string& name, int dim, double eps)
    : dim_(dim),
      eps_(eps),
      weight_(block.add(name + ".weight", {dim})),
      bias_(block.add(name + ".bias", {dim})) {}

void LayerNorm::init(float* params) const {
  for (int i = 0; i < dim_; ++i) {
    params[weight_ + i] = 1.0f;
    params[bias_ + i] = 0.0f;
  }
}

template <typename T>
void LayerNorm::forward(const T* params, size_t n, const T* x, T* y, T* xhat, T* rstd) const {
  const T* weight = params + weight_;
  const T* bias = params + bias_;
  const int d = dim_;
#pragma omp parallel for schedule(static) if (worth_parallel(n * d))
  for (size_t i = 0; i < n; ++i) {
    const T* xi = x + i * d;
    T mean = 0, var = 0;
    for (int c = 0; c < d; ++c) mean += xi[c];
    mean /= T(d);
    for (int c = 0; c < d; ++c) var += (xi[c] - mean) * (xi[c] - mean);
    var /= T(d);
    const T r = T(1) / std::sqrt(var + T(eps_));
    rstd[i] = r;
    for (int c = 0; c < d; ++c) {
      const T h = (xi[c] - mean) * r;
      xhat[i * d + c] = h;
      y[i * d + c] = h * weight[c] + bias[c];
    }
  }
}

template <typename T>
void LayerNorm::backward(const T* params, T* grads, size_t n, const T* xhat, const T* rstd,
                         const T* grad_y, T* grad_x) const {
  const T* weight = params + weight_;
  T* grad_weight = grads + weight_;
  T* grad_bias = grads + bias_;
  const int d = dim_;
  // Parameter gradients: one pass in row order, so the sums do not depend on threads.
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      grad_weight[c] += grad_y[i * d + c] * xhat[i * d + c];
      grad_bias[c] += grad_y[i * d + c];
    }
  }
#pragma omp parallel for schedule(static) if (worth_parallel(n * d))
  for (size_t i = 0; i < n; ++i) {
    T mean_g = 0, mean_gx = 0;
    for (int c = 0; c < d; ++c) {
      const T g = grad_y[i * d + c] * weight[c];
      mean_g += g;
      mean_gx += g * xhat[i * d + c];
    }
    mean_g /= T(d);
    mean_gx /= T(d);
    for (int c = 0; c < d; ++c) {
      const T g = grad_y[i * d + c] * weight[c];
      grad_x[i * d + c] = rstd[i] * (g - mean_g - xhat[i * d + c] * mean_gx);
    }
  }
}

template void LayerNorm::forward(const float*, size_t, const float*, float*, float*, float*) const;
template void LayerNorm::forward(const double*, size_t, const double*, double*, double*,
                                 double*) const;
template void LayerNorm::backward(const float*, float*, size_t, const float*, const float*,
                                  const float*, float*) const;
template void LayerNorm::backward(const double*, double*, size_t, const double*, const double*,
                                  const double*, double*) const;

}  // namespace mvibr::nn
