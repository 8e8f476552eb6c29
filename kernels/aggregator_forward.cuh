// The aggregation network's forward kernels and the device math they share with the backward
// (kernels/aggregator.cu launches them; see its note for how each follows the CPU network).
#pragma once

#include <cmath>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "common.h"
#include "mvibr/nn/aggregator_math.h"

namespace mvibr::nn::cuda {

namespace {

constexpr int kReductionThreads = 1024;
// The fill for masked attention scores (-1e9, not -inf: a fully masked row becomes uniform), as
// attention.cpp's; the pooling's guard as a float (aggregator_math.h).
constexpr float kMaskedFill = -1e9f;
constexpr float kWeightEpsilonFloat = float(kWeightEpsilon);

// ---- Device math with the CPU's float semantics (src/nn/vector_math.h) ----

// exp(min(x, 0)), exactly 0 below -87: exp_nonpositive.
__device__ __forceinline__ float exp_nonpositive(float x) {
  return x < -87.0f ? 0.0f : expf(fminf(x, 0.0f));
}

// sigmoid_of (float): from exp(-|x|), which cannot overflow.
__device__ __forceinline__ float sigmoid_of(float x) {
  const float e = exp_nonpositive(-fabsf(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

__device__ __forceinline__ float elu_of(float x) {
  return activate(Activation::kElu, x);
}

__device__ __forceinline__ size_t warp_index() {
  return grid_thread_index() / kWarpSize;
}
__device__ __forceinline__ size_t warp_count() {
  return grid_thread_count() / kWarpSize;
}
__device__ __forceinline__ int lane_index() {
  return int(threadIdx.x % kWarpSize);
}

// mean_var_backward (aggregator.cpp) for one sample, by one warp with lanes over channels: the
// backward of mean = sum_v w_v x_v and var = sum_v w_v (x_v - mean)^2 over x [V, width]. Adds
// the gradient of every x_v to g_x, writes the per-view part of each weight's gradient to
// g_weight[v] (visible to the whole warp on return) and returns the part common to all views,
// mean . dL/dmean (the same bits in every lane).
__device__ float mean_var_backward_warp(int n_views, int width, const float* x, const float* weight,
                                        float denominator, const float* mean, const float* g_mean,
                                        const float* g_var, float* g_x, float* g_weight) {
  const int lane = lane_index();
  const float gap = kWeightEpsilonFloat / denominator;  // 1 - sum_v w_v
  // d var / d mean = -2 sum_v w_v (x_v - mean) = -2 mean gap.
  auto g_mean_total = [&](int c) { return g_mean[c] - 2 * g_var[c] * mean[c] * gap; };
  float common = 0.0f;
  for (int c = lane; c < width; c += kWarpSize) common += mean[c] * g_mean_total(c);
  common = warp_all_sum(common);
  for (int v = 0; v < n_views; ++v) {
    const float* x_v = x + size_t(v) * width;
    float* g_x_v = g_x + size_t(v) * width;
    float term = 0.0f;
    for (int c = lane; c < width; c += kWarpSize) {
      const float total = g_mean_total(c), dev = x_v[c] - mean[c];
      g_x_v[c] += weight[v] * (total + 2 * g_var[c] * dev);
      term += dev * total + g_var[c] * dev * dev;
    }
    term = warp_all_sum(term);
    if (lane == 0) g_weight[v] = term;
  }
  __syncwarp();
  return common;
}

// ---- Forward kernels ----

// out [rows, width] = in[row / repeat] for `width` columns of rows `in_stride` and `out_stride`
// apart: a concatenation's parts, each copied to its columns, where a per-ray or per-sample part
// repeats over the row's samples or views (repeat 1: a plain copy).
__global__ void copy_columns_kernel(size_t rows, int repeat, int width, const float* in,
                                    int in_stride, float* out, int out_stride) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width), c = i % size_t(width);
    out[row * out_stride + c] = in[(row / repeat) * in_stride + c];
  }
}

// feat [rows, width] = gathered + term[row / repeat]: the direction term of the row (IBRNet,
// repeat 1) or the time term of its sample (dynamic, repeat V) added to colours and features.
__global__ void add_term_kernel(size_t rows, int repeat, int width, const float* gathered,
                                const float* term, float* feat) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width), c = i % size_t(width);
    feat[i] = gathered[i] + term[(row / repeat) * width + c];
  }
}

// feat [rows, 2 width] of the static network: the gathered colours and features next to
// dir * ref_feature, the row's source-ray term times its sample's target-ray term.
__global__ void static_features_kernel(size_t rows, int n_views, int width, const float* gathered,
                                       const float* dir, const float* ref_feature, float* feat) {
  const size_t count = rows * size_t(2 * width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(2 * width);
    const int c = int(i % size_t(2 * width));
    feat[i] = c < width ? gathered[row * width + c]
                        : dir[row * width + (c - width)] *
                              ref_feature[(row / n_views) * width + (c - width)];
  }
}

// y += x: the attention's residual.
__global__ void accumulate_kernel(size_t count, const float* x, float* y) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) y[i] += x[i];
}

