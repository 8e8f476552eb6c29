// The aggregation network's backward kernels (kernels/aggregator.cu launches them; see its note
// for how each follows the CPU network).
#pragma once

#include <cmath>

#include "../src/cuda/nn_context.h"
#include "../src/cuda/nn_device.h"
#include "aggregator_forward.cuh"
#include "common.h"

namespace mvibr::nn::cuda {

namespace {
// ---- Backward kernels ----

// A thread per sample: the blending softmax's backward, dL/dlogit_v = b_v (g_v - sum_u b_u g_u)
// with g_v = grad_rgb . colour_v, and none into masked logits.
__global__ void blending_backward_kernel(size_t samples, int n_views, int feature_width,
                                         const float* mask, const float* rgb_features,
                                         const float* blend, const float* grad_rgb,
                                         float* g_logit) {
  for (size_t j = grid_thread_index(); j < samples; j += grid_thread_count()) {
    const size_t row = j * n_views;
    blend_views_backward(n_views, mask + row, rgb_features + row * feature_width,
                         size_t(feature_width), blend + row, grad_rgb + j * 3, g_logit + row);
  }
}

// The dynamic network's colour: dL/dz of colour = sigmoid(z), and none where no view sees the
// sample, rounded as the CPU's g = grad_rgb, then g *= colour (1 - colour).
__global__ void colour_backward_kernel(size_t samples, const float* n_valid, const float* colour,
                                       const float* grad_rgb, float* g_colour) {
  const size_t count = samples * 3;
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const float g = n_valid[i / 3] < 1 ? 0.0f : grad_rgb[i];
    g_colour[i] = g * (colour[i] * (1.0f - colour[i]));
  }
}

// The gradient of rgb_fc's input [x, vis, ray_diff] (rows `stride` apart), split: g_x
// [rows, width] and g_vis [rows] (ray_diff gets none).
__global__ void split_colour_input_gradient_kernel(size_t rows, int width, int stride,
                                                   const float* g_rgb_in, float* g_x,
                                                   float* g_vis) {
  const size_t count = rows * size_t(width + 1);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width + 1);
    const int c = int(i % size_t(width + 1));
    const float g = g_rgb_in[row * stride + c];
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

// per_sample [samples, width] = sum over the sample's views of per_row (the first `width`
// columns of rows `stride` apart), views in order, from zero or (accumulate) from per_sample: a
// per-sample input that fed every view (base_fc's mean and variance, the dynamic network's time
// term, the static network's token in rgb_fc).
__global__ void sum_over_views_kernel(size_t samples, int n_views, int width, const float* per_row,
                                      int stride, bool accumulate, float* per_sample) {
  const size_t count = samples * size_t(width);
  for (size_t t = grid_thread_index(); t < count; t += grid_thread_count()) {
    const size_t j = t / size_t(width);
    const size_t c = t % size_t(width);
    float sum = accumulate ? per_sample[t] : 0.0f;
    for (int v = 0; v < n_views; ++v) sum += per_row[(j * n_views + v) * stride + c];
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
    double g_scale = 0;
    add_sharpness_gradient(n_views, scale, ray_diff + row * 4, mask + row, g_pool + row,
                           double(g_pool_common[j]), e + row, weight + row, &g_scale);
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

// grad_rgb_features [rows, width] = the first `width` columns of g_feat (rows `stride` apart),
// plus grad_rgb * blend on the colours, which also blend into the output directly (blend null:
// the dynamic network, whose colour is not blended).
__global__ void feature_input_gradient_kernel(size_t rows, int n_views, int width, int stride,
                                              const float* g_feat, const float* grad_rgb,
                                              const float* blend, float* grad_rgb_features) {
  const size_t count = rows * size_t(width);
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    const size_t row = i / size_t(width);
    const int c = int(i % size_t(width));
    float g = g_feat[row * stride + c];
    if (blend && c < 3) g += grad_rgb[(row / n_views) * 3 + c] * blend[row];
    grad_rgb_features[i] = g;
  }
}

// A thread per (sample, channel), the static network's features' backward: from the gradient of
// dir * ref_feature (g_feat's second half, [rows, 2 width]), g_dir = g * ref_feature per view
// and g_ref_feature = sum over the views, in order, of g * dir.
__global__ void static_features_backward_kernel(size_t samples, int n_views, int width,
                                                const float* g_feat, const float* dir,
                                                const float* ref_feature, float* g_dir,
                                                float* g_ref_feature) {
  const size_t count = samples * size_t(width);
  for (size_t t = grid_thread_index(); t < count; t += grid_thread_count()) {
    const size_t j = t / size_t(width);
    const size_t c = t % size_t(width);
    const float ref = ref_feature[t];
    float sum = 0.0f;
    for (int v = 0; v < n_views; ++v) {
      const size_t row = j * n_views + v;
      const float g = g_feat[row * 2 * width + width + c];
      g_dir[row * width + c] = g * ref;
      sum += g * dir[row * width + c];
    }
    g_ref_feature[t] = sum;
  }
}

}  // namespace
}  // namespace mvibr::nn::cuda
