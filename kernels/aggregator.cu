// IBRNet's aggregation network on the GPU (nn/cuda_aggregator.h): the dense layers as cuBLAS
// GEMMs over every row of the batch (nn/cuda_layers.h's linear_forward / linear_backward, bias and
// activation fused), and everything that is not a GEMM as the kernels below, with their
// launchers in the forward and backward at the end of the file.
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
#include "mvibr/nn/cuda_aggregator.h"

namespace mvibr::nn::cuda {

using cuda_detail::blocks_for;
using cuda_detail::grid_thread_count;
using cuda_detail::grid_thread_index;

namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kReductionThreads = 1024;
// IBRNet's guards against empty sums, and its fill for masked blending logits and attention
// scores (-1e9, not -inf: a fully masked row becomes uniform), as in aggregator.cpp and
// attention.cpp.
constexpr float kWeightEpsilon = 1e-8f;
constexpr double kWeightEpsilonDouble = 1e-8;
constexpr float kMaskedFill = -1e9f;

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

// normalisation_backward (aggregator.cpp): for w_v = raw_v / D and dL/dw_u = g[u] + common,
// dL/draw_v = (sum_u w_u (g_v - g_u) + (g_v + common) gap) / D.
template <typename T, typename G>
__device__ T normalisation_backward(int n_views, int v, const T* weight, const G* g, T common,
                                    T denominator) {
  const T gap = T(kWeightEpsilonDouble) / denominator;
  const T g_v = T(g[v]);
  T spread = 0;
  for (int u = 0; u < n_views; ++u) spread += weight[u] * (g_v - T(g[u]));
  return (spread + (g_v + common) * gap) / denominator;
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
  const float gap = kWeightEpsilon / denominator;  // 1 - sum_v w_v
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

// out = a + b: the direction features added to colours and features.
__global__ void add_kernel(size_t count, const float* a, const float* b, float* out) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) out[i] = a[i] + b[i];
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
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    float* weight = pool + row;
    const float* valid = mask + row;
    float sum = 0.0f;
    if (sharpness) {
      const float s = fabsf(*sharpness);
      float lowest = INFINITY;
      for (int v = 0; v < n_views; ++v) {
        weight[v] = expf(s * (ray_diff[(row + v) * 4 + 3] - 1.0f));
        lowest = fminf(lowest, weight[v]);
      }
      for (int v = 0; v < n_views; ++v) sum += weight[v] = (weight[v] - lowest) * valid[v];
    } else {
      for (int v = 0; v < n_views; ++v) sum += weight[v] = valid[v];
    }
    const float d = sum + kWeightEpsilon;
    denominator[j] = d;
    for (int v = 0; v < n_views; ++v) weight[v] /= d;
  }
}

// Weighted mean and variance over views, a thread per (sample, channel): x [samples * V, width],
// weight [samples * V]; out[j * out_stride + c] = mean, out[j * out_stride + width + c] = var.
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
    const float d = sum + kWeightEpsilon;
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
// encoding of the sample's index along its ray (encoding [n_samples_max, width]).
__global__ void tokens_kernel(size_t samples, int n_samples, int n_views, int width,
                              const float* mask, const float* geometry_out, const float* encoding,
                              float* n_valid, float* valid_tokens, float* tokens) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    float count = 0.0f;
    for (int v = 0; v < n_views; ++v) count += mask[j * n_views + v];
    n_valid[j] = count;
    valid_tokens[j] = count > 1 ? 1.0f : 0.0f;
    const float* pe = encoding + (j % size_t(n_samples)) * width;
    for (int c = 0; c < width; ++c) {
      tokens[j * width + c] = geometry_out[j * width + c] + pe[c];
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

// A thread per sample: sigma = 0 where no view sees the sample, else out_geometry_fc's output.
__global__ void density_kernel(size_t samples, const float* n_valid, const float* sigma_relu,
                               float* sigma) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    sigma[j] = n_valid[j] < 1 ? 0.0f : sigma_relu[j];
  }
}

// rgb_fc's input per (row, column): [x (width), vis, ray_diff (4)].
__global__ void colour_input_kernel(size_t rows, int width, const float* x, const float* vis,
                                    const float* ray_diff, float* rgb_in) {
  const int in = width + 5;
  const size_t count = rows * size_t(in);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(in);
    const int c = int(i % size_t(in));
    rgb_in[i] = c < width    ? x[row * width + c]
                : c == width ? vis[row]
                             : ray_diff[row * 4 + (c - width - 1)];
  }
}

// A thread per sample: the blending softmax over views (masked logits -1e9), in place in blend,
// and the blended colour rgb [samples, 3] from the first 3 channels of rgb_features.
__global__ void blending_kernel(size_t samples, int n_views, int feature_width, const float* mask,
                                const float* rgb_features, float* blend, float* rgb) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    float* b = blend + row;
    float top = -INFINITY;
    for (int v = 0; v < n_views; ++v) {
      if (mask[row + v] == 0.0f) b[v] = kMaskedFill;
      top = fmaxf(top, b[v]);
    }
    float sum = 0.0f;
    for (int v = 0; v < n_views; ++v) b[v] = exp_nonpositive(b[v] - top);
    for (int v = 0; v < n_views; ++v) sum += b[v];
    float colour[3] = {0.0f, 0.0f, 0.0f};
    for (int v = 0; v < n_views; ++v) {
      b[v] /= sum;
      const float* features = rgb_features + (row + v) * feature_width;
      for (int c = 0; c < 3; ++c) colour[c] += features[c] * b[v];
    }
    for (int c = 0; c < 3; ++c) rgb[j * 3 + c] = colour[c];
  }
}

// ---- Backward kernels ----

