// The aggregation network's activations and their gradients, described once: the CPU's chunk
// buffers (src/nn/aggregator_activations.h) and the GPU's arrays (kernels/aggregator.cu) are both
// declared and laid out from these tables.
// - A row is one (ray, sample, view), a sample one (ray, sample); widths are per row or sample.
// - Each backend adds only its own extras: the attention's saved state and scratch, which the
//   two implement differently, and its scratch for the pooling backward.
// - X(name, kRow | kSample, width): `w` is the network's AggregatorWidths.
#pragma once

#include <cstddef>

namespace mvibr::nn {

// The network's widths (IBRNet's; IbrnetAggregator::widths() reads them from its layers).
struct AggregatorWidths {
  int feature;                              // a view's colour and features, 3 + C
  int dir_hidden;                           // ray_dir_fc's hidden layer
  int base_hidden;                          // base_fc's hidden layer
  int x;                                    // the per-view state x
  int geometry_in, geometry_hidden, token;  // geometry_fc, the ray transformer's tokens
  int heads, d_k, d_v;                      // the ray transformer's attention
  int sigma_hidden;                         // out_geometry_fc's hidden layer
  int rgb_in, rgb_hidden, rgb_hidden2;      // rgb_fc
};

enum class AggregatorPer { kRow, kSample };

// Values of an activation of `per` with `width` in a batch of rows and samples.
inline size_t aggregator_values(AggregatorPer per, int width, size_t rows, size_t samples) {
  return (per == AggregatorPer::kRow ? rows : samples) * size_t(width);
}

// What the forward keeps for the backward.
#define MVIBR_AGGREGATOR_STORED(X)          \
  X(h_dir, kRow, w.dir_hidden)              \
  X(dir, kRow, w.feature)                   \
  X(pool, kRow, 1)                          \
  X(h_base, kRow, w.base_hidden)            \
  X(x_base, kRow, w.x)                      \
  X(h_vis, kRow, w.x)                       \
  X(x_vis, kRow, w.x + 1)                   \
  X(sig_vis, kRow, 1)                       \
  X(h_vis2, kRow, w.x)                      \
  X(vis2, kRow, 1)                          \
  X(vis, kRow, 1)                           \
  X(vis_weight, kRow, 1)                    \
  X(h_rgb, kRow, w.rgb_hidden)              \
  X(h_rgb2, kRow, w.rgb_hidden2)            \
  X(blend, kRow, 1)                         \
  X(pool_denominator, kSample, 1)           \
  X(mean_var, kSample, 2 * w.feature)       \
  X(h_mean_var, kSample, w.base_hidden)     \
  X(vis_denominator, kSample, 1)            \
  X(geometry_in, kSample, w.geometry_in)    \
  X(h_geometry, kSample, w.geometry_hidden) \
  X(geometry_out, kSample, w.token)         \
  X(tokens, kSample, w.token)               \
  X(valid_tokens, kSample, 1)               \
  X(n_valid, kSample, 1)                    \
  X(attention_out, kSample, w.token)        \
  X(h_sigma, kSample, w.sigma_hidden)       \
  X(sigma_relu, kSample, 1)

// Elementwise functions of the stored ones and the inputs: the features plus their direction,
// the pooled, residual and weighted x, the colour net's input. The CPU derives them again in the
// backward (cheaper than a trip through memory); the GPU stores them.
#define MVIBR_AGGREGATOR_DERIVED(X) \
  X(feat, kRow, w.feature)          \
  X(x_pooled, kRow, w.x)            \
  X(x, kRow, w.x)                   \
  X(x_vis_weighted, kRow, w.x)      \
  X(rgb_in, kRow, w.rgb_in)

// The backward's gradients, g_* of the activation of the same name, in the order it makes them.
#define MVIBR_AGGREGATOR_GRADIENTS(X)         \
  X(g_logit, kRow, 1)                         \
  X(g_h_rgb2, kRow, w.rgb_hidden2)            \
  X(g_h_rgb, kRow, w.rgb_hidden)              \
  X(g_rgb_in, kRow, w.rgb_in)                 \
  X(g_sigma, kSample, 1)                      \
  X(g_h_sigma, kSample, w.sigma_hidden)       \
  X(g_attention_out, kSample, w.token)        \
  X(g_tokens, kSample, w.token)               \
  X(g_h_geometry, kSample, w.geometry_hidden) \
  X(g_geometry_in, kSample, w.geometry_in)    \
  X(g_x, kRow, w.x)                           \
  X(g_vis, kRow, 1)                           \
  X(g_vis_weight, kRow, 1)                    \
  X(g_x_vis_weighted, kRow, w.x)              \
  X(g_h_vis2, kRow, w.x)                      \
  X(g_vis2, kRow, 1)                          \
  X(g_x_vis, kRow, w.x + 1)                   \
  X(g_h_vis, kRow, w.x)                       \
  X(g_x_pooled, kRow, w.x)                    \
  X(g_x_base, kRow, w.x)                      \
  X(g_pool, kRow, 1)                          \
  X(g_pool_common, kSample, 1)                \
  X(g_h_base, kRow, w.base_hidden)            \
  X(g_h_mean_var, kSample, w.base_hidden)     \
  X(g_mean_var, kSample, 2 * w.feature)       \
  X(g_feat, kRow, w.feature)                  \
  X(g_h_dir, kRow, w.dir_hidden)

// Declares a table's arrays as members of type T*.
#define MVIBR_AGGREGATOR_MEMBER(name, per, width) T* name;

}  // namespace mvibr::nn
