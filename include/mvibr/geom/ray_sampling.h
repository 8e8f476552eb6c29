// Depths along a ray: the coarse stratified samples and the importance samples drawn from the
// coarse weights, exactly as IBRNet's sample_along_camera_ray and sample_pdf define them.
// No gradient flows through depths: sample positions are not parameters, and IBRNet detaches
// the coarse weights before importance sampling ("decouple the coarse and fine networks").
#pragma once

#include <cstdint>

#include "mvibr/core/hd.h"
#include "mvibr/core/philox.h"

namespace mvibr {

// Largest n_samples + n_importance a ray may have: per-ray scratch lives in registers/local
// memory on the GPU.
constexpr int kMaxSamplesPerRay = 512;

// Depth i of n evenly spaced samples in [near, far], in depth or in inverse depth.
// A single sample sits at near (torch.linspace's convention).
template <typename T>
MVIBR_HD T evenly_spaced_depth(int i, int n, T near_depth, T far_depth, bool inv_uniform) {
  if (n == 1) return near_depth;
  const T fraction = T(i) / T(n - 1);
  if (inv_uniform) {
    const T start = T(1) / near_depth;
    return T(1) / (start + (T(1) / far_depth - start) * fraction);
  }
  return near_depth + (far_depth - near_depth) * fraction;
}

// Coarse depth i: stratified within [mid(i-1, i), mid(i, i+1)] (the end samples keep their
// outer half-interval closed at the sample itself) with jitter u in [0, 1), or the evenly
// spaced depth when deterministic. Jitter is in depth even when spacing is in inverse depth.
template <typename T>
MVIBR_HD T coarse_depth(int i, int n, T near_depth, T far_depth, bool inv_uniform,
                        bool deterministic, T u) {
  const T z = evenly_spaced_depth(i, n, near_depth, far_depth, inv_uniform);
  if (deterministic) return z;
  const T lower =
      i > 0 ? T(0.5) * (evenly_spaced_depth(i - 1, n, near_depth, far_depth, inv_uniform) + z) : z;
  const T upper =
      i < n - 1 ? T(0.5) * (z + evenly_spaced_depth(i + 1, n, near_depth, far_depth, inv_uniform))
                : z;
  return lower + (upper - lower) * u;
}

// The pdf bins of importance sampling: the n_coarse - 1 midpoints between coarse depths
// (in inverse depth, reversed so they increase, when inv_uniform) and the weights of the
// n_coarse - 2 interior samples between them.
template <typename T>
MVIBR_HD T importance_bin_edge(const T* z, int n_coarse, int k, bool inv_uniform) {
  if (inv_uniform) {
    const int i = n_coarse - 2 - k;
    return T(0.5) * (T(1) / z[i] + T(1) / z[i + 1]);
  }
  return T(0.5) * (z[k] + z[k + 1]);
}

template <typename T>
MVIBR_HD T importance_bin_weight(const T* w, int n_coarse, int k, bool inv_uniform) {
  // 1e-5 keeps empty rays sampleable (IBRNet's `weights += 1e-5`).
  return (inv_uniform ? w[n_coarse - 2 - k] : w[k + 1]) + T(1e-5);
}

// Inverse-CDF sample at u of the piecewise-constant pdf over the bins, in depth.
// cdf[j] is the cumulated pdf before bin j; the search mirrors sample_pdf's
// `above = #{j < M : u >= cdf[j]}` (M bins).
template <typename T>
MVIBR_HD T invert_importance_cdf(const T* z, int n_coarse, bool inv_uniform, const T* cdf, T u) {
  const int n_bins = n_coarse - 2;
  int above = 0;
  while (above < n_bins && u >= cdf[above]) ++above;
  const int below = above > 0 ? above - 1 : 0;
  T denom = cdf[above] - cdf[below];
  if (denom < T(1e-5)) denom = T(1);
  const T t = (u - cdf[below]) / denom;
  const T edge_below = importance_bin_edge(z, n_coarse, below, inv_uniform);
  const T edge_above = importance_bin_edge(z, n_coarse, above, inv_uniform);
  const T sample = edge_below + t * (edge_above - edge_below);
  return inv_uniform ? T(1) / sample : sample;
}

// One ray's fine depths: n_importance samples from the coarse weights, merged with the
// (sorted) coarse depths into `merged` (n_coarse + n_importance, ascending). `cdf` is scratch
// of n_coarse - 1 values. `u_of(j)` gives the uniform number of importance sample j.
template <typename T, typename UniformFn>
MVIBR_HD void importance_sample_ray(const T* z, const T* w, int n_coarse, int n_importance,
                                    bool inv_uniform, UniformFn u_of, T* cdf, T* merged) {
  const int n_bins = n_coarse - 2;
  T total = T(0);
  for (int k = 0; k < n_bins; ++k) total += importance_bin_weight(w, n_coarse, k, inv_uniform);
  cdf[0] = T(0);
  T running = T(0);
  for (int k = 0; k < n_bins; ++k) {
    running += importance_bin_weight(w, n_coarse, k, inv_uniform) / total;
    cdf[k + 1] = running;
  }
  // Importance samples go to the front of `merged`, sorted by insertion ...
  for (int j = 0; j < n_importance; ++j) {
    const T depth = invert_importance_cdf(z, n_coarse, inv_uniform, cdf, u_of(j));
    int slot = j;
    while (slot > 0 && merged[slot - 1] > depth) {
      merged[slot] = merged[slot - 1];
      --slot;
    }
    merged[slot] = depth;
  }
  // ... then the coarse depths are merged in from the back, never overwriting an unread one.
  int i = n_coarse - 1, j = n_importance - 1;
  for (int out = n_coarse + n_importance - 1; i >= 0; --out) {
    if (j >= 0 && merged[j] > z[i]) {
      merged[out] = merged[j--];
    } else {
      merged[out] = z[i--];
    }
  }
}

// The uniform numbers of one ray, deterministic (linspace(0, 1, n)) or from Philox.
template <typename T>
struct ImportanceUniforms {
  RandomKey key;
  uint32_t ray;
  int n;
  bool deterministic;

  MVIBR_HD T operator()(int j) const {
    if (deterministic) return n == 1 ? T(0) : T(j) / T(n - 1);
    return T(philox_uniform(key, RandomStream::kImportanceSampling, ray, uint32_t(j)));
  }
};

}  // namespace mvibr