// A thread per sample: the blending softmax's backward, dL/dlogit_v = b_v (g_v - sum_u b_u g_u)
// with g_v = grad_rgb . colour_v, and none into masked logits.
__global__ void blending_backward_kernel(size_t samples, int n_views, int feature_width,
                                         const float* mask, const float* rgb_features,
                                         const float* blend, const float* grad_rgb,
                                         float* g_logit) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    const float* up = grad_rgb + j * 3;
    float weighted = 0.0f;
    for (int v = 0; v < n_views; ++v) {
      const float* colour = rgb_features + (row + v) * feature_width;
      const float g = up[0] * colour[0] + up[1] * colour[1] + up[2] * colour[2];
      g_logit[row + v] = g;
      weighted += blend[row + v] * g;
    }
    for (int v = 0; v < n_views; ++v) {
      const size_t i = row + v;
      g_logit[i] = mask[i] == 0.0f ? 0.0f : blend[i] * (g_logit[i] - weighted);
    }
  }
}

// The gradient of rgb_fc's input, split: g_x [rows, width] and g_vis [rows] (ray_diff gets none).
__global__ void split_colour_input_gradient_kernel(size_t rows, int width, const float* g_rgb_in,
                                                   float* g_x, float* g_vis) {
  const int in = width + 5;
  const size_t count = rows * size_t(width + 1);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width + 1);
    const int c = int(i % size_t(width + 1));
    const float g = g_rgb_in[row * in + c];
    if (c < width) {
      g_x[row * width + c] = g;
    } else {
      g_vis[row] = g;
    }
  }
}

// The density's gradient: zero where no view sees the sample.
__global__ void density_backward_kernel(size_t samples, const float* n_valid,
                                        const float* grad_sigma, float* g_sigma) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    g_sigma[j] = n_valid[j] < 1 ? 0.0f : grad_sigma[j];
  }
}

// A thread per (ray, head, query i), MultiHeadAttention::backward's loop over queries: the
// probabilities' gradient grad_out . v_j, the softmax's backward scaled by 1 / sqrt(d_k) into
// grad_scores (zero where the forward masked), and grad_q_i = sum_j grad_score_j k_j.
__global__ void attention_scores_backward_kernel(AttentionShape shape, const float* k,
                                                 const float* v, const float* valid,
                                                 const float* probs, const float* grad_heads,
                                                 float* grad_scores, float* grad_q) {
  const int qk = shape.qk(), vw = shape.vw(), len = shape.len;
  const float inv_temperature = 1.0f / sqrtf(float(shape.d_k));
  for (size_t t = grid_thread_index(); t < shape.count(); t += grid_thread_count()) {
    const int i = int(t % size_t(len));
    const size_t sequence = t / size_t(len);
    const int h = int(sequence % size_t(shape.heads));
    const size_t first = (sequence / size_t(shape.heads)) * len;
    const float* valid_ray = valid + first;
    const float* p = probs + t * len;
    float* gs = grad_scores + t * len;
    const float* go = grad_heads + (first + i) * vw + h * shape.d_v;
    float weighted = 0.0f;
    for (int j = 0; j < len; ++j) {
      const float* v_j = v + (first + j) * vw + h * shape.d_v;
      float g = 0.0f;
      for (int c = 0; c < shape.d_v; ++c) g += go[c] * v_j[c];
      gs[j] = g;
      weighted += p[j] * g;
    }
    for (int j = 0; j < len; ++j) {
      // masked_fill passes no gradient to the scores it replaced.
      gs[j] = shape.masked(valid_ray, i, j) ? 0.0f : p[j] * (gs[j] - weighted) * inv_temperature;
    }
    for (int c = 0; c < shape.d_k; ++c) {
      float sum = 0.0f;
      for (int j = 0; j < len; ++j) sum += gs[j] * k[(first + j) * qk + h * shape.d_k + c];
      grad_q[(first + i) * qk + h * shape.d_k + c] = sum;
    }
  }
}

// A thread per (ray, head, key j): grad_k_j = sum_i grad_score_ij q_i and
// grad_v_j = sum_i p_ij grad_out_i, queries in order (the CPU's accumulation over i).
__global__ void attention_keys_values_backward_kernel(AttentionShape shape, const float* q,
                                                      const float* probs, const float* grad_heads,
                                                      const float* grad_scores, float* grad_k,
                                                      float* grad_v) {
  const int qk = shape.qk(), vw = shape.vw(), len = shape.len;
  for (size_t t = grid_thread_index(); t < shape.count(); t += grid_thread_count()) {
    const int j = int(t % size_t(len));
    const size_t sequence = t / size_t(len);
    const int h = int(sequence % size_t(shape.heads));
    const size_t first = (sequence / size_t(shape.heads)) * len;
    const size_t column = sequence * len * len + j;  // (sequence, i = 0, j)
    for (int c = 0; c < shape.d_k; ++c) {
      float sum = 0.0f;
      for (int i = 0; i < len; ++i) {
        sum += grad_scores[column + size_t(i) * len] * q[(first + i) * qk + h * shape.d_k + c];
      }
      grad_k[(first + j) * qk + h * shape.d_k + c] = sum;
    }
    for (int c = 0; c < shape.d_v; ++c) {
      float sum = 0.0f;
      for (int i = 0; i < len; ++i) {
        sum += probs[column + size_t(i) * len] * grad_heads[(first + i) * vw + h * shape.d_v + c];
      }
      grad_v[(first + j) * vw + h * shape.d_v + c] = sum;
    }
  }
}

// A warp per sample: the backward of the visibility-weighted mean and variance of x (width
// channels) and of the mean weight (geometry_in = [mean, var, mean weight], stride 2 width + 1),
// then of the weights' normalisation: adds to g_x, and adds each view's visibility gradient to
// g_vis. g_vis_weight [rows] is scratch for the per-view parts.
__global__ void visibility_weights_backward_kernel(size_t samples, int n_views, int width,
                                                   const float* x, const float* vis_weight,
                                                   const float* denominator,
                                                   const float* geometry_in,
                                                   const float* g_geometry_in, float* g_x,
                                                   float* g_vis_weight, float* g_vis) {
  const int stride = 2 * width + 1;
  for (size_t j = warp_index(); j < samples; j += warp_count()) {
    const size_t row = j * n_views;
    const float* in = geometry_in + j * stride;
    const float* g_in = g_geometry_in + j * stride;
    const float common =
        mean_var_backward_warp(n_views, width, x + row * width, vis_weight + row, denominator[j],
                               in, g_in, g_in + width, g_x + row * width, g_vis_weight + row);
    const float g_mean_weight = g_in[2 * width] / float(n_views);
    for (int v = lane_index(); v < n_views; v += kWarpSize) {
      g_vis[row + v] += normalisation_backward(n_views, v, vis_weight + row, g_vis_weight + row,
                                               common + g_mean_weight, denominator[j]);
    }
  }
}

