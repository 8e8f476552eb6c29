// The CPU aggregation network's chunk buffers (IbrnetAggregator::Activations): what one chunk of
// rays keeps for the backward and its gradients, carved from one arena; for aggregator.cpp.
#pragma once

#include <cstddef>

#include "mvibr/nn/aggregator.h"

namespace mvibr::nn {

// The network's widths (IBRNet's): direction MLP, base MLP, x, the geometry and ray transformer
// tokens, the colour MLP.
constexpr int kDirHidden = 16, kBase = 64, kWidth = 32, kGeometryIn = 2 * kWidth + 1;
constexpr int kGeometry = 64, kToken = 16, kRgbIn = kWidth + 1 + 4, kRgbHidden = 16,
              kRgbHidden2 = 8;

// One chunk's buffers: the forward's activations (post-activation values of every ELU, which is
// all their backward needs) and, for the backward, a gradient for each. Each part is carved from
// one arena, both from the same one when the backward recomputes the forward. The activations
// that are elementwise functions of others and of the inputs (`derived`: the features plus their
// direction, the pooled, residual and weighted x, the colour net's input) are never stored: the
// backward derives them again in the thread's own chunk buffer, which is cheaper than writing
// them to memory and reading them back.
namespace {

// Hands out consecutive spans of an arena (null: only counts what they would take).
template <typename T>
struct Carver {
  T* arena;
  size_t used = 0;
  void operator()(T*& p, size_t count) {
    p = arena ? arena + used : nullptr;
    used += count;
  }
};

}  // namespace

template <typename T>
struct IbrnetAggregator::Activations {
  Activations(int samples_per_ray, int views, int channels)
      : n_samples(samples_per_ray), n_views(views), width(channels) {}

  void set_rays(size_t count) {
    rays = count;
    samples = count * n_samples;
    rows = samples * n_views;
  }

  int n_samples, n_views, width;  // width = 3 + C
  size_t rays = 0, samples = 0, rows = 0;
  // forward, per row
  T *h_dir, *dir, *pool, *h_base, *x_base, *h_vis, *x_vis, *sig_vis, *h_vis2, *vis2, *vis,
      *vis_weight, *h_rgb, *h_rgb2, *blend;
  // derived, per row
  T *feat, *x_pooled, *x, *x_vis_weighted, *rgb_in;
  // forward, per sample
  T *pool_denominator, *mean_var, *h_mean_var, *vis_denominator, *geometry_in, *h_geometry,
      *geometry_out, *tokens, *valid_tokens, *n_valid, *attention_saved, *attention_out, *h_sigma,
      *sigma_relu;
  // backward
  T *g_logit, *g_h_rgb2, *g_h_rgb, *g_rgb_in, *g_sigma, *g_h_sigma, *g_attention_out, *g_tokens,
      *attention_scratch, *g_h_geometry, *g_geometry_in, *g_x, *g_vis, *g_vis_weight,
      *g_x_vis_weighted, *g_h_vis2, *g_vis2, *g_x_vis, *g_h_vis, *g_x_pooled, *g_x_base, *g_pool,
      *g_pool_common, *g_h_base, *g_h_mean_var, *g_mean_var, *g_feat, *g_dir, *g_h_dir;

  // Lays the forward's buffers out over `arena` (null: only counts), returns the elements used.
  size_t layout_forward(T* arena, const MultiHeadAttention& attention) {
    Carver<T> take{arena};
    const size_t n = rows, m = samples, w = size_t(width);
    take(h_dir, n * kDirHidden);
    take(dir, n * w);
    take(pool, n);
    take(h_base, n * kBase);
    take(x_base, n * kWidth);
    take(h_vis, n * kWidth);
    take(x_vis, n * (kWidth + 1));
    take(sig_vis, n);
    take(h_vis2, n * kWidth);
    take(vis2, n);
    take(vis, n);
    take(vis_weight, n);
    take(h_rgb, n * kRgbHidden);
    take(h_rgb2, n * kRgbHidden2);
    take(blend, n);
    take(pool_denominator, m);
    take(mean_var, m * 2 * w);
    take(h_mean_var, m * kBase);
    take(vis_denominator, m);
    take(geometry_in, m * kGeometryIn);
    take(h_geometry, m * kGeometry);
    take(geometry_out, m * kToken);
    take(tokens, m * kToken);
    take(valid_tokens, m);
    take(n_valid, m);
    take(attention_saved, attention.saved_size(rays, size_t(n_samples)));
    take(attention_out, m * kToken);
    take(h_sigma, m * kToken);
    take(sigma_relu, m);
    return take.used;
  }

