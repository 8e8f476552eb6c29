// The aggregation networks (IBRNet's, DynIBaR's static and dynamic) on the GPU
// (nn/cuda_aggregator.h): the dense layers as cuBLAS GEMMs over every row of the batch
// (nn/cuda_layers.h's linear_forward / linear_backward, bias and activation fused), the
// embeddings as nn/cuda_motion_mlp.h's periodic_embed_forward / backward, and everything else as
// the kernels of aggregator_forward.cuh and aggregator_backward.cuh, launched by the forward and
// backward here. Concatenated inputs (ray_dir_fc's, ref_pts_fc's, rgb_fc's) are built by copying
// each part into its columns, per-ray and per-sample parts repeated over samples or views.
//
// The CPU network (src/nn/aggregator.cpp, forward_chunk and backward_chunk) is the reference:
// each kernel says which of its loops it runs, with the same formulas in the same order of views,
// samples and keys, in float (the gradient of the pooling sharpness in double, as there). Where
// the CPU loops over the channels of one sample or row with a sum across them, a warp takes the
// sample or row, lanes over channels, and sums with shuffles; elsewhere a thread takes one sample
// (loops over its views), one (row, channel) element, or one query or key of one head of one ray
// (the ray transformer's attention: sequences are IBRNet's samples of a ray, at most
// n_samples_max, so scores and probabilities are formed explicitly, as on the CPU).
//
// The pooling backward follows the CPU's numerics exactly: with weights w_v = raw_v / D and
// D = sum_u raw_u + eps, the sum of the weights is 1 - eps / D, which float cannot resolve from
// 1, and the gradients depend on that gap, so it is always taken as eps / D ("gap"), never by
// subtraction; the part of a weight's gradient common to all views is kept apart from the
// per-view part (mean_var_backward, normalisation_backward in aggregator.cpp).
//
// Determinism: no atomics. Per-sample and per-row results are written by the one thread or warp
// that owns them; parameter gradients are accumulated by the GEMMs and the layers' fixed-order
// column sums, and the sharpness gradient by a per-sample partial then one block's fixed tree.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "aggregator_backward.cuh"
#include "aggregator_forward.cuh"
#include "common.h"
#include "mvibr/core/device.h"
#include "mvibr/nn/cuda_aggregator.h"
#include "mvibr/nn/cuda_motion_mlp.h"

namespace mvibr::nn::cuda {

namespace {

// ---- Host side ----

// A launch with a warp per item.
template <typename... Params, typename... Args>
void launch_warps(size_t items, cudaStream_t stream, void (*kernel)(Params...), Args&&... args) {
  launch_threads(items * kWarpSize, stream, kernel, std::forward<Args>(args)...);
}

// The dense layers on the network's run of parameters (and of gradients).
void dense_forward(Context& context, const Linear& layer, size_t rows, const float* params,
                   const float* x, Activation activation, float* y) {
  linear_forward(context, {rows, layer.in(), layer.out()}, x, params + layer.weight_offset(),
                 layer.has_bias() ? params + layer.bias_offset() : nullptr, activation, y);
}

void dense_backward(Context& context, const Linear& layer, size_t rows, const float* params,
                    float* grads, Activation activation, const float* y, float* grad_y,
                    const float* x, float* grad_x, bool accumulate_grad_x = false) {
  linear_backward(context, {rows, layer.in(), layer.out()}, activation, y, grad_y, x,
                  params + layer.weight_offset(), grad_x, accumulate_grad_x,
                  grads + layer.weight_offset(),
                  layer.has_bias() ? grads + layer.bias_offset() : nullptr);
}

// The layer on its input columns [first, first + count) alone (Linear::forward_slice), with its
// bias when with_bias, no activation.
void dense_slice_forward(Context& context, const Linear& layer, size_t rows, int first, int count,
                         bool with_bias, const float* params, const float* x, float* y) {
  linear_forward(
      context, {rows, count, layer.out(), layer.in()}, x, params + layer.weight_offset() + first,
      with_bias && layer.has_bias() ? params + layer.bias_offset() : nullptr, Activation::kNone, y);
}

void dense_slice_backward(Context& context, const Linear& layer, size_t rows, int first, int count,
                          bool with_bias, const float* params, float* grads, Activation activation,
                          const float* y, float* grad_y, const float* x, float* grad_x) {
  linear_backward(context, {rows, count, layer.out(), layer.in()}, activation, y, grad_y, x,
                  params + layer.weight_offset() + first, grad_x, false,
                  grads + layer.weight_offset() + first,
                  with_bias && layer.has_bias() ? grads + layer.bias_offset() : nullptr);
}

// out [rows, width] = in[row / repeat], rows `in_stride` and `out_stride` apart
// (copy_columns_kernel).
void copy_columns(cudaStream_t stream, size_t rows, int repeat, int width, const float* in,
                  int in_stride, float* out, int out_stride) {
  launch_threads(rows * size_t(width), stream, copy_columns_kernel, rows, repeat, width, in,
                 in_stride, out, out_stride);
}

// Lays arrays out back to back from `base`, each on a 256-byte boundary (whole cache lines);
// with a null base it only counts the bytes.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    constexpr size_t kAlignment = 256;
    const size_t at = (used_ + kAlignment - 1) / kAlignment * kAlignment;
    used_ = at + count * sizeof(T);
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

using Widths = AggregatorWidths;
using Variant = AggregatorVariant;

// One batch's sizes: rays, samples per ray, views; rows = R S V, samples = R S.
struct Sizes {
  size_t rays = 0, len = 0, views = 0, rows = 0, samples = 0;
};

#define MVIBR_AGGREGATOR_TAKE(name, per, width) \
  name = carve.take<float>(aggregator_values(per, width, s.rows, s.samples));

// What the forward keeps for the backward (aggregator_layout.h's tables: the GPU stores the
// derived activations too), the attention's saved state, and the embedded inputs that the
// concatenations are copied from.
struct ForwardArrays {
  using T = float;
  MVIBR_AGGREGATOR_STORED(MVIBR_AGGREGATOR_MEMBER)
  MVIBR_AGGREGATOR_DERIVED(MVIBR_AGGREGATOR_MEMBER)
  // per sample: queries, keys, values, heads, the residual sum and its layer norm
  float *q, *k, *v, *heads, *attention_sum, *xhat, *rstd;
  float* probs;  // [rays, heads, samples, samples]
  // per ray: the target ray (static), the time and the view direction (dynamic); per row: the
  // source ray (static)
  float *target_ray_embedded, *time_embedded, *view_dir_embedded, *src_ray_embedded;