// vis = sigmoid(z) * mask: g_vis2 = g_vis mask vis2 (1 - vis2), rounded as the CPU's
// g_vis2 = g_vis * mask, then sigmoid_backward.
__global__ void visibility_sigmoid_backward_kernel(size_t rows, const float* mask,
                                                   const float* vis2, const float* g_vis,
                                                   float* g_vis2) {
  for (size_t i = grid_thread_index(); i < rows; i += grid_thread_count()) {
    const float g = g_vis[i] * mask[i];
    g_vis2[i] = g * (vis2[i] * (1.0f - vis2[i]));
  }
}

// A warp per row, lanes over channels: the backward of x_vis_weighted = x * sig_vis * mask. Adds
// to g_x, then writes vis_fc's output gradient g_x_vis [rows, width + 1]: the residual's (g_x)
// and the first visibility's through its sigmoid.
__global__ void first_visibility_backward_kernel(size_t rows, int width, const float* mask,
                                                 const float* sig_vis, const float* x,
                                                 const float* g_x_vis_weighted, float* g_x,
                                                 float* g_x_vis) {
  const int lane = lane_index();
  for (size_t i = warp_index(); i < rows; i += warp_count()) {
    const float first = sig_vis[i] * mask[i];
    float g_first = 0.0f;
    float* g_xv = g_x_vis + i * (width + 1);
    for (int c = lane; c < width; c += kWarpSize) {
      const size_t at = i * width + c;
      const float g = g_x_vis_weighted[at];
      g_first += g * x[at];
      g_x[at] += g * first;
      g_xv[c] = g_x[at];  // x = x_base + residual
    }
    g_first = warp_all_sum(g_first);
    if (lane == 0) g_xv[width] = g_first * mask[i] * sig_vis[i] * (1.0f - sig_vis[i]);
  }
}

// A warp per row: the backward of x_pooled = x_base * pool: g_pool [rows] (overwritten) and
// g_x_base = g_x + g_x_pooled * pool (x_base feeds x directly too).
__global__ void pooled_features_backward_kernel(size_t rows, int width, const float* x_base,
                                                const float* pool, const float* g_x_pooled,
                                                const float* g_x, float* g_x_base, float* g_pool) {
  const int lane = lane_index();
  for (size_t i = warp_index(); i < rows; i += warp_count()) {
    float g_weight = 0.0f;
    for (int c = lane; c < width; c += kWarpSize) {
      const size_t at = i * width + c;
      const float g = g_x_pooled[at];
      g_weight += g * x_base[at];
      g_x_base[at] = g_x[at] + g * pool[i];
    }
    g_weight = warp_all_sum(g_weight);
    if (lane == 0) g_pool[i] = g_weight;
  }
}

// per_sample [samples, width] = sum over the sample's views of per_row, views in order: a
// sample's mean and variance feed base_fc for every one of its views.
__global__ void sum_over_views_kernel(size_t samples, int n_views, int width, const float* per_row,
                                      float* per_sample) {
  const size_t count = samples * size_t(width);
  for (size_t t = grid_thread_index(); t < count; t += grid_thread_count()) {
    const size_t j = t / size_t(width);
    const size_t c = t % size_t(width);
    float sum = 0.0f;
    for (int v = 0; v < n_views; ++v) sum += per_row[(j * n_views + v) * width + c];
    per_sample[t] = sum;
  }
}

// A warp per sample: the backward of the pooled mean and variance of the features (mean_var
// [samples, 2 width]). Adds to g_feat; adds each weight's per-view part to g_pool and writes the
// common part to g_pool_common. g_pool_weight [rows] is scratch.
__global__ void pooling_mean_variance_backward_kernel(
    size_t samples, int n_views, int width, const float* feat, const float* pool,
    const float* denominator, const float* mean_var, const float* g_mean_var, float* g_feat,
    float* g_pool_weight, float* g_pool, float* g_pool_common) {
  for (size_t j = warp_index(); j < samples; j += warp_count()) {
    const size_t row = j * n_views;
    const float* mean = mean_var + j * 2 * width;
    const float* g_mean = g_mean_var + j * 2 * width;
    const float common =
        mean_var_backward_warp(n_views, width, feat + row * width, pool + row, denominator[j], mean,
                               g_mean, g_mean + width, g_feat + row * width, g_pool_weight + row);
    for (int v = lane_index(); v < n_views; v += kWarpSize)
      g_pool[row + v] += g_pool_weight[row + v];
    if (lane_index() == 0) g_pool_common[j] = common;
  }
}

// A thread per sample, in double as on the CPU (backward_chunk's last loop): the sample's part of
// dL/d|s| through raw_v = (e_v - min_u e_u) mask_v, e_v = exp(|s| (d_v - 1)), pool = raw / D,
// with the weights recomputed in double (into the scratch e and weight [rows]) and the incoming
// g_pool and its common part g_pool_common. Written to partial[sample].
__global__ void sharpness_gradient_kernel(size_t samples, int n_views, const float* sharpness,
                                          const float* ray_diff, const float* mask,
                                          const float* g_pool, const float* g_pool_common,
                                          double* e, double* weight, double* partial) {
  const double scale = fabs(double(*sharpness));
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    const float* valid = mask + row;
    double* e_j = e + row;
    double* w_j = weight + row;
    auto dot_minus_one = [&](int v) { return double(ray_diff[(row + v) * 4 + 3]) - 1; };
    int low = 0;  // the first minimum, as torch.min picks
    for (int v = 0; v < n_views; ++v) {
      e_j[v] = exp(scale * dot_minus_one(v));
      if (e_j[v] < e_j[low]) low = v;
    }
    double sum = 0;
    for (int v = 0; v < n_views; ++v) sum += (e_j[v] - e_j[low]) * valid[v];
    const double d = sum + kWeightEpsilonDouble;
    for (int v = 0; v < n_views; ++v) w_j[v] = (e_j[v] - e_j[low]) * valid[v] / d;
    const double low_slope = dot_minus_one(low) * e_j[low];
    double g_scale = 0;
    for (int v = 0; v < n_views; ++v) {
      if (valid[v] == 0.0f) continue;
      const double g_raw =
          normalisation_backward(n_views, v, w_j, g_pool + row, double(g_pool_common[j]), d);
      g_scale += g_raw * (dot_minus_one(v) * e_j[v] - low_slope);
    }
    partial[j] = g_scale;
  }
}