// Pooling weights over the views of each sample, a thread per sample: anti-aliased
// raw_v = (exp(|s| (d_v - 1)) - min_u exp(|s| (d_u - 1))) mask_v with d_v the direction dot
// product (ray_diff's 4th value), or uniform raw_v = mask_v (sharpness null); pool_v = raw_v / D.
__global__ void pooling_weights_kernel(size_t samples, int n_views, const float* sharpness,
                                       const float* ray_diff, const float* mask, float* pool,
                                       float* denominator) {
  const float s = sharpness ? fabsf(*sharpness) : 0.0f;
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    denominator[j] = pooling_weights(n_views, sharpness != nullptr, s, ray_diff + row * 4,
                                     mask + row, pool + row);
  }
}

// The features' under the pooling weights (into mean_var) and x's under the visibility weights
// (into geometry_in).
__global__ void weighted_mean_variance_kernel(size_t samples, int n_views, int width,
                                              const float* x, const float* weight, float* out,
                                              int out_stride) {
  const size_t count = samples * size_t(width);
  for (size_t t = grid_thread_index(); t < count; t += grid_thread_count()) {
    const size_t j = t / size_t(width);
    const int c = int(t % size_t(width));
    const float* x_c = x + j * n_views * size_t(width) + c;
    const float* w = weight + j * n_views;
    float mean = 0.0f, var = 0.0f;
    for (int v = 0; v < n_views; ++v) mean += x_c[size_t(v) * width] * w[v];
    for (int v = 0; v < n_views; ++v) {
      const float dev = x_c[size_t(v) * width] - mean;
      var += w[v] * dev * dev;
    }
    out[j * out_stride + c] = mean;
    out[j * out_stride + width + c] = var;
  }
}

// per_row [rows, width] = elu(per_row + per_sample[row / V]): base_fc's first layer, whose
// per-sample part (mean and variance) and per-view part (features) were applied apart.
__global__ void add_sample_part_elu_kernel(size_t rows, int n_views, int width,
                                           const float* per_sample, float* per_row) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width);
    const size_t c = i % size_t(width);
    per_row[i] = elu_of(per_row[i] + per_sample[(row / n_views) * width + c]);
  }
}

// out [rows, width] = x * scale[row]: the pooled features x_base * pool.
__global__ void scale_rows_kernel(size_t rows, int width, const float* x, const float* scale,
                                  float* out) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    out[i] = x[i] * scale[i / size_t(width)];
  }
}

// Per (row, channel): the first visibility sig_vis = sigmoid(x_vis[:, width]), the residual
// x = x_base + x_vis[:, :width], and x_vis_weighted = x * sig_vis * mask.
__global__ void visibility_residual_kernel(size_t rows, int width, const float* x_base,
                                           const float* x_vis, const float* mask, float* sig_vis,
                                           float* x, float* x_vis_weighted) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width);
    const size_t c = i % size_t(width);
    const float* xv = x_vis + row * (width + 1);
    const float first = sigmoid_of(xv[width]);
    if (c == 0) sig_vis[row] = first;
    const float value = x_base[i] + xv[c];
    x[i] = value;
    x_vis_weighted[i] = value * (first * mask[row]);
  }
}

// A thread per sample: vis2 = sigmoid(vis_fc2's output) in place, vis = vis2 * mask, the
// visibility weights vis_v / (sum_u vis_u + eps), and their mean over views into mean_weight
// (geometry_in's last column, stride apart).
__global__ void visibility_weights_kernel(size_t samples, int n_views, const float* mask,
                                          float* vis2, float* vis, float* vis_weight,
                                          float* denominator, float* mean_weight, int stride) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    float sum = 0.0f;
    for (int v = 0; v < n_views; ++v) {
      vis2[row + v] = sigmoid_of(vis2[row + v]);
      vis[row + v] = vis2[row + v] * mask[row + v];
      sum += vis[row + v];
    }
    const float d = sum + kWeightEpsilonFloat;
    denominator[j] = d;
    float weights = 0.0f;
    for (int v = 0; v < n_views; ++v) {
      const float weight = vis[row + v] / d;
      vis_weight[row + v] = weight;
      weights += weight;
    }
    mean_weight[j * stride] = weights / float(n_views);
  }
}

// A thread per sample: the count of valid views (n_valid), whether the sample is a valid token
// of the ray transformer (more than one view), and tokens = geometry_out + the positional
// encoding of the sample's index along its ray (encoding [n_samples_max, width]; null: none).
__global__ void tokens_kernel(size_t samples, int n_samples, int n_views, int width,
                              const float* mask, const float* geometry_out, const float* encoding,
                              float* n_valid, float* valid_tokens, float* tokens) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    float count = 0.0f;
    for (int v = 0; v < n_views; ++v) count += mask[j * n_views + v];
    n_valid[j] = count;
    valid_tokens[j] = count > 1 ? 1.0f : 0.0f;
    const float* pe = encoding ? encoding + (j % size_t(n_samples)) * width : nullptr;
    for (int c = 0; c < width; ++c) {
      tokens[j * width + c] = geometry_out[j * width + c] + (pe ? pe[c] : 0.0f);
    }
  }
}

