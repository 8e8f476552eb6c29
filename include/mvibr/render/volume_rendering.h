// Compositing the samples of one ray into a pixel (IBRNet's raw2outputs) and its backward.
// Forward: alpha_i = 1 - exp(-sigma_i * delta_i), T_i = prod_{j<i} (1 - alpha_j + 1e-10),
// w_i = alpha_i T_i, rgb = sum w_i c_i (+ 1 - sum w_i on a white background),
// depth = sum w_i z_i, acc = sum w_i.
// Backward in O(S) without division: with G_i = dL/dw_i (all paths),
//   dL/dalpha_i = T_i (G_i - B_i),  B_i = sum_{k>i} G_k alpha_k prod_{i<j<k} (1 - alpha_j + 1e-10)
// and B is a reverse recurrence, B_{i-1} = G_i alpha_i + (1 - alpha_i + 1e-10) B_i.
#pragma once

#include <cmath>

#include "mvibr/core/hd.h"

namespace mvibr {

enum class DeltaMode {
  kUnit,      // delta = 1 for every sample: IBRNet's choice (scale-free across scenes)
  kInterval,  // delta = (z_{i+1} - z_i) |d|, 1e10 after the last sample: NeRF's choice
};

struct CompositeOptions {
  DeltaMode delta_mode = DeltaMode::kUnit;
  bool white_background = false;
};

constexpr double kTransmittanceEpsilon = 1e-10;
constexpr double kLastIntervalLength = 1e10;

template <typename T>
MVIBR_HD T sample_delta(const T* z, int i, int n_samples, T direction_norm, DeltaMode mode) {
  if (mode == DeltaMode::kUnit) return T(1);
  return i + 1 < n_samples ? (z[i + 1] - z[i]) * direction_norm : T(kLastIntervalLength);
}

// One ray. sigma, z: n_samples values; rgb: 3 per sample. Outputs: weights (n_samples),
// rgb_map (3), depth, acc.
template <typename T>
MVIBR_HD void composite_ray(const T* sigma, const T* rgb, const T* z, int n_samples,
                            T direction_norm, CompositeOptions options, T* weights, T* rgb_map,
                            T* depth, T* acc) {
  T transmittance = T(1);
  T r = T(0), g = T(0), b = T(0), d = T(0), a = T(0);
  for (int i = 0; i < n_samples; ++i) {
    const T delta = sample_delta(z, i, n_samples, direction_norm, options.delta_mode);
    const T alpha = T(1) - std::exp(-sigma[i] * delta);
    const T w = alpha * transmittance;
    weights[i] = w;
    r += w * rgb[3 * i];
    g += w * rgb[3 * i + 1];
    b += w * rgb[3 * i + 2];
    d += w * z[i];
    a += w;
    transmittance *= T(1) - alpha + T(kTransmittanceEpsilon);
  }
  const T background = options.white_background ? T(1) - a : T(0);
  rgb_map[0] = r + background;
  rgb_map[1] = g + background;
  rgb_map[2] = b + background;
  *depth = d;
  *acc = a;
}

// dL/dw_i from every output that reads w_i.
template <typename T>
MVIBR_HD T weight_gradient(const T* rgb, const T* z, int i, const T* grad_rgb_map, T grad_depth,
                           T grad_acc, const T* grad_weights, bool white_background) {
  T g = grad_rgb_map[0] * rgb[3 * i] + grad_rgb_map[1] * rgb[3 * i + 1] +
        grad_rgb_map[2] * rgb[3 * i + 2] + grad_depth * z[i] + grad_acc;
  if (white_background) g -= grad_rgb_map[0] + grad_rgb_map[1] + grad_rgb_map[2];
  if (grad_weights) g += grad_weights[i];
  return g;
}

// Backward of composite_ray. grad_weights may be null (no gradient on the weights output).
// grad_sigma doubles as scratch for B during the reverse pass.
template <typename T>
MVIBR_HD void composite_ray_backward(const T* sigma, const T* rgb, const T* z, int n_samples,
                                     T direction_norm, CompositeOptions options,
                                     const T* grad_rgb_map, T grad_depth, T grad_acc,
                                     const T* grad_weights, T* grad_sigma, T* grad_rgb) {
  T suffix = T(0);  // B_i
  for (int i = n_samples - 1; i >= 0; --i) {
    grad_sigma[i] = suffix;
    const T delta = sample_delta(z, i, n_samples, direction_norm, options.delta_mode);
    const T alpha = T(1) - std::exp(-sigma[i] * delta);
    const T g = weight_gradient(rgb, z, i, grad_rgb_map, grad_depth, grad_acc, grad_weights,
                                options.white_background);
    suffix = g * alpha + (T(1) - alpha + T(kTransmittanceEpsilon)) * suffix;
  }
  T transmittance = T(1);
  for (int i = 0; i < n_samples; ++i) {
    const T delta = sample_delta(z, i, n_samples, direction_norm, options.delta_mode);
    const T survival = std::exp(-sigma[i] * delta);
    const T alpha = T(1) - survival;
    const T g = weight_gradient(rgb, z, i, grad_rgb_map, grad_depth, grad_acc, grad_weights,
                                options.white_background);
    const T grad_alpha = transmittance * (g - grad_sigma[i]);
    // d alpha / d sigma = delta exp(-sigma delta); 0 * inf guarded for the 1e10 last interval.
    grad_sigma[i] = survival == T(0) ? T(0) : grad_alpha * delta * survival;
    const T w = alpha * transmittance;
    grad_rgb[3 * i] = w * grad_rgb_map[0];
    grad_rgb[3 * i + 1] = w * grad_rgb_map[1];
    grad_rgb[3 * i + 2] = w * grad_rgb_map[2];
    transmittance *= T(1) - alpha + T(kTransmittanceEpsilon);
  }
}

// IBRNet's ray mask: a sample counts when at least min_views source views see it, a ray is
// trained on when more than min_samples - 1 of its samples count. mask: n_samples x n_views.
template <typename T>
MVIBR_HD T ray_validity(const T* mask, int n_samples, int n_views, int min_views, int min_samples) {
  int counted = 0;
  for (int s = 0; s < n_samples; ++s) {
    int seen = 0;
    for (int v = 0; v < n_views; ++v) seen += mask[s * n_views + v] > T(0) ? 1 : 0;
    counted += seen >= min_views ? 1 : 0;
  }
  return counted >= min_samples ? T(1) : T(0);
}

}  // namespace mvibr