// One block: grad_s += sign(s) * sum of the samples' parts (d|s|/ds, 0 at 0), each thread
// summing a fixed stride of them in order, then the block's fixed tree.
__global__ void __launch_bounds__(kReductionThreads)
    add_sharpness_gradient_kernel(size_t samples, const double* partial, const float* sharpness,
                                  float* grad_sharpness) {
  __shared__ double shared[kWarpSize];
  double sum = 0;
  for (size_t j = threadIdx.x; j < samples; j += blockDim.x) sum += partial[j];
  const double total = block_all_sum(sum, shared);
  if (threadIdx.x == 0) {
    const double s = *sharpness;
    *grad_sharpness += float((s > 0 ? 1 : (s < 0 ? -1 : 0)) * total);
  }
}

// grad_rgb_features [rows, width] = g_feat, plus grad_rgb * blend on the colours, which also
// blend into the output directly.
__global__ void feature_input_gradient_kernel(size_t rows, int n_views, int width,
                                              const float* g_feat, const float* grad_rgb,
                                              const float* blend, float* grad_rgb_features) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width);
    const int c = int(i % size_t(width));
    float g = g_feat[i];
    if (c < 3) g += grad_rgb[(row / n_views) * 3 + c] * blend[row];
    grad_rgb_features[i] = g;
  }
}

// ---- Host side ----

template <typename... Params, typename... Args>
void launch(size_t threads, cudaStream_t stream, void (*kernel)(Params...), Args&&... args) {
  if (threads == 0) return;
  MVIBR_LAUNCH(kernel, blocks_for(threads, kThreadsPerBlock), kThreadsPerBlock, 0, stream)
  (std::forward<Args>(args)...);
  MVIBR_CUDA_CHECK_LAUNCH();
}

