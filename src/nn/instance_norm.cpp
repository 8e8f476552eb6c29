// Instance norm with the residual add and activation that follow it in IBRNet's ResUNet, forward
// and backward (see conv_layers.h). Fused because every instance norm there is followed by one
// of them: each plane is normalised, added to and activated while it is in cache, instead of
// three trips over the whole map. Statistics and the normalised values are computed in double:
// planes are as small as 2x3 values deep in the encoder, where fp32 would lose the rounding bound
// (the variance subtracts the mean, the backward subtracts two nearly equal projections). The sums
// are OpenMP simd reductions: double lanes added in a fixed order the compiler chooses, the same on
// every run of one build; a strictly serial double sum waited out the adder's latency on every
// value and made these layers cost as much as the convolutions around them.
#include <cmath>
#include <vector>

#include "mvibr/nn/conv_layers.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

struct PlaneStatistics {
  double mean, inverse_std;
};

// Two passes (mean, then squared deviations): exact enough where |mean| >> std.
PlaneStatistics statistics(const float* values, size_t n) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) sum += double(values[i]);
  const double mean = sum / double(n);
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (size_t i = 0; i < n; ++i) {
    const double d = double(values[i]) - mean;
    squares += d * d;
  }
  return {mean, 1.0 / std::sqrt(squares / double(n) + double(kInstanceNormEps))};
}

}  // namespace

void instance_norm_forward(const InstanceNormShape& shape, const float* x, const float* gamma,
                           const float* beta, const float* residual, Activation activation,
                           float* out) {
  const int planes = shape.batch * shape.channels;
  const size_t n = size_t(shape.plane_size);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* values = x + size_t(p) * n;
    const PlaneStatistics s = statistics(values, n);
    const int c = p % shape.channels;
    const double scale = gamma[c] * s.inverse_std, shift = beta[c] - scale * s.mean;
    const float* added = residual ? residual + size_t(p) * n : nullptr;
    float* result = out + size_t(p) * n;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
      const float z = float(scale * double(values[i]) + shift);
      result[i] = added ? z + added[i] : z;
    }
    // The activation in its own pass over the plane (still in cache), so the loop above has no
    // branch on it and vectorises.
    if (activation == Activation::kRelu) {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) result[i] = result[i] > 0.0f ? result[i] : 0.0f;
    } else if (activation == Activation::kElu) {
#pragma omp simd
      for (size_t i = 0; i < n; ++i) result[i] = elu_of(result[i]);
    }
  }
}

void activation_backward(Activation activation, size_t count, const float* out, float* grad) {
  const long long n = static_cast<long long>(count);
  switch (activation) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
#pragma omp parallel for schedule(static)
      for (long long i = 0; i < n; ++i) grad[i] = out[i] > 0.0f ? grad[i] : 0.0f;
      break;
    case Activation::kElu:  // d/dz expm1(z) = exp(z) = out + 1
#pragma omp parallel for schedule(static)
      for (long long i = 0; i < n; ++i) {
        grad[i] = out[i] > 0.0f ? grad[i] : grad[i] * (out[i] + 1.0f);
      }
      break;
  }
}

void instance_norm_backward(const InstanceNormShape& shape, const float* x, const float* gamma,
                            float* grad, float* grad_gamma, float* grad_beta) {
  const int planes = shape.batch * shape.channels;
  const size_t n = size_t(shape.plane_size);
  // Per-plane sums first, so that planes of one channel (different views) never race on the
  // channel's gamma and beta gradients.
  const size_t plane_count = size_t(planes);
  std::vector<double> sum_grad(plane_count), sum_grad_normalised(plane_count);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* values = x + size_t(p) * n;
    const PlaneStatistics s = statistics(values, n);
    float* g = grad + size_t(p) * n;
    double sum = 0, dot = 0;
#pragma omp simd reduction(+ : sum, dot)
    for (size_t i = 0; i < n; ++i) {
      sum += double(g[i]);
      dot += double(g[i]) * ((double(values[i]) - s.mean) * s.inverse_std);
    }
    sum_grad[size_t(p)] = sum;
    sum_grad_normalised[size_t(p)] = dot;
    // dx = gamma rstd (g - mean(g) - x̂ mean(g x̂)): the normalisation's Jacobian.
    const double scale = gamma[p % shape.channels] * s.inverse_std;
    const double mean_grad = sum / double(n), mean_dot = dot / double(n);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
      const double normalised = (double(values[i]) - s.mean) * s.inverse_std;
      g[i] = float(scale * (g[i] - mean_grad - normalised * mean_dot));
    }
  }
  for (int p = 0; p < planes; ++p) {
    grad_gamma[p % shape.channels] += float(sum_grad_normalised[size_t(p)]);
    grad_beta[p % shape.channels] += float(sum_grad[size_t(p)]);
  }
}

}  // namespace mvibr::nn