  ForwardArrays(Carver& carve, const Sizes& s, const Widths& w, Variant variant) {
    MVIBR_AGGREGATOR_STORED(MVIBR_AGGREGATOR_TAKE)
    MVIBR_AGGREGATOR_DERIVED(MVIBR_AGGREGATOR_TAKE)
    const size_t m = s.samples;
    q = carve.take<float>(m * w.heads * w.d_k);
    k = carve.take<float>(m * w.heads * w.d_k);
    v = carve.take<float>(m * w.heads * w.d_v);
    heads = carve.take<float>(m * w.heads * w.d_v);
    attention_sum = carve.take<float>(m * w.token);
    xhat = carve.take<float>(m * w.token);
    rstd = carve.take<float>(m);
    probs = carve.take<float>(m * w.heads * s.len);
    const bool is_static = variant == Variant::kDynibarStatic;
    const bool dynamic = variant == Variant::kDynibarDynamic;
    target_ray_embedded = carve.take<float>(is_static ? s.rays * w.ref_in : 0);
    time_embedded = carve.take<float>(dynamic ? s.rays * w.dir_in : 0);
    view_dir_embedded = carve.take<float>(dynamic ? s.rays * (w.rgb_in - w.point) : 0);
    src_ray_embedded = carve.take<float>(is_static ? s.rows * w.ref_in : 0);
  }
};

// The backward's gradients (aggregator_layout.h), the attention's and the pooling's scratch, and
// the variants' own.
struct BackwardArrays {
  using T = float;
  MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_MEMBER)
  float* g_pool_weight;  // per row: the per-view parts of the pooling weights' gradient
  // per sample: the attention's
  float *g_attention_sum, *g_heads, *g_q, *g_k, *g_v;
  float* g_scores;  // [rays, heads, samples, samples]
  // the sharpness gradient in double (anti-aliased pooling only): weights per row, parts per sample
  double *pooling_exp, *pooling_weight, *sharpness_parts;
  // ray_dir_fc's output gradient apart from the features' (static, dynamic; IBRNet's is g_feat),
  // and the embedded position's (dynamic)
  float *g_dir, *g_xyz_embedded;