// A launch with a warp per item.
template <typename... Params, typename... Args>
void launch_warps(size_t items, cudaStream_t stream, void (*kernel)(Params...), Args&&... args) {
  launch(items * kWarpSize, stream, kernel, std::forward<Args>(args)...);
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

// Device memory that grows on demand and never shrinks. Growing first waits for the stream, so
// no queued work still uses the old allocation; the contents are not kept.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);  // waits for the device; errors cannot be reported here
  }

  char* reserve(size_t bytes, cudaStream_t stream) {
    if (bytes > bytes_) {
      MVIBR_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (data_) MVIBR_CUDA_CHECK(cudaFree(data_));
      data_ = nullptr;
      bytes_ = 0;
      MVIBR_CUDA_CHECK(cudaMalloc(&data_, bytes));
      bytes_ = bytes;
    }
    return static_cast<char*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

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

// The network's widths, from its layers.
struct Widths {
  explicit Widths(const nn::IbrnetAggregator& network) {
    const nn::IbrnetAggregator::Layers layers = network.layers();
    const MultiHeadAttention& attention = layers.ray_attention;
    feature = network.options().feature_channels + 3;
    dir_hidden = layers.ray_dir_0.out();
    base_hidden = layers.base_0.out();
    x = layers.base_2.out();
    geometry_in = layers.geometry_0.in();
    geometry_hidden = layers.geometry_0.out();
    token = attention.d_model();
    heads = attention.n_head();
    d_k = attention.d_k();
    d_v = attention.d_v();
    sigma_hidden = layers.out_geometry_0.out();
    rgb_in = layers.rgb_0.in();
    rgb_hidden = layers.rgb_0.out();
    rgb_hidden2 = layers.rgb_2.out();
  }
  int feature, dir_hidden, base_hidden, x, geometry_in, geometry_hidden, token, heads, d_k, d_v,
      sigma_hidden, rgb_in, rgb_hidden, rgb_hidden2;
};

// One batch's sizes: rays, samples per ray, views; rows = R S V, samples = R S.
struct Sizes {
  size_t rays = 0, len = 0, views = 0, rows = 0, samples = 0;
};

// What the forward keeps for the backward, named as in aggregator.cpp's Activations.
struct ForwardArrays {
  // per (ray, sample, view) row
  float *h_dir, *dir, *feat, *pool, *h_base, *x_base, *x_pooled, *h_vis, *x_vis, *sig_vis, *x,
      *x_vis_weighted, *h_vis2, *vis2, *vis, *vis_weight, *rgb_in, *h_rgb, *h_rgb2, *blend;
  // per (ray, sample)
  float *pool_denominator, *mean_var, *h_mean_var, *vis_denominator, *geometry_in, *h_geometry,
      *geometry_out, *n_valid, *valid_tokens, *tokens, *q, *k, *v, *heads, *attention_sum, *xhat,
      *rstd, *attention_out, *h_sigma, *sigma_relu;
  float* probs;  // [rays, heads, samples, samples]

  ForwardArrays(Carver& carve, const Sizes& s, const Widths& w) {
    const size_t n = s.rows, m = s.samples;
    h_dir = carve.take<float>(n * w.dir_hidden);
    dir = carve.take<float>(n * w.feature);
    feat = carve.take<float>(n * w.feature);
    pool = carve.take<float>(n);
    h_base = carve.take<float>(n * w.base_hidden);
    x_base = carve.take<float>(n * w.x);
    x_pooled = carve.take<float>(n * w.x);
    h_vis = carve.take<float>(n * w.x);
    x_vis = carve.take<float>(n * (w.x + 1));
    sig_vis = carve.take<float>(n);
    x = carve.take<float>(n * w.x);
    x_vis_weighted = carve.take<float>(n * w.x);
    h_vis2 = carve.take<float>(n * w.x);
    vis2 = carve.take<float>(n);
    vis = carve.take<float>(n);
    vis_weight = carve.take<float>(n);
    rgb_in = carve.take<float>(n * w.rgb_in);
    h_rgb = carve.take<float>(n * w.rgb_hidden);
    h_rgb2 = carve.take<float>(n * w.rgb_hidden2);
    blend = carve.take<float>(n);
    pool_denominator = carve.take<float>(m);
    mean_var = carve.take<float>(m * 2 * w.feature);
    h_mean_var = carve.take<float>(m * w.base_hidden);
    vis_denominator = carve.take<float>(m);
    geometry_in = carve.take<float>(m * w.geometry_in);
    h_geometry = carve.take<float>(m * w.geometry_hidden);
    geometry_out = carve.take<float>(m * w.token);
    n_valid = carve.take<float>(m);
    valid_tokens = carve.take<float>(m);
    tokens = carve.take<float>(m * w.token);
    q = carve.take<float>(m * w.heads * w.d_k);
    k = carve.take<float>(m * w.heads * w.d_k);
    v = carve.take<float>(m * w.heads * w.d_v);
    heads = carve.take<float>(m * w.heads * w.d_v);
    attention_sum = carve.take<float>(m * w.token);
    xhat = carve.take<float>(m * w.token);
    rstd = carve.take<float>(m);
    attention_out = carve.take<float>(m * w.token);
    h_sigma = carve.take<float>(m * w.sigma_hidden);
    sigma_relu = carve.take<float>(m);
    probs = carve.take<float>(m * w.heads * s.len);
  }
};

// The backward's gradients, g_* of the activation of the same name, and its scratch.
struct BackwardArrays {
  // per row
  float *g_logit, *g_h_rgb2, *g_h_rgb, *g_rgb_in, *g_x, *g_vis, *g_vis_weight, *g_vis2, *g_h_vis2,
      *g_x_vis_weighted, *g_x_vis, *g_h_vis, *g_x_pooled, *g_x_base, *g_pool, *g_pool_weight,
      *g_h_base, *g_feat, *g_h_dir;
  // per sample
  float *g_sigma, *g_h_sigma, *g_attention_out, *g_attention_sum, *g_tokens, *g_heads, *g_q, *g_k,
      *g_v, *g_h_geometry, *g_geometry_in, *g_h_mean_var, *g_mean_var, *g_pool_common;
  float* g_scores;  // [rays, heads, samples, samples]
  // the sharpness gradient in double (anti-aliased pooling only): weights per row, parts per sample
  double *pooling_exp, *pooling_weight, *sharpness_parts;

  BackwardArrays(Carver& carve, const Sizes& s, const Widths& w, bool anti_alias_pooling) {
    const size_t n = s.rows, m = s.samples;
    g_logit = carve.take<float>(n);
    g_h_rgb2 = carve.take<float>(n * w.rgb_hidden2);
    g_h_rgb = carve.take<float>(n * w.rgb_hidden);
    g_rgb_in = carve.take<float>(n * w.rgb_in);
    g_x = carve.take<float>(n * w.x);
    g_vis = carve.take<float>(n);
    g_vis_weight = carve.take<float>(n);
    g_vis2 = carve.take<float>(n);
    g_h_vis2 = carve.take<float>(n * w.x);
    g_x_vis_weighted = carve.take<float>(n * w.x);
    g_x_vis = carve.take<float>(n * (w.x + 1));
    g_h_vis = carve.take<float>(n * w.x);
    g_x_pooled = carve.take<float>(n * w.x);
    g_x_base = carve.take<float>(n * w.x);
    g_pool = carve.take<float>(n);
    g_pool_weight = carve.take<float>(n);
    g_h_base = carve.take<float>(n * w.base_hidden);
    g_feat = carve.take<float>(n * w.feature);
    g_h_dir = carve.take<float>(n * w.dir_hidden);
    g_sigma = carve.take<float>(m);
    g_h_sigma = carve.take<float>(m * w.sigma_hidden);
    g_attention_out = carve.take<float>(m * w.token);
    g_attention_sum = carve.take<float>(m * w.token);
    g_tokens = carve.take<float>(m * w.token);
    g_heads = carve.take<float>(m * w.heads * w.d_v);
    g_q = carve.take<float>(m * w.heads * w.d_k);
    g_k = carve.take<float>(m * w.heads * w.d_k);
    g_v = carve.take<float>(m * w.heads * w.d_v);
    g_h_geometry = carve.take<float>(m * w.geometry_hidden);
    g_geometry_in = carve.take<float>(m * w.geometry_in);
    g_h_mean_var = carve.take<float>(m * w.base_hidden);
    g_mean_var = carve.take<float>(m * 2 * w.feature);
    g_pool_common = carve.take<float>(m);
    g_scores = carve.take<float>(m * w.heads * s.len);
    const size_t pooling = anti_alias_pooling ? 1 : 0;
    pooling_exp = carve.take<double>(pooling * n);
    pooling_weight = carve.take<double>(pooling * n);
    sharpness_parts = carve.take<double>(pooling * m);
  }
};

// Lays T's arrays out in `buffer`, grown to fit.
template <typename T, typename... Args>
T lay_out(DeviceBuffer& buffer, cudaStream_t stream, const Args&... args) {
  Carver count(nullptr);
  static_cast<void>(T(count, args...));  // counts the bytes
  Carver carve(buffer.reserve(count.used(), stream));
  return T(carve, args...);
}

}  // namespace

struct IbrnetAggregator::Impl {
  explicit Impl(const nn::IbrnetAggregator& network)
      : layers(network.layers()),
        widths(network),
        n_samples_max(network.options().n_samples_max),
        anti_alias_pooling(network.options().anti_alias_pooling),
        mask_keys(layers.ray_attention.mask() == AttentionMask::kKeys),
        sharpness_offset(network.sharpness_offset()),
        positional_encoding(network.positional_encoding().begin(),
                            network.positional_encoding().end()) {}

