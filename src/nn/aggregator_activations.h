// The CPU aggregation network's chunk buffers (IbrnetAggregator::Activations): what one chunk of
// rays keeps for the backward and its gradients, carved from one arena; for aggregator.cpp.
#pragma once

#include <cstddef>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/aggregator_layout.h"

namespace mvibr::nn {

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
      : n_samples(samples_per_ray), n_views(views), w(widths) {}

  void set_rays(size_t count) {
    rays = count;
    samples = count * n_samples;
    rows = samples * n_views;
  }
  size_t count(AggregatorPer per) const { return per == kPerRow ? rows : samples; }

  int n_samples, n_views;
  AggregatorWidths w;
  size_t rays = 0, samples = 0, rows = 0;
  MVIBR_AGGREGATOR_STORED(MVIBR_AGGREGATOR_MEMBER)
  MVIBR_AGGREGATOR_DERIVED(MVIBR_AGGREGATOR_MEMBER)
  MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_MEMBER)
  // The CPU's own: the attention's saved state and scratch (attention.cpp), and the direction
  // features' gradient apart from the features'.
  T *attention_saved, *attention_scratch, *g_dir;

#define MVIBR_AGGREGATOR_TAKE(name, per, width) \
  take(name, aggregator_values(per, width, rows, samples));

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

  // The derived activations of the core, from what they are derived from; the forward calls
  // these as it goes, the backward again when the rest were stored. The same code, so the same
  // values either way. (The variant's ends derive theirs in aggregator.cpp.)
  void pool_x_base() const {
    const size_t X = size_t(w.x);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t c = 0; c < X; ++c) x_pooled[i * X + c] = x_base[i * X + c] * pool[i];
    }
  }
  void add_residual(const T* mask) const {
    const size_t X = size_t(w.x);
    for (size_t i = 0; i < rows; ++i) {
      const T* xv = x_vis + i * (X + 1);
      const T first_vis = sig_vis[i] * mask[i];
      for (size_t c = 0; c < X; ++c) {
        x[i * X + c] = x_base[i * X + c] + xv[c];
        x_vis_weighted[i * X + c] = x[i * X + c] * first_vis;
      }
    }
  }

  // The same for the backward's gradients.
  size_t layout_backward(T* arena, const MultiHeadAttention& attention) {
    Carver<T> take{arena};
    MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_TAKE)
    take(attention_scratch, attention.scratch_size(rays, size_t(n_samples)));
    take(g_dir, aggregator_values(w.dir_per, w.gathered, rows, samples));
    return take.used;
  }
#undef MVIBR_AGGREGATOR_TAKE
};

}  // namespace mvibr::nn