  BackwardArrays(Carver& carve, const Sizes& s, const Widths& w, Variant variant,
                 bool anti_alias_pooling) {
    MVIBR_AGGREGATOR_GRADIENTS(MVIBR_AGGREGATOR_TAKE)
    const size_t n = s.rows, m = s.samples;
    g_pool_weight = carve.take<float>(n);
    g_attention_sum = carve.take<float>(m * w.token);
    g_heads = carve.take<float>(m * w.heads * w.d_v);
    g_q = carve.take<float>(m * w.heads * w.d_k);
    g_k = carve.take<float>(m * w.heads * w.d_k);
    g_v = carve.take<float>(m * w.heads * w.d_v);
    g_scores = carve.take<float>(m * w.heads * s.len);
    const size_t pooling = anti_alias_pooling ? 1 : 0;
    pooling_exp = carve.take<double>(pooling * n);
    pooling_weight = carve.take<double>(pooling * n);
    sharpness_parts = carve.take<double>(pooling * m);
    g_dir = carve.take<float>(
        variant == Variant::kIbrnet ? 0 : aggregator_values(w.dir_per, w.gathered, n, m));
    g_xyz_embedded =
        carve.take<float>(variant == Variant::kDynibarDynamic ? m * w.xyz_embedded : 0);
  }
};
#undef MVIBR_AGGREGATOR_TAKE

// Lays T's arrays out in `buffer`, grown to fit.
template <typename T, typename... Args>
T lay_out(DeviceArray<char>& buffer, const Args&... args) {
  Carver count(nullptr);
  static_cast<void>(T(count, args...));  // counts the bytes
  Carver carve(buffer.reserve(count.used()));
  return T(carve, args...);
}

}  // namespace

struct IbrnetAggregator::Impl {
  explicit Impl(const nn::IbrnetAggregator& network)
      : layers(network.layers()),
        widths(network.widths()),
        variant(network.variant()),
        options(network.options()),
        anti_alias_pooling(network.options().anti_alias_pooling),
        mask_keys(layers.ray_attention.mask() == AttentionMask::kKeys),
        density_shift(float(network.options().density_shift)),
        sharpness_offset(network.sharpness_offset()),
        positional_encoding(network.positional_encoding().begin(),
                            network.positional_encoding().end()) {}

  // The positional encoding on the device, uploaded by the first call; null without one (static).
  const float* encoding(cudaStream_t stream) {
    if (!encoding_on_device && !positional_encoding.empty()) {
      const size_t bytes = positional_encoding.size() * sizeof(float);
      float* table = reinterpret_cast<float*>(encoding_buffer.reserve(bytes));
      MVIBR_CUDA_CHECK(cudaMemcpyAsync(table, positional_encoding.data(), bytes,
                                       cudaMemcpyHostToDevice, stream));
      encoding_on_device = table;
    }
    return encoding_on_device;
  }

  // The sizes, and the inputs the variant reads, as the CPU network checks them.
  void check(int n_rays, int n_samples, int n_views, const AggregatorInputs<float>& in) const {
    check_aggregator_call(options, n_rays, n_samples, n_views, in, "aggregator on the GPU");
  }