// The attention's layout: q, k [tokens, heads * d_k], v and the concatenated heads
// [tokens, heads * d_v], probabilities and score gradients [rays, heads, len, len].
struct AttentionShape {
  size_t rays;
  int len, heads, d_k, d_v;
  bool mask_keys;  // AttentionMask::kKeys, else kQueries
  __device__ size_t count() const { return rays * size_t(heads) * size_t(len); }
  __device__ int qk() const { return heads * d_k; }
  __device__ int vw() const { return heads * d_v; }
  // Whether the score of query i for key j is masked, for a ray's valid flags.
  __device__ bool masked(const float* valid, int i, int j) const {
    return mask_keys ? valid[j] == 0.0f : valid[i] == 0.0f;
  }
};

// A thread per (ray, head, query i), MultiHeadAttention::forward's inner loop: scores
// (q_i / sqrt(d_k)) . k_j over the ray's keys, masked with -1e9, softmax into probs, and the
// head's output sum_j p_j v_j.
__global__ void attention_forward_kernel(AttentionShape shape, const float* q, const float* k,
                                         const float* v, const float* valid, float* probs,
                                         float* heads) {
  const int qk = shape.qk(), vw = shape.vw(), len = shape.len;
  const float inv_temperature = 1.0f / sqrtf(float(shape.d_k));
  for (size_t t = grid_thread_index(); t < shape.count(); t += grid_thread_count()) {
    const int i = int(t % size_t(len));
    const size_t sequence = t / size_t(len);  // ray * heads + head
    const int h = int(sequence % size_t(shape.heads));
    const size_t first = (sequence / size_t(shape.heads)) * len;  // the ray's first token
    const float* valid_ray = valid + first;
    const float* q_i = q + (first + i) * qk + h * shape.d_k;
    float* p = probs + t * len;
    float top = -INFINITY;
    for (int j = 0; j < len; ++j) {
      const float* k_j = k + (first + j) * qk + h * shape.d_k;
      float score = 0.0f;
      for (int c = 0; c < shape.d_k; ++c) score += (q_i[c] * inv_temperature) * k_j[c];
      if (shape.masked(valid_ray, i, j)) score = kMaskedFill;
      p[j] = score;
      top = fmaxf(top, score);
    }
    float total = 0.0f;
    for (int j = 0; j < len; ++j) total += p[j] = exp_nonpositive(p[j] - top);
    for (int j = 0; j < len; ++j) p[j] /= total;
    float* out = heads + (first + i) * vw + h * shape.d_v;
    for (int c = 0; c < shape.d_v; ++c) {
      float sum = 0.0f;
      for (int j = 0; j < len; ++j) sum += p[j] * v[(first + j) * vw + h * shape.d_v + c];
      out[c] = sum;
    }
  }
}

// A thread per sample: sigma = `unseen` (IBRNet's 0, DynIBaR's -1e9) where no view sees the
// sample, else out_geometry_fc's output less `shift` (the dynamic network's density shift).
__global__ void density_kernel(size_t samples, const float* n_valid, const float* sigma_head,
                               float unseen, float shift, float* sigma) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    sigma[j] = n_valid[j] < 1 ? unseen : sigma_head[j] - shift;
  }
}

// rgb_fc's input per (row, column): [x (width), vis, ray_diff (4)], in the first width + 5
// columns of rows `stride` apart (the static network's rows start with the token).
__global__ void colour_input_kernel(size_t rows, int width, int stride, const float* x,
                                    const float* vis, const float* ray_diff, float* rgb_in) {
  const int in = width + 5;
  const size_t count = rows * size_t(in);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(in);
    const int c = int(i % size_t(in));
    rgb_in[row * stride + c] = c < width    ? x[row * width + c]
                               : c == width ? vis[row]
                                            : ray_diff[row * 4 + (c - width - 1)];
  }
}

// Per (sample, channel), the dynamic network's colour: the sigmoid of rgb_fc's output, in place
// in colour [samples, 3], and rgb = colour, or 0 where no view sees the sample.
__global__ void colour_kernel(size_t samples, const float* n_valid, float* colour, float* rgb) {
  const size_t count = samples * 3;
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const float value = sigmoid_of(colour[i]);
    colour[i] = value;
    rgb[i] = n_valid[i / 3] < 1 ? 0.0f : value;
  }
}

// A thread per sample: the blending softmax over views (masked logits -1e9), in place in blend,
// and the blended colour rgb [samples, 3] from the first 3 channels of rgb_features.
__global__ void blending_kernel(size_t samples, int n_views, int feature_width, const float* mask,
                                const float* rgb_features, float* blend, float* rgb) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    blend_views(n_views, mask + row, rgb_features + row * feature_width, size_t(feature_width),
                blend + row, rgb + j * 3, [](float x) { return exp_nonpositive(x); });
  }
}

}  // namespace
}  // namespace mvibr::nn::cuda