  // The same for the derived activations.
  size_t layout_derived(T* arena) {
    Carver<T> take{arena};
    const size_t n = rows;
    take(feat, n * size_t(width));
    take(x_pooled, n * kWidth);
    take(x, n * kWidth);
    take(x_vis_weighted, n * kWidth);
    take(rgb_in, n * kRgbIn);
    return take.used;
  }

  // Each derived activation from what it is derived from; the forward calls these as it goes,
  // derive_all once the rest are there. The same code, so the same values either way.
  void add_direction(const T* rgb_features) const {
    for (size_t i = 0; i < rows * size_t(width); ++i) feat[i] = rgb_features[i] + dir[i];
  }
  void pool_x_base() const {
    for (size_t i = 0; i < rows; ++i) {
      for (int c = 0; c < kWidth; ++c) x_pooled[i * kWidth + c] = x_base[i * kWidth + c] * pool[i];
    }
  }
  void add_residual(const T* mask) const {
    for (size_t i = 0; i < rows; ++i) {
      const T* xv = x_vis + i * (kWidth + 1);
      const T first_vis = sig_vis[i] * mask[i];
      for (int c = 0; c < kWidth; ++c) {
        x[i * kWidth + c] = x_base[i * kWidth + c] + xv[c];
        x_vis_weighted[i * kWidth + c] = x[i * kWidth + c] * first_vis;
      }
    }
  }
  void gather_colour_inputs(const T* ray_diff) const {
    for (size_t i = 0; i < rows; ++i) {
      T* in = rgb_in + i * kRgbIn;
      std::copy(x + i * kWidth, x + (i + 1) * kWidth, in);
      in[kWidth] = vis[i];
      std::copy(ray_diff + i * 4, ray_diff + i * 4 + 4, in + kWidth + 1);
    }
  }
  void derive_all(const T* rgb_features, const T* ray_diff, const T* mask) const {
    add_direction(rgb_features);
    pool_x_base();
    add_residual(mask);
    gather_colour_inputs(ray_diff);
  }

  // The same for the backward's gradients.
  size_t layout_backward(T* arena, const MultiHeadAttention& attention) {
    Carver<T> take{arena};
    const size_t n = rows, m = samples, w = size_t(width);
    take(g_logit, n);
    take(g_h_rgb2, n * kRgbHidden2);
    take(g_h_rgb, n * kRgbHidden);
    take(g_rgb_in, n * kRgbIn);
    take(g_sigma, m);
    take(g_h_sigma, m * kToken);
    take(g_attention_out, m * kToken);
    take(g_tokens, m * kToken);
    take(attention_scratch, attention.scratch_size(rays, size_t(n_samples)));
    take(g_h_geometry, m * kGeometry);
    take(g_geometry_in, m * kGeometryIn);
    take(g_x, n * kWidth);
    take(g_vis, n);
    take(g_vis_weight, n);
    take(g_x_vis_weighted, n * kWidth);
    take(g_h_vis2, n * kWidth);
    take(g_vis2, n);
    take(g_x_vis, n * (kWidth + 1));
    take(g_h_vis, n * kWidth);
    take(g_x_pooled, n * kWidth);
    take(g_x_base, n * kWidth);
    take(g_pool, n);
    take(g_pool_common, m);
    take(g_h_base, n * kBase);
    take(g_h_mean_var, m * kBase);
    take(g_mean_var, m * 2 * w);
    take(g_feat, n * w);
    take(g_dir, n * w);
    take(g_h_dir, n * kDirHidden);
    return take.used;
  }
};

}  // namespace mvibr::nn