  // The forward over the rays of `s` (inputs and outputs from their first), activations into `a`.
  void run_forward(Context& context, const Sizes& s, const float* params,
                   const AggregatorInputs<float>& in, float* rgb, float* sigma,
                   const ForwardArrays& a) {
    const cudaStream_t stream = context.impl().stream;
    const Widths& w = widths;
    const float* encoding_table = encoding(stream);
    const size_t n = s.rows, m = s.samples;
    const int S = int(s.len), V = int(s.views);
    const int G = w.gathered, F = w.feature, K = w.token, E = w.xyz_embedded, I = w.rgb_in;
    const bool ibrnet = variant == Variant::kIbrnet;
    const bool is_static = variant == Variant::kDynibarStatic;
    const bool dynamic = variant == Variant::kDynibarDynamic;
    constexpr Activation kNone = Activation::kNone, kElu = Activation::kElu;

    // Per-view features: the gathered ones with the variant's direction, geometry or time term.
    // ray_dir_fc reads ray_diff (IBRNet), per row the embedded position and source ray next to
    // ray_diff (static), or per sample the embedded time (dynamic); the static network's
    // target-ray term is ref_feature_fc of the embedded target ray, per sample.
    if (!ibrnet) periodic_embed_forward(layers.xyz_embed, m, in.xyz, a.xyz_embedded, stream);
    if (is_static) {
      const int R = w.ref_in, D = w.dir_in;
      periodic_embed_forward(layers.ray_embed, s.rays, in.target_rays, a.target_ray_embedded,
                             stream);
      copy_columns(stream, m, S, R, a.target_ray_embedded, R, a.ref_in, R);
      dense_forward(context, *layers.ref_feature, m, params, a.ref_in, kNone, a.ref_feature);
      periodic_embed_forward(layers.ray_embed, n, in.src_rays, a.src_ray_embedded, stream);
      copy_columns(stream, n, V, E, a.xyz_embedded, E, a.dir_in, D);
      copy_columns(stream, n, 1, R, a.src_ray_embedded, R, a.dir_in + E, D);
      copy_columns(stream, n, 1, 4, in.ray_diff, 4, a.dir_in + E + R, D);
    } else if (dynamic) {
      periodic_embed_forward(layers.time_embed, s.rays, in.time, a.time_embedded, stream);
      copy_columns(stream, m, S, w.dir_in, a.time_embedded, w.dir_in, a.dir_in, w.dir_in);
    }
    const size_t dir_rows = aggregator_values(w.dir_per, 1, n, m);
    dense_forward(context, layers.ray_dir_0, dir_rows, params, ibrnet ? in.ray_diff : a.dir_in,
                  kElu, a.h_dir);
    dense_forward(context, layers.ray_dir_2, dir_rows, params, a.h_dir, is_static ? kNone : kElu,
                  a.dir);
    if (is_static) {
      launch_threads(n * F, stream, static_features_kernel, n, V, G, in.rgb_features, a.dir,
                     a.ref_feature, a.feat);
    } else {
      launch_threads(n * G, stream, add_term_kernel, n, dynamic ? V : 1, G, in.rgb_features, a.dir,
                     a.feat);
    }

    // Pooling weights, the pooled mean and variance of the features, and base_fc: its weights
    // split into the part for the mean and variance (once per sample, with the bias) and the part
    // for the view's own features.
    launch_threads(m, stream, pooling_weights_kernel, m, V,
                   anti_alias_pooling ? params + sharpness_offset : nullptr, in.ray_diff, in.mask,
                   a.pool, a.pool_denominator);
    launch_threads(m * F, stream, weighted_mean_variance_kernel, m, V, F, a.feat, a.pool,
                   a.mean_var, 2 * F);
    dense_slice_forward(context, layers.base_0, m, 0, 2 * F, true, params, a.mean_var,
                        a.h_mean_var);
    dense_slice_forward(context, layers.base_0, n, 2 * F, F, false, params, a.feat, a.h_base);
    launch_threads(n * w.base_hidden, stream, add_sample_part_elu_kernel, n, V, w.base_hidden,
                   a.h_mean_var, a.h_base);
    dense_forward(context, layers.base_2, n, params, a.h_base, kElu, a.x_base);

    // Visibility: a residual for the features and a first visibility from the pooled features,
    // then the visibility and its weights, and the weighted mean and variance of x.
    launch_threads(n * w.x, stream, scale_rows_kernel, n, w.x, a.x_base, a.pool, a.x_pooled);
    dense_forward(context, layers.vis_0, n, params, a.x_pooled, kElu, a.h_vis);
    dense_forward(context, layers.vis_2, n, params, a.h_vis, kElu, a.x_vis);
    launch_threads(n * w.x, stream, visibility_residual_kernel, n, w.x, a.x_base, a.x_vis, in.mask,
                   a.sig_vis, a.x, a.x_vis_weighted);
    dense_forward(context, layers.vis2_0, n, params, a.x_vis_weighted, kElu, a.h_vis2);
    dense_forward(context, layers.vis2_2, n, params, a.h_vis2, kNone, a.vis2);
    launch_threads(m, stream, visibility_weights_kernel, m, V, in.mask, a.vis2, a.vis, a.vis_weight,
                   a.vis_denominator, a.geometry_in + 2 * w.x, w.geometry_in);
    launch_threads(m * w.x, stream, weighted_mean_variance_kernel, m, V, w.x, a.x, a.vis_weight,
                   a.geometry_in, w.geometry_in);
    dense_forward(context, layers.geometry_0, m, params, a.geometry_in, kElu, a.h_geometry);
    dense_forward(context, layers.geometry_2, m, params, a.h_geometry, kElu, a.geometry_out);

    // The ray transformer over the samples of each ray.
    const MultiHeadAttention& attention = layers.ray_attention;
    const AttentionShape shape{s.rays, S, w.heads, w.d_k, w.d_v, mask_keys};
    launch_threads(m, stream, tokens_kernel, m, S, V, K, in.mask, a.geometry_out, encoding_table,
                   a.n_valid, a.valid_tokens, a.tokens);
    dense_forward(context, attention.w_qs(), m, params, a.tokens, kNone, a.q);
    dense_forward(context, attention.w_ks(), m, params, a.tokens, kNone, a.k);
    dense_forward(context, attention.w_vs(), m, params, a.tokens, kNone, a.v);
    launch_threads(m * w.heads, stream, attention_forward_kernel, shape, a.q, a.k, a.v,
                   a.valid_tokens, a.probs, a.heads);
    dense_forward(context, attention.fc(), m, params, a.heads, kNone, a.attention_sum);
    launch_threads(m * K, stream, accumulate_kernel, m * K, a.tokens, a.attention_sum);
    const LayerNorm& norm = attention.layer_norm();
    layer_norm_forward(context, m, K, norm.eps(), params + norm.weight_offset(),
                       params + norm.bias_offset(), a.attention_sum, a.attention_out, a.xhat,
                       a.rstd);

    // Density: from the token, or (dynamic) from ref_pts_fc on the token and the position.
    const float* density_in = a.attention_out;
    if (dynamic) {
      copy_columns(stream, m, 1, K, a.attention_out, K, a.point_in, w.point_in);
      copy_columns(stream, m, 1, E, a.xyz_embedded, E, a.point_in + K, w.point_in);
      dense_forward(context, *layers.point_0, m, params, a.point_in, kElu, a.h_point);
      dense_forward(context, *layers.point_2, m, params, a.h_point, kElu, a.point);
      density_in = a.point;
    }
    dense_forward(context, layers.out_geometry_0, m, params, density_in, kElu, a.h_sigma);
    dense_forward(context, layers.out_geometry_2, m, params, a.h_sigma,
                  ibrnet ? Activation::kRelu : kNone, a.sigma_head);
    launch_threads(m, stream, density_kernel, m, a.n_valid, a.sigma_head,
                   ibrnet ? 0.0f : float(kMaskedDensity), dynamic ? density_shift : 0.0f, sigma);

    // Colour: blending weights over views from rgb_fc on [x, vis, ray_diff] (static: after the
    // sample's token), or (dynamic) a colour per sample from rgb_fc on [ref_pts_fc's output, the
    // embedded view direction].
    if (dynamic) {
      const int D = layers.view_dir_embed.width();
      periodic_embed_forward(layers.view_dir_embed, s.rays, in.view_dir, a.view_dir_embedded,
                             stream);
      copy_columns(stream, m, 1, K, a.point, K, a.rgb_in, I);
      copy_columns(stream, m, S, D, a.view_dir_embedded, D, a.rgb_in + K, I);
    } else {
      if (is_static) copy_columns(stream, n, V, K, a.attention_out, K, a.rgb_in, I);
      launch_threads(n * (w.x + 5), stream, colour_input_kernel, n, w.x, I, a.x, a.vis, in.ray_diff,
                     a.rgb_in + (is_static ? K : 0));
    }
    const size_t colour_rows = aggregator_values(w.colour_per, 1, n, m);
    dense_forward(context, layers.rgb_0, colour_rows, params, a.rgb_in, kElu, a.h_rgb);
    dense_forward(context, layers.rgb_2, colour_rows, params, a.h_rgb, kElu, a.h_rgb2);
    dense_forward(context, layers.rgb_4, colour_rows, params, a.h_rgb2, kNone,
                  dynamic ? a.colour : a.blend);
    if (dynamic) {
      launch_threads(m * 3, stream, colour_kernel, m, a.n_valid, a.colour, rgb);
    } else {
      launch_threads(m, stream, blending_kernel, m, V, G, in.mask, in.rgb_features, a.blend, rgb);
    }
  }

