// The aggregation network's activations and their gradients, described once: the CPU's chunk
// buffers (src/nn/aggregator_activations.h) and the GPU's arrays (kernels/aggregator.cu) are both
// declared and laid out from these tables.
// - A row is one (ray, sample, view), a sample one (ray, sample); widths are per row or sample.
// - Each backend adds only its own extras: the attention's saved state and scratch, which the
//   two implement differently, and its scratch for the pooling backward.
// - X(name, per, width): per is kPerRow, kPerSample or a width's AggregatorPer; `w` is the
//   network's AggregatorWidths.
#pragma once

#include <cstddef>

namespace mvibr::nn {

// Which network of the family: IBRNet's, or DynIBaR's static or dynamic one (IBRNet's made wider
// and fed with ray geometry or time; nn/aggregator.h says how each differs).
enum class AggregatorVariant { kIbrnet, kDynibarStatic, kDynibarDynamic };

enum class AggregatorPer { kRow, kSample };
constexpr AggregatorPer kPerRow = AggregatorPer::kRow, kPerSample = AggregatorPer::kSample;

// The network's widths (IbrnetAggregator::widths()); 0 where the variant has no such activation.
struct AggregatorWidths {
  int gathered;             // a gathered view's colour and features, 3 + C
  int feature;              // the per-view features pooled over views: gathered, or 2x (static)
  AggregatorPer dir_per;    // ray_dir_fc runs per row, or per sample (the dynamic one's time)
  int dir_in;               // its input, when built (static, dynamic); IBRNet's reads ray_diff
  int dir_hidden;           // ray_dir_fc's hidden layer; its output is `gathered` wide
  int ref_in, ref_feature;  // static: the target ray's embedded Plucker coordinates, ref_feature_fc
  int xyz_embedded;         // static, dynamic: the sample's embedded position
  int base_hidden;          // base_fc's hidden layer
  int x;                    // the per-view state x
  int geometry_in, geometry_hidden, token;  // geometry_fc, the ray transformer's tokens
  int heads, d_k, d_v;                      // the ray transformer's attention
  int point_in, point_hidden, point;        // dynamic: ref_pts_fc on the token and position
  int sigma_hidden;                         // out_geometry_fc's hidden layer
  AggregatorPer colour_per;                 // per row (blending weights) or per sample (colour)
  int rgb_in, rgb_hidden, rgb_hidden2;      // rgb_fc
  int blend, colour;  // rgb_fc's output: a blending logit per row (1), or a colour per sample (3)
};

// Values of an activation of `per` with `width` in a batch of rows and samples.
inline size_t aggregator_values(AggregatorPer per, int width, size_t rows, size_t samples) {
  return (per == AggregatorPer::kRow ? rows : samples) * size_t(width);
}

// What the forward keeps for the backward.
#define MVIBR_AGGREGATOR_STORED(X)             \
  X(h_dir, w.dir_per, w.dir_hidden)            \
  X(dir, w.dir_per, w.gathered)                \
  X(ref_in, kPerSample, w.ref_in)              \
  X(ref_feature, kPerSample, w.ref_feature)    \
  X(xyz_embedded, kPerSample, w.xyz_embedded)  \
  X(pool, kPerRow, 1)                          \
  X(h_base, kPerRow, w.base_hidden)            \
  X(x_base, kPerRow, w.x)                      \
  X(h_vis, kPerRow, w.x)                       \
  X(x_vis, kPerRow, w.x + 1)                   \
  X(sig_vis, kPerRow, 1)                       \
  X(h_vis2, kPerRow, w.x)                      \
  X(vis2, kPerRow, 1)                          \
  X(vis, kPerRow, 1)                           \
  X(vis_weight, kPerRow, 1)                    \
  X(h_rgb, w.colour_per, w.rgb_hidden)         \
  X(h_rgb2, w.colour_per, w.rgb_hidden2)       \
  X(blend, kPerRow, w.blend)                   \
  X(colour, kPerSample, w.colour)              \
  X(pool_denominator, kPerSample, 1)           \
  X(mean_var, kPerSample, 2 * w.feature)       \
  X(h_mean_var, kPerSample, w.base_hidden)     \
  X(vis_denominator, kPerSample, 1)            \
  X(geometry_in, kPerSample, w.geometry_in)    \
  X(h_geometry, kPerSample, w.geometry_hidden) \
  X(geometry_out, kPerSample, w.token)         \
  X(tokens, kPerSample, w.token)               \
  X(valid_tokens, kPerSample, 1)               \
  X(n_valid, kPerSample, 1)                    \
  X(attention_out, kPerSample, w.token)        \
  X(point_in, kPerSample, w.point_in)          \
  X(h_point, kPerSample, w.point_hidden)       \
  X(point, kPerSample, w.point)                \
  X(h_sigma, kPerSample, w.sigma_hidden)       \
  X(sigma_head, kPerSample, 1)

// Elementwise functions of the stored ones and the inputs: ray_dir_fc's input, the features with
// their direction or time term, the pooled, residual and weighted x, the colour net's input. The
// CPU derives them again in the backward (cheaper than a trip through memory); the GPU stores
// them.
#define MVIBR_AGGREGATOR_DERIVED(X) \
  X(dir_in, w.dir_per, w.dir_in)    \
  X(feat, kPerRow, w.feature)       \
  X(x_pooled, kPerRow, w.x)         \
  X(x, kPerRow, w.x)                \
  X(x_vis_weighted, kPerRow, w.x)   \
  X(rgb_in, w.colour_per, w.rgb_in)

// The backward's gradients, g_* of the activation of the same name, in the order it makes them.
#define MVIBR_AGGREGATOR_GRADIENTS(X)            \
  X(g_logit, kPerRow, w.blend)                   \
  X(g_colour, kPerSample, w.colour)              \
  X(g_h_rgb2, w.colour_per, w.rgb_hidden2)       \
  X(g_h_rgb, w.colour_per, w.rgb_hidden)         \
  X(g_rgb_in, w.colour_per, w.rgb_in)            \
  X(g_sigma, kPerSample, 1)                      \
  X(g_h_sigma, kPerSample, w.sigma_hidden)       \
  X(g_point, kPerSample, w.point)                \
  X(g_h_point, kPerSample, w.point_hidden)       \
  X(g_point_in, kPerSample, w.point_in)          \
  X(g_attention_out, kPerSample, w.token)        \
  X(g_tokens, kPerSample, w.token)               \
  X(g_h_geometry, kPerSample, w.geometry_hidden) \
  X(g_geometry_in, kPerSample, w.geometry_in)    \
  X(g_x, kPerRow, w.x)                           \
  X(g_vis, kPerRow, 1)                           \
  X(g_vis_weight, kPerRow, 1)                    \
  X(g_x_vis_weighted, kPerRow, w.x)              \
  X(g_h_vis2, kPerRow, w.x)                      \
  X(g_vis2, kPerRow, 1)                          \
  X(g_x_vis, kPerRow, w.x + 1)                   \
  X(g_h_vis, kPerRow, w.x)                       \
  X(g_x_pooled, kPerRow, w.x)                    \
  X(g_x_base, kPerRow, w.x)                      \
  X(g_pool, kPerRow, 1)                          \
  X(g_pool_common, kPerSample, 1)                \
  X(g_h_base, kPerRow, w.base_hidden)            \
  X(g_h_mean_var, kPerSample, w.base_hidden)     \
  X(g_mean_var, kPerSample, 2 * w.feature)       \
  X(g_feat, kPerRow, w.feature)                  \
  X(g_ref_feature, kPerSample, w.ref_feature)    \
  X(g_h_dir, w.dir_per, w.dir_hidden)

// Declares a table's arrays as members of type T*.
#define MVIBR_AGGREGATOR_MEMBER(name, per, width) T* name;

}  // namespace mvibr::nn