  // The positional encoding on the device, uploaded by the first call.
  const float* encoding(cudaStream_t stream) {
    if (!encoding_on_device) {
      const size_t bytes = positional_encoding.size() * sizeof(float);
      float* table = reinterpret_cast<float*>(encoding_buffer.reserve(bytes, stream));
      MVIBR_CUDA_CHECK(cudaMemcpyAsync(table, positional_encoding.data(), bytes,
                                       cudaMemcpyHostToDevice, stream));
      encoding_on_device = table;
    }
    return encoding_on_device;
  }

  void check_sizes(int n_rays, int n_samples, int n_views) const {
    if (n_rays < 0 || n_samples < 1 || n_samples > n_samples_max || n_views < 1) {
      throw InvalidArgument("aggregator on the GPU: need n_rays >= 0, 1 <= n_samples <= " +
                            std::to_string(n_samples_max) + " and n_views >= 1 (got " +
                            std::to_string(n_rays) + ", " + std::to_string(n_samples) + ", " +
                            std::to_string(n_views) + ")");
    }
  }

  // The forward over the rays of `s` (inputs and outputs from their first), activations into `a`.
  void run_forward(Context& context, const Sizes& s, const float* params, const float* rgb_features,
                   const float* ray_diff, const float* mask, float* rgb, float* sigma,
                   const ForwardArrays& a) {
    const cudaStream_t stream = context.impl().stream;
    const Widths& w = widths;
    const float* encoding_table = encoding(stream);
    const size_t n = s.rows, m = s.samples;
    const int V = int(s.views);
    constexpr Activation kNone = Activation::kNone, kElu = Activation::kElu;

    // Direction features, added to colours and features.
    dense_forward(context, layers.ray_dir_0, n, params, ray_diff, kElu, a.h_dir);
    dense_forward(context, layers.ray_dir_2, n, params, a.h_dir, kElu, a.dir);
    launch(n * w.feature, stream, add_kernel, n * w.feature, rgb_features, a.dir, a.feat);

    // Pooling weights, the pooled mean and variance of the features, and base_fc: its weights
    // split into the part for the mean and variance (once per sample, with the bias) and the part
    // for the view's own features.
    launch(m, stream, pooling_weights_kernel, m, V,
           anti_alias_pooling ? params + sharpness_offset : nullptr, ray_diff, mask, a.pool,
           a.pool_denominator);
    launch(m * w.feature, stream, weighted_mean_variance_kernel, m, V, w.feature, a.feat, a.pool,
           a.mean_var, 2 * w.feature);
    dense_slice_forward(context, layers.base_0, m, 0, 2 * w.feature, true, params, a.mean_var,
                        a.h_mean_var);
    dense_slice_forward(context, layers.base_0, n, 2 * w.feature, w.feature, false, params, a.feat,
                        a.h_base);
    launch(n * w.base_hidden, stream, add_sample_part_elu_kernel, n, V, w.base_hidden, a.h_mean_var,
           a.h_base);
    dense_forward(context, layers.base_2, n, params, a.h_base, kElu, a.x_base);

    // Visibility: a residual for the features and a first visibility from the pooled features,
    // then the visibility and its weights, and the weighted mean and variance of x.
    launch(n * w.x, stream, scale_rows_kernel, n, w.x, a.x_base, a.pool, a.x_pooled);
    dense_forward(context, layers.vis_0, n, params, a.x_pooled, kElu, a.h_vis);
    dense_forward(context, layers.vis_2, n, params, a.h_vis, kElu, a.x_vis);
    launch(n * w.x, stream, visibility_residual_kernel, n, w.x, a.x_base, a.x_vis, mask, a.sig_vis,
           a.x, a.x_vis_weighted);
    dense_forward(context, layers.vis2_0, n, params, a.x_vis_weighted, kElu, a.h_vis2);
    dense_forward(context, layers.vis2_2, n, params, a.h_vis2, kNone, a.vis2);
    launch(m, stream, visibility_weights_kernel, m, V, mask, a.vis2, a.vis, a.vis_weight,
           a.vis_denominator, a.geometry_in + 2 * w.x, w.geometry_in);
    launch(m * w.x, stream, weighted_mean_variance_kernel, m, V, w.x, a.x, a.vis_weight,
           a.geometry_in, w.geometry_in);
    dense_forward(context, layers.geometry_0, m, params, a.geometry_in, kElu, a.h_geometry);
    dense_forward(context, layers.geometry_2, m, params, a.h_geometry, kElu, a.geometry_out);

    // The ray transformer over the samples of each ray, then density.
    const MultiHeadAttention& attention = layers.ray_attention;
    const AttentionShape shape{s.rays, int(s.len), w.heads, w.d_k, w.d_v, mask_keys};
    launch(m, stream, tokens_kernel, m, int(s.len), V, w.token, mask, a.geometry_out,
           encoding_table, a.n_valid, a.valid_tokens, a.tokens);
    dense_forward(context, attention.w_qs(), m, params, a.tokens, kNone, a.q);
    dense_forward(context, attention.w_ks(), m, params, a.tokens, kNone, a.k);
    dense_forward(context, attention.w_vs(), m, params, a.tokens, kNone, a.v);
    launch(m * w.heads, stream, attention_forward_kernel, shape, a.q, a.k, a.v, a.valid_tokens,
           a.probs, a.heads);
    dense_forward(context, attention.fc(), m, params, a.heads, kNone, a.attention_sum);
    launch(m * w.token, stream, accumulate_kernel, m * w.token, a.tokens, a.attention_sum);
    const LayerNorm& norm = attention.layer_norm();
    layer_norm_forward(context, m, w.token, norm.eps(), params + norm.weight_offset(),
                       params + norm.bias_offset(), a.attention_sum, a.attention_out, a.xhat,
                       a.rstd);
    dense_forward(context, layers.out_geometry_0, m, params, a.attention_out, kElu, a.h_sigma);
    dense_forward(context, layers.out_geometry_2, m, params, a.h_sigma, Activation::kRelu,
                  a.sigma_relu);
    launch(m, stream, density_kernel, m, a.n_valid, a.sigma_relu, sigma);

    // Colour: blending weights over views from x, the visibility and the direction difference.
    launch(n * w.rgb_in, stream, colour_input_kernel, n, w.x, a.x, a.vis, ray_diff, a.rgb_in);
    dense_forward(context, layers.rgb_0, n, params, a.rgb_in, kElu, a.h_rgb);
    dense_forward(context, layers.rgb_2, n, params, a.h_rgb, kElu, a.h_rgb2);
    dense_forward(context, layers.rgb_4, n, params, a.h_rgb2, kNone, a.blend);
    launch(m, stream, blending_kernel, m, V, w.feature, mask, rgb_features, a.blend, rgb);
  }