  nn::IbrnetAggregator::Layers layers;
  Widths widths;
  Variant variant;
  nn::AggregatorOptions options;
  bool anti_alias_pooling, mask_keys;
  float density_shift;
  size_t sharpness_offset;
  std::vector<float> positional_encoding;  // [n_samples_max, token], the CPU's table in float

  // inference_buffer: one chunk's activations for infer(), reused chunk after chunk.
  DeviceArray<char> encoding_buffer, forward_buffer, backward_buffer, inference_buffer;
  const float* encoding_on_device = nullptr;

  // The last forward: its sizes, inputs and activations.
  bool has_forward = false;
  Sizes sizes;
  AggregatorInputs<float> kept;
  std::optional<ForwardArrays> activations;
};

IbrnetAggregator::IbrnetAggregator(const nn::IbrnetAggregator& network)
    : impl_(std::make_unique<Impl>(network)) {}

IbrnetAggregator::~IbrnetAggregator() = default;

void IbrnetAggregator::forward(Context& context, int n_rays, int n_samples, int n_views,
                               const float* params, const AggregatorInputs<float>& inputs,
                               float* rgb, float* sigma) {
  Impl& im = *impl_;
  im.check(n_rays, n_samples, n_views, inputs);
  // Valid for a backward only once this forward has gone through: a throw on the way (an
  // allocation, a cuBLAS call) leaves no stale activations behind that look current.
  im.has_forward = false;
  im.activations.reset();
  Sizes& s = im.sizes;
  s.rays = size_t(n_rays);
  s.len = size_t(n_samples);
  s.views = size_t(n_views);
  s.samples = s.rays * s.len;
  s.rows = s.samples * s.views;
  im.kept = inputs;
  if (s.rows == 0) {
    im.has_forward = true;
    return;
  }

  im.activations.emplace(lay_out<ForwardArrays>(im.forward_buffer, s, im.widths, im.variant));
  im.run_forward(context, s, params, inputs, rgb, sigma, *im.activations);
  im.has_forward = true;
}

