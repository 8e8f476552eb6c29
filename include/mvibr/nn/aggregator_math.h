// The aggregation network's per-sample math over its views, for the CPU network
// (src/nn/aggregator.cpp) and its CUDA kernels (kernels/aggregator_*.cuh) alike.
// - One sample's views are contiguous: mask [V], ray_diff [V, 4], colours every `stride` values.
// - The same operations in the same order on both backends; where a backend has its own exp,
//   the caller passes it.
// - The pooling backward never forms 1 - sum_v w_v by subtraction (float cannot resolve it from
//   1): it uses gap = eps / D, as aggregator.cpp's note says.
#pragma once

#include <cmath>
#include <cstddef>

#include "mvibr/core/hd.h"

namespace mvibr::nn {

// IBRNet's guard against empty sums, and its fill for masked blending logits (-1e9, not -inf: a
// fully masked sample blends uniformly).
constexpr double kWeightEpsilon = 1e-8;
constexpr double kMaskedLogit = -1e9;
// DynIBaR's density where no view sees the sample: -1e9, which softplus takes to 0.
constexpr double kMaskedDensity = -1e9;

MVIBR_HD float exp_of(float x) {
  return expf(x);
}
MVIBR_HD double exp_of(double x) {
  return exp(x);
}

// Pooling weights over views: anti-aliased raw_v = (exp(|s| (d_v - 1)) - min_u exp(|s| (d_u - 1)))
// mask_v, d_v the direction dot product (ray_diff's 4th value), or uniform raw_v = mask_v;
// pool_v = raw_v / D. Returns D = sum_v raw_v + eps.
template <typename T>
MVIBR_HD T pooling_weights(int n_views, bool anti_alias, T sharpness_abs, const T* ray_diff,
                           const T* mask, T* pool) {
  T sum = 0;
  if (anti_alias) {
    T lowest = 0;
    for (int v = 0; v < n_views; ++v) {
      pool[v] = exp_of(sharpness_abs * (ray_diff[v * 4 + 3] - 1));
      if (v == 0 || pool[v] < lowest) lowest = pool[v];
    }
    for (int v = 0; v < n_views; ++v) sum += pool[v] = (pool[v] - lowest) * mask[v];
  } else {
    for (int v = 0; v < n_views; ++v) sum += pool[v] = mask[v];
  }
  const T denominator = sum + T(kWeightEpsilon);
  for (int v = 0; v < n_views; ++v) pool[v] /= denominator;
  return denominator;
}

// The backward of w_v = raw_v / D for view v, given dL/dw_u = g[u] + common:
// dL/draw_v = (sum_u w_u (g_v - g_u) + (g_v + common) gap) / D.
template <typename T, typename G>
MVIBR_HD T normalisation_backward(int n_views, int v, const T* weight, const G* g, T common,
                                  T denominator) {
  const T gap = T(kWeightEpsilon) / denominator;
  const T g_v = T(g[v]);
  T spread = 0;
  for (int u = 0; u < n_views; ++u) spread += weight[u] * (g_v - T(g[u]));
  return (spread + (g_v + common) * gap) / denominator;
}

// The blending softmax over views (masked logits kMaskedLogit), in place in `logits`, and the
// blended colour rgb [3] from the first 3 of each view's colour values. `exp_nonpositive` is
// exp on (-inf, 0].
template <typename T, typename Exp>
MVIBR_HD void blend_views(int n_views, const T* mask, const T* colours, size_t stride, T* logits,
                          T* rgb, Exp exp_nonpositive) {
  T top = 0;
  for (int v = 0; v < n_views; ++v) {
    if (mask[v] == 0) logits[v] = T(kMaskedLogit);
    if (v == 0 || logits[v] > top) top = logits[v];
  }
  for (int v = 0; v < n_views; ++v) logits[v] = exp_nonpositive(logits[v] - top);
  T sum = 0;
  for (int v = 0; v < n_views; ++v) sum += logits[v];
  T colour[3] = {0, 0, 0};
  for (int v = 0; v < n_views; ++v) {
    logits[v] /= sum;
    for (int c = 0; c < 3; ++c) colour[c] += colours[size_t(v) * stride + size_t(c)] * logits[v];
  }
  for (int c = 0; c < 3; ++c) rgb[c] = colour[c];
}

// Its backward: dL/dlogit_v = b_v (g_v - sum_u b_u g_u) with g_v = grad_rgb . colour_v, and none
// into masked logits.
template <typename T>
MVIBR_HD void blend_views_backward(int n_views, const T* mask, const T* colours, size_t stride,
                                   const T* blend, const T* grad_rgb, T* g_logit) {
  T weighted = 0;
  for (int v = 0; v < n_views; ++v) {
    const T* colour = colours + size_t(v) * stride;
    g_logit[v] = grad_rgb[0] * colour[0] + grad_rgb[1] * colour[1] + grad_rgb[2] * colour[2];
    weighted += blend[v] * g_logit[v];
  }
  for (int v = 0; v < n_views; ++v) {
    g_logit[v] = mask[v] == 0 ? T(0) : blend[v] * (g_logit[v] - weighted);
  }
}

// One sample's part of dL/d|s| for the anti-aliased pooling, added to `g_scale` term by term:
// raw_v = (e_v - min_u e_u) mask_v with e_v = exp(|s| (d_v - 1)), pool = raw / D, given the
// pooling weights' incoming gradient g_pool [V] and its common part. In double, the weights
// recomputed in double into the scratch e [V] and weight [V]: the raw weights are nearly
// proportional to |s|, which the normalisation divides out, so the sum cancels to a small
// fraction of its terms.
template <typename T>
MVIBR_HD void add_sharpness_gradient(int n_views, double sharpness_abs, const T* ray_diff,
                                     const T* mask, const T* g_pool, double g_pool_common,
                                     double* e, double* weight, double* g_scale) {
  const auto dot_minus_one = [&](int v) { return double(ray_diff[v * 4 + 3]) - 1; };
  int low = 0;  // the first minimum, as torch.min picks (ties have equal slopes anyway)
  for (int v = 0; v < n_views; ++v) {
    e[v] = exp(sharpness_abs * dot_minus_one(v));
    if (e[v] < e[low]) low = v;
  }
  double sum = 0;
  for (int v = 0; v < n_views; ++v) sum += (e[v] - e[low]) * double(mask[v]);
  const double denominator = sum + kWeightEpsilon;
  for (int v = 0; v < n_views; ++v) weight[v] = (e[v] - e[low]) * double(mask[v]) / denominator;
  const double low_slope = dot_minus_one(low) * e[low];
  for (int v = 0; v < n_views; ++v) {
    if (mask[v] == 0) continue;
    const double g_raw =
        normalisation_backward(n_views, v, weight, g_pool, g_pool_common, denominator);
    *g_scale += g_raw * (dot_minus_one(v) * e[v] - low_slope);
  }
}

}  // namespace mvibr::nn
