// The CPU aggregation network's chunk buffers (IbrnetAggregator::Activations): what one chunk of
// rays keeps for the backward and its gradients, carved from one arena; for aggregator.cpp.
#pragma once

#include <cstddef>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/aggregator_layout.h"

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
  Activations(int samples_per_ray, int views, const AggregatorWidths& widths)
      : n_samples(samples_per_ray), n_views(views), width(widths.feature), w(widths) {}

  void set_rays(size_t count) {
    rays = count;
    samples = count * n_samples;
    rows = samples * n_views;
  }

  int n_samples, n_views, width;  // width = 3 + C
  AggregatorWidths w;
  size_t rays = 0, samples = 0, rows = 0;
  MVIBR_AGGREGATOR_STORED(MVIBR_AGGREGATOR_MEMBER)
  MVIBR_AGGREGATOR_DERIVED(MVIBR_AGGREGATOR_MEMBER)
  MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_MEMBER)
  // The CPU's own: the attention's saved state and scratch (attention.cpp), and the direction
  // features' gradient apart from the features'.
  T *attention_saved, *attention_scratch, *g_dir;

#define MVIBR_AGGREGATOR_TAKE(name, per, width) \
  take(name, aggregator_values(AggregatorPer::per, width, rows, samples));

  // Lays the forward's buffers out over `arena` (null: only counts), returns the elements used.
  size_t layout_forward(T* arena, const MultiHeadAttention& attention) {
    Carver<T> take{arena};
    MVIBR_AGGREGATOR_STORED(MVIBR_AGGREGATOR_TAKE)
    take(attention_saved, attention.saved_size(rays, size_t(n_samples)));
    return take.used;
  }

  // The same for the derived activations.
  size_t layout_derived(T* arena) {
    Carver<T> take{arena};
    MVIBR_AGGREGATOR_DERIVED(MVIBR_AGGREGATOR_TAKE)
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
    MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_TAKE)
    take(attention_scratch, attention.scratch_size(rays, size_t(n_samples)));
    take(g_dir, rows * size_t(width));
    return take.used;
  }
#undef MVIBR_AGGREGATOR_TAKE
};

}  // namespace mvibr::nn