void IbrnetAggregator::infer(Context& context, int n_rays, int n_samples, int n_views,
                             const float* params, const AggregatorInputs<float>& inputs, float* rgb,
                             float* sigma, size_t rows_per_chunk) {
  Impl& im = *impl_;
  im.check(n_rays, n_samples, n_views, inputs);
  const size_t ray_rows = size_t(n_samples) * size_t(n_views);
  const size_t chunk_rays = std::max<size_t>(1, rows_per_chunk / ray_rows);
  const int channels = im.widths.gathered - 3;
  for (size_t first = 0; first < size_t(n_rays); first += chunk_rays) {
    Sizes s;
    s.rays = std::min(chunk_rays, size_t(n_rays) - first);
    s.len = size_t(n_samples);
    s.views = size_t(n_views);
    s.samples = s.rays * s.len;
    s.rows = s.samples * s.views;
    const size_t sample = first * size_t(n_samples);
    const ForwardArrays a = lay_out<ForwardArrays>(im.inference_buffer, s, im.widths, im.variant);
    im.run_forward(context, s, params, inputs.from_ray(first, n_samples, n_views, channels),
                   rgb + sample * 3, sigma + sample, a);
  }
}

size_t IbrnetAggregator::device_bytes() const {
  const Impl& im = *impl_;
  return im.encoding_buffer.size() + im.forward_buffer.size() + im.backward_buffer.size() +
         im.inference_buffer.size();
}