  nn::IbrnetAggregator::Layers layers;
  Widths widths;
  int n_samples_max;
  bool anti_alias_pooling, mask_keys;
  size_t sharpness_offset;
  std::vector<float> positional_encoding;  // [n_samples_max, token], the CPU's table in float

  // inference_buffer: one chunk's activations for infer(), reused chunk after chunk.
  DeviceBuffer encoding_buffer, forward_buffer, backward_buffer, inference_buffer;
  const float* encoding_on_device = nullptr;

  // The last forward: its sizes, inputs and activations.
  bool has_forward = false;
  Sizes sizes;
  const float* kept_rgb_features = nullptr;
  const float* kept_ray_diff = nullptr;
  const float* kept_mask = nullptr;
  std::optional<ForwardArrays> activations;
};

IbrnetAggregator::IbrnetAggregator(const nn::IbrnetAggregator& network)
    : impl_(std::make_unique<Impl>(network)) {}

IbrnetAggregator::~IbrnetAggregator() = default;

void IbrnetAggregator::forward(Context& context, int n_rays, int n_samples, int n_views,
                               const float* params, const float* rgb_features,
                               const float* ray_diff, const float* mask, float* rgb, float* sigma) {
  Impl& im = *impl_;
  im.check_sizes(n_rays, n_samples, n_views);
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
  im.kept_rgb_features = rgb_features;
  im.kept_ray_diff = ray_diff;
  im.kept_mask = mask;
  if (s.rows == 0) {
    im.has_forward = true;
    return;
  }

  const cudaStream_t stream = context.impl().stream;
  im.activations.emplace(lay_out<ForwardArrays>(im.forward_buffer, stream, s, im.widths));
  im.run_forward(context, s, params, rgb_features, ray_diff, mask, rgb, sigma, *im.activations);
  im.has_forward = true;
}

void IbrnetAggregator::infer(Context& context, int n_rays, int n_samples, int n_views,
                             const float* params, const float* rgb_features, const float* ray_diff,
                             const float* mask, float* rgb, float* sigma, size_t rows_per_chunk) {
  Impl& im = *impl_;
  im.check_sizes(n_rays, n_samples, n_views);
  const cudaStream_t stream = context.impl().stream;
  const size_t ray_rows = size_t(n_samples) * size_t(n_views);
  const size_t chunk_rays = std::max<size_t>(1, rows_per_chunk / ray_rows);
  const size_t feature_width = size_t(im.widths.feature);  // colour and features per row
  for (size_t first = 0; first < size_t(n_rays); first += chunk_rays) {
    Sizes s;
    s.rays = std::min(chunk_rays, size_t(n_rays) - first);
    s.len = size_t(n_samples);
    s.views = size_t(n_views);
    s.samples = s.rays * s.len;
    s.rows = s.samples * s.views;
    const size_t row = first * ray_rows, sample = first * size_t(n_samples);
    const ForwardArrays a = lay_out<ForwardArrays>(im.inference_buffer, stream, s, im.widths);
    im.run_forward(context, s, params, rgb_features + row * feature_width, ray_diff + row * 4,
                   mask + row, rgb + sample * 3, sigma + sample, a);
  }
}

size_t IbrnetAggregator::device_bytes() const {
  const Impl& im = *impl_;
  return im.encoding_buffer.bytes() + im.forward_buffer.bytes() + im.backward_buffer.bytes() +
         im.inference_buffer.bytes();
}