// Mirrors forward from the outputs back, as backward_chunk does.
void IbrnetAggregator::backward(Context& context, const float* params, float* grads,
                                const float* grad_rgb, const float* grad_sigma,
                                float* grad_rgb_features, float* grad_xyz) {
  Impl& im = *impl_;
  if (!im.has_forward) {
    throw InvalidArgument(
        "aggregator backward on the GPU: there is no forward pass to go back "
        "through");
  }
  if (grad_xyz && im.variant != Variant::kDynibarDynamic) {
    throw InvalidArgument(
        "aggregator backward on the GPU: only DynIBaR's dynamic network has a gradient for the "
        "samples' positions");
  }
  const Sizes& s = im.sizes;
  if (s.rows == 0) return;
  const cudaStream_t stream = context.impl().stream;
  const Widths& w = im.widths;
  const nn::IbrnetAggregator::Layers& layers = im.layers;
  const ForwardArrays& a = *im.activations;
  const BackwardArrays g =
      lay_out<BackwardArrays>(im.backward_buffer, s, w, im.variant, im.anti_alias_pooling);
  const AggregatorInputs<float>& in = im.kept;
  const size_t n = s.rows, m = s.samples;
  const int V = int(s.views);
  const int G = w.gathered, F = w.feature, K = w.token, X = w.x, I = w.rgb_in;
  const bool ibrnet = im.variant == Variant::kIbrnet;
  const bool is_static = im.variant == Variant::kDynibarStatic;
  const bool dynamic = im.variant == Variant::kDynibarDynamic;
  constexpr Activation kNone = Activation::kNone, kElu = Activation::kElu;

  // Colour: the sigmoid (dynamic) or the softmax over views (no gradient into masked logits),
  // then rgb_fc, whose input's gradient goes to x and the visibility, the static network's token
  // (below), or (dynamic) ref_pts_fc's output; the dynamic network's x and visibility get none.
  if (dynamic) {
    launch_threads(m * 3, stream, colour_backward_kernel, m, a.n_valid, a.colour, grad_rgb,
                   g.g_colour);
    dense_backward(context, layers.rgb_4, m, params, grads, kNone, nullptr, g.g_colour, a.h_rgb2,
                   g.g_h_rgb2);
  } else {
    launch_threads(m, stream, blending_backward_kernel, m, V, G, in.mask, in.rgb_features, a.blend,
                   grad_rgb, g.g_logit);
    // rgb_fc.4's bias gradient is exactly zero (it shifts all logits of a sample alike; see the
    // CPU network) and is left so.
    dense_slice_backward(context, layers.rgb_4, n, 0, layers.rgb_4.in(), /*with_bias=*/false,
                         params, grads, kNone, nullptr, g.g_logit, a.h_rgb2, g.g_h_rgb2);
  }
  const size_t colour_rows = aggregator_values(w.colour_per, 1, n, m);
  dense_backward(context, layers.rgb_2, colour_rows, params, grads, kElu, a.h_rgb2, g.g_h_rgb2,
                 a.h_rgb, g.g_h_rgb);
  dense_backward(context, layers.rgb_0, colour_rows, params, grads, kElu, a.h_rgb, g.g_h_rgb,
                 a.rgb_in, g.g_rgb_in);
  if (dynamic) {
    copy_columns(stream, m, 1, K, g.g_rgb_in, I, g.g_point, K);
    MVIBR_CUDA_CHECK(cudaMemsetAsync(g.g_x, 0, n * X * sizeof(float), stream));
    MVIBR_CUDA_CHECK(cudaMemsetAsync(g.g_vis, 0, n * sizeof(float), stream));
  } else {
    launch_threads(n * (X + 1), stream, split_colour_input_gradient_kernel, n, X, I,
                   g.g_rgb_in + (is_static ? K : 0), g.g_x, g.g_vis);
  }

  // Density: zero where no view sees the sample, then out_geometry_fc (IBRNet's through its
  // ReLU) back to the token; the dynamic network's to ref_pts_fc's output, added to the colour's
  // part, then through ref_pts_fc to the token and the position. The static network's colour
  // head adds its part of the token's gradient, summed over views.
  launch_threads(m, stream, density_backward_kernel, m, a.n_valid, grad_sigma, g.g_sigma);
  dense_backward(context, layers.out_geometry_2, m, params, grads,
                 ibrnet ? Activation::kRelu : kNone, a.sigma_head, g.g_sigma, a.h_sigma,
                 g.g_h_sigma);
  if (dynamic) {
    const int E = w.xyz_embedded, P = w.point_in;
    dense_backward(context, layers.out_geometry_0, m, params, grads, kElu, a.h_sigma, g.g_h_sigma,
                   a.point, g.g_point, true);
    dense_backward(context, *layers.point_2, m, params, grads, kElu, a.point, g.g_point, a.h_point,
                   g.g_h_point);
    dense_backward(context, *layers.point_0, m, params, grads, kElu, a.h_point, g.g_h_point,
                   a.point_in, g.g_point_in);
    copy_columns(stream, m, 1, K, g.g_point_in, P, g.g_attention_out, K);
    if (grad_xyz) {
      copy_columns(stream, m, 1, E, g.g_point_in + K, P, g.g_xyz_embedded, E);
      periodic_embed_backward(layers.xyz_embed, m, a.xyz_embedded, g.g_xyz_embedded, grad_xyz,
                              false, stream);
    }
  } else {
    dense_backward(context, layers.out_geometry_0, m, params, grads, kElu, a.h_sigma, g.g_h_sigma,
                   a.attention_out, g.g_attention_out);
    if (is_static) {
      launch_threads(m * K, stream, sum_over_views_kernel, m, V, K, g.g_rgb_in, I, true,
                     g.g_attention_out);
    }
  }

  // The ray transformer (LayerNorm, fc and the residual, attention, projections), then
  // geometry_fc.
  const MultiHeadAttention& attention = layers.ray_attention;
  const LayerNorm& norm = attention.layer_norm();
  layer_norm_backward(context, m, K, params + norm.weight_offset(), a.xhat, a.rstd,
                      g.g_attention_out, g.g_attention_sum, grads + norm.weight_offset(),
                      grads + norm.bias_offset());
  MVIBR_CUDA_CHECK(cudaMemcpyAsync(g.g_tokens, g.g_attention_sum, m * K * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));  // the residual
  dense_backward(context, attention.fc(), m, params, grads, kNone, nullptr, g.g_attention_sum,
                 a.heads, g.g_heads);
  const AttentionShape shape{s.rays, int(s.len), w.heads, w.d_k, w.d_v, im.mask_keys};
  launch_threads(m * w.heads, stream, attention_scores_backward_kernel, shape, a.k, a.v,
                 a.valid_tokens, a.probs, g.g_heads, g.g_scores, g.g_q);
  launch_threads(m * w.heads, stream, attention_keys_values_backward_kernel, shape, a.q, a.probs,
                 g.g_heads, g.g_scores, g.g_k, g.g_v);
  dense_backward(context, attention.w_qs(), m, params, grads, kNone, nullptr, g.g_q, a.tokens,
                 g.g_tokens, true);
  dense_backward(context, attention.w_ks(), m, params, grads, kNone, nullptr, g.g_k, a.tokens,
                 g.g_tokens, true);
  dense_backward(context, attention.w_vs(), m, params, grads, kNone, nullptr, g.g_v, a.tokens,
                 g.g_tokens, true);
  // The positional encoding is a constant: g_tokens is geometry_fc's output gradient.
  dense_backward(context, layers.geometry_2, m, params, grads, kElu, a.geometry_out, g.g_tokens,
                 a.h_geometry, g.g_h_geometry);
  dense_backward(context, layers.geometry_0, m, params, grads, kElu, a.h_geometry, g.g_h_geometry,
                 a.geometry_in, g.g_geometry_in);

  // Mean, variance and mean weight of x under the visibility weights, their normalisation, then
  // vis_fc2 and the first visibility, and vis_fc through the pooled features.
  launch_warps(m, stream, visibility_weights_backward_kernel, m, V, X, a.x, a.vis_weight,
               a.vis_denominator, a.geometry_in, g.g_geometry_in, g.g_x, g.g_vis_weight, g.g_vis);
  launch_threads(n, stream, visibility_sigmoid_backward_kernel, n, in.mask, a.vis2, g.g_vis,
                 g.g_vis2);
  dense_backward(context, layers.vis2_2, n, params, grads, kNone, nullptr, g.g_vis2, a.h_vis2,
                 g.g_h_vis2);
  dense_backward(context, layers.vis2_0, n, params, grads, kElu, a.h_vis2, g.g_h_vis2,
                 a.x_vis_weighted, g.g_x_vis_weighted);
  launch_warps(n, stream, first_visibility_backward_kernel, n, X, in.mask, a.sig_vis, a.x,
               g.g_x_vis_weighted, g.g_x, g.g_x_vis);
  dense_backward(context, layers.vis_2, n, params, grads, kElu, a.x_vis, g.g_x_vis, a.h_vis,
                 g.g_h_vis);
  dense_backward(context, layers.vis_0, n, params, grads, kElu, a.h_vis, g.g_h_vis, a.x_pooled,
                 g.g_x_pooled);
  launch_warps(n, stream, pooled_features_backward_kernel, n, X, a.x_base, a.pool, g.g_x_pooled,
               g.g_x, g.g_x_base, g.g_pool);

  // base_fc (its per-view part, then the per-sample part summed over views), then the pooled
  // mean and variance of the features back to every view and to the pooling weights.
  dense_backward(context, layers.base_2, n, params, grads, kElu, a.x_base, g.g_x_base, a.h_base,
                 g.g_h_base);
  dense_slice_backward(context, layers.base_0, n, 2 * F, F, false, params, grads, kElu, a.h_base,
                       g.g_h_base, a.feat, g.g_feat);
  launch_threads(m * w.base_hidden, stream, sum_over_views_kernel, m, V, w.base_hidden, g.g_h_base,
                 w.base_hidden, false, g.g_h_mean_var);
  dense_slice_backward(context, layers.base_0, m, 0, 2 * F, true, params, grads, kNone, nullptr,
                       g.g_h_mean_var, a.mean_var, g.g_mean_var);
  launch_warps(m, stream, pooling_mean_variance_backward_kernel, m, V, F, a.feat, a.pool,
               a.pool_denominator, a.mean_var, g.g_mean_var, g.g_feat, g.g_pool_weight, g.g_pool,
               g.g_pool_common);

  // The pooling sharpness s, in double.
  if (im.anti_alias_pooling) {
    const float* sharpness = params + im.sharpness_offset;
    launch_threads(m, stream, sharpness_gradient_kernel, m, V, sharpness, in.ray_diff, in.mask,
                   g.g_pool, g.g_pool_common, g.pooling_exp, g.pooling_weight, g.sharpness_parts);
    MVIBR_LAUNCH(add_sharpness_gradient_kernel, 1, kReductionThreads, 0, stream)
    (m, g.sharpness_parts, sharpness, grads + im.sharpness_offset);
    MVIBR_CUDA_CHECK_LAUNCH();
  }

  // The inputs' gradient (before IBRNet's g_feat becomes ray_dir_fc's): the gathered channels'
  // part of g_feat, and the blended colours'. Then ray_dir_fc's output gradient: IBRNet's
  // direction term is added to every channel; the static network's source-ray term multiplies
  // the target ray's (whose ref_feature_fc it trains); the dynamic network's time term is summed
  // over views.
  if (grad_rgb_features) {
    launch_threads(n * G, stream, feature_input_gradient_kernel, n, V, G, F, g.g_feat, grad_rgb,
                   dynamic ? nullptr : a.blend, grad_rgb_features);
  }
  float* g_dir = ibrnet ? g.g_feat : g.g_dir;
  if (is_static) {
    launch_threads(m * G, stream, static_features_backward_kernel, m, V, G, g.g_feat, a.dir,
                   a.ref_feature, g.g_dir, g.g_ref_feature);
    dense_backward(context, *layers.ref_feature, m, params, grads, kNone, nullptr, g.g_ref_feature,
                   a.ref_in, nullptr);
  } else if (dynamic) {
    launch_threads(m * G, stream, sum_over_views_kernel, m, V, G, g.g_feat, F, false, g.g_dir);
  }
  const size_t dir_rows = aggregator_values(w.dir_per, 1, n, m);
  dense_backward(context, layers.ray_dir_2, dir_rows, params, grads, is_static ? kNone : kElu,
                 a.dir, g_dir, a.h_dir, g.g_h_dir);
  dense_backward(context, layers.ray_dir_0, dir_rows, params, grads, kElu, a.h_dir, g.g_h_dir,
                 ibrnet ? in.ray_diff : a.dir_in, nullptr);
}

}  // namespace mvibr::nn::cuda