// Mirrors forward from the outputs back, as backward_chunk does.
void IbrnetAggregator::backward(Context& context, const float* params, float* grads,
                                const float* grad_rgb, const float* grad_sigma,
                                float* grad_rgb_features) {
  Impl& im = *impl_;
  if (!im.has_forward) {
    throw InvalidArgument(
        "aggregator backward on the GPU: there is no forward pass to go back "
        "through");
  }
  const Sizes& s = im.sizes;
  if (s.rows == 0) return;
  const cudaStream_t stream = context.impl().stream;
  const Widths& w = im.widths;
  const nn::IbrnetAggregator::Layers& layers = im.layers;
  const ForwardArrays& a = *im.activations;
  const BackwardArrays g =
      lay_out<BackwardArrays>(im.backward_buffer, stream, s, w, im.anti_alias_pooling);
  const size_t n = s.rows, m = s.samples;
  const int V = int(s.views);
  const float* mask = im.kept_mask;
  constexpr Activation kNone = Activation::kNone, kElu = Activation::kElu;

  // Colour: softmax over views (no gradient into masked logits), then rgb_fc.
  launch(m, stream, blending_backward_kernel, m, V, w.feature, mask, im.kept_rgb_features, a.blend,
         grad_rgb, g.g_logit);
  // rgb_fc.4's bias gradient is exactly zero (it shifts all logits of a sample alike; see the
  // CPU network) and is left so.
  dense_slice_backward(context, layers.rgb_4, n, 0, layers.rgb_4.in(), /*with_bias=*/false, params,
                       grads, kNone, nullptr, g.g_logit, a.h_rgb2, g.g_h_rgb2);
  dense_backward(context, layers.rgb_2, n, params, grads, kElu, a.h_rgb2, g.g_h_rgb2, a.h_rgb,
                 g.g_h_rgb);
  dense_backward(context, layers.rgb_0, n, params, grads, kElu, a.h_rgb, g.g_h_rgb, a.rgb_in,
                 g.g_rgb_in);
  launch(n * (w.x + 1), stream, split_colour_input_gradient_kernel, n, w.x, g.g_rgb_in, g.g_x,
         g.g_vis);

  // Density: zero where no view sees the sample, then the ReLU, out_geometry_fc and the ray
  // transformer (LayerNorm, fc and the residual, attention, projections), then geometry_fc.
  launch(m, stream, density_backward_kernel, m, a.n_valid, grad_sigma, g.g_sigma);
  dense_backward(context, layers.out_geometry_2, m, params, grads, Activation::kRelu, a.sigma_relu,
                 g.g_sigma, a.h_sigma, g.g_h_sigma);
  dense_backward(context, layers.out_geometry_0, m, params, grads, kElu, a.h_sigma, g.g_h_sigma,
                 a.attention_out, g.g_attention_out);
  const MultiHeadAttention& attention = layers.ray_attention;
  const LayerNorm& norm = attention.layer_norm();
  layer_norm_backward(context, m, w.token, params + norm.weight_offset(), a.xhat, a.rstd,
                      g.g_attention_out, g.g_attention_sum, grads + norm.weight_offset(),
                      grads + norm.bias_offset());
  MVIBR_CUDA_CHECK(cudaMemcpyAsync(g.g_tokens, g.g_attention_sum, m * w.token * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream));  // the residual
  dense_backward(context, attention.fc(), m, params, grads, kNone, nullptr, g.g_attention_sum,
                 a.heads, g.g_heads);
  const AttentionShape shape{s.rays, int(s.len), w.heads, w.d_k, w.d_v, im.mask_keys};
  launch(m * w.heads, stream, attention_scores_backward_kernel, shape, a.k, a.v, a.valid_tokens,
         a.probs, g.g_heads, g.g_scores, g.g_q);
  launch(m * w.heads, stream, attention_keys_values_backward_kernel, shape, a.q, a.probs, g.g_heads,
         g.g_scores, g.g_k, g.g_v);
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
  launch_warps(m, stream, visibility_weights_backward_kernel, m, V, w.x, a.x, a.vis_weight,
               a.vis_denominator, a.geometry_in, g.g_geometry_in, g.g_x, g.g_vis_weight, g.g_vis);
  launch(n, stream, visibility_sigmoid_backward_kernel, n, mask, a.vis2, g.g_vis, g.g_vis2);
  dense_backward(context, layers.vis2_2, n, params, grads, kNone, nullptr, g.g_vis2, a.h_vis2,
                 g.g_h_vis2);
  dense_backward(context, layers.vis2_0, n, params, grads, kElu, a.h_vis2, g.g_h_vis2,
                 a.x_vis_weighted, g.g_x_vis_weighted);
  launch_warps(n, stream, first_visibility_backward_kernel, n, w.x, mask, a.sig_vis, a.x,
               g.g_x_vis_weighted, g.g_x, g.g_x_vis);
  dense_backward(context, layers.vis_2, n, params, grads, kElu, a.x_vis, g.g_x_vis, a.h_vis,
                 g.g_h_vis);
  dense_backward(context, layers.vis_0, n, params, grads, kElu, a.h_vis, g.g_h_vis, a.x_pooled,
                 g.g_x_pooled);
  launch_warps(n, stream, pooled_features_backward_kernel, n, w.x, a.x_base, a.pool, g.g_x_pooled,
               g.g_x, g.g_x_base, g.g_pool);

  // base_fc (its per-view part, then the per-sample part summed over views), then the pooled
  // mean and variance of the features back to every view and to the pooling weights.
  dense_backward(context, layers.base_2, n, params, grads, kElu, a.x_base, g.g_x_base, a.h_base,
                 g.g_h_base);
  dense_slice_backward(context, layers.base_0, n, 2 * w.feature, w.feature, false, params, grads,
                       kElu, a.h_base, g.g_h_base, a.feat, g.g_feat);
  launch(m * w.base_hidden, stream, sum_over_views_kernel, m, V, w.base_hidden, g.g_h_base,
         g.g_h_mean_var);
  dense_slice_backward(context, layers.base_0, m, 0, 2 * w.feature, true, params, grads, kNone,
                       nullptr, g.g_h_mean_var, a.mean_var, g.g_mean_var);
  launch_warps(m, stream, pooling_mean_variance_backward_kernel, m, V, w.feature, a.feat, a.pool,
               a.pool_denominator, a.mean_var, g.g_mean_var, g.g_feat, g.g_pool_weight, g.g_pool,
               g.g_pool_common);

  // The pooling sharpness s, in double.
  if (im.anti_alias_pooling) {
    const float* sharpness = params + im.sharpness_offset;
    launch(m, stream, sharpness_gradient_kernel, m, V, sharpness, im.kept_ray_diff, mask, g.g_pool,
           g.g_pool_common, g.pooling_exp, g.pooling_weight, g.sharpness_parts);
    MVIBR_LAUNCH(add_sharpness_gradient_kernel, 1, kReductionThreads, 0, stream)
    (m, g.sharpness_parts, sharpness, grads + im.sharpness_offset);
    MVIBR_CUDA_CHECK_LAUNCH();
  }

  // The inputs' gradient (before g_feat becomes ray_dir_fc's), then ray_dir_fc through the
  // direction features added to every channel.
  if (grad_rgb_features) {
    launch(n * w.feature, stream, feature_input_gradient_kernel, n, V, w.feature, g.g_feat,
           grad_rgb, a.blend, grad_rgb_features);
  }
  dense_backward(context, layers.ray_dir_2, n, params, grads, kElu, a.dir, g.g_feat, a.h_dir,
                 g.g_h_dir);
  dense_backward(context, layers.ray_dir_0, n, params, grads, kElu, a.h_dir, g.g_h_dir,
                 im.kept_ray_diff, nullptr);
}

}  // namespace mvibr::nn::cuda
