// IBRNet's aggregation network, chunked over rays, its activations stored or recomputed (see
// aggregator.h).
//
// Names follow IBRNet's forward: per (ray, sample, view) "rows" and per (ray, sample) "samples".
// Every per-view MLP runs on all rows of a chunk as one GEMM; pooling over views and the
// softmax over views are short loops per sample; the ray transformer runs per ray.
#include "mvibr/nn/aggregator.h"

#include <cblas.h>
#include <omp.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "aggregator_activations.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/aggregator_math.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

// Rows per chunk (at least one ray): activations and gradients of about 4 KiB a row stay close to
// L2 (2 MiB a core here; 2048 rows were 10% slower), GEMMs stay tall enough for BLAS.
constexpr size_t kChunkRows = 640;
// Chunks whose gradient slots are live at once: bounds the slots' memory for any batch.
constexpr size_t kChunksPerWave = 64;

// Pooling over the views of one sample uses weights w_v = raw_v / D with D = sum_u raw_u + eps.
// Their sum is 1 - eps / D, which float cannot resolve from 1, and the gradients below depend on
// that gap (for a sample one view sees, they are nothing else), so the backward passes never
// form 1 - sum_u w_u by subtraction: they use eps / D (aggregator_math.h).

// Backward of mean = sum_v w_v x_v and var = sum_v w_v (x_v - mean)^2 (mean not detached) over
// rows x[V, width]: adds the gradient of every x_v to g_x, and writes the gradient of each
// weight in two parts, g_weight[v] plus the returned part common to all views,
// mean . dL/dmean. The common part can dwarf the differences between views that matter; kept
// apart, the normalisation's backward takes it exactly rather than through float cancellation.
// Loops run along channels (contiguous) and vectorise, the pointers being restrict (the store
// into g_x kept GCC from it); scratch holds 2 * width values.
template <typename T>
T mean_var_backward(size_t n_views, size_t width, const T* __restrict x, const T* __restrict weight,
                    T denominator, const T* __restrict mean, const T* __restrict g_mean,
                    const T* __restrict g_var, T* __restrict g_x, T* __restrict g_weight,
                    T* __restrict scratch) {
  const T gap = T(kWeightEpsilon) / denominator;  // 1 - sum_v w_v
  T* g_mean_total = scratch;
  T* term = scratch + width;
  // d var / d mean = -2 sum_v w_v (x_v - mean) = -2 mean gap.
  for (size_t c = 0; c < width; ++c) g_mean_total[c] = g_mean[c] - 2 * g_var[c] * mean[c] * gap;
  for (size_t v = 0; v < n_views; ++v) {
    const T* x_v = x + v * width;
    T* g_x_v = g_x + v * width;
    for (size_t c = 0; c < width; ++c) {
      const T dev = x_v[c] - mean[c];
      g_x_v[c] += weight[v] * (g_mean_total[c] + 2 * g_var[c] * dev);
      term[c] = dev * g_mean_total[c] + g_var[c] * dev * dev;
    }
    g_weight[v] = sum(term, width);
  }
  return dot(mean, g_mean_total, width);
}

// OpenBLAS's pthread build would start its own threads inside each of ours: it runs serially
// while we parallelise over chunks. (Its OpenMP build already does, inside a parallel region.)
class SerialBlas {
 public:
  SerialBlas() : threads_(openblas_get_num_threads()) {
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
  }
  ~SerialBlas() {
    if (openblas_get_parallel() == 1) openblas_set_num_threads(threads_);
  }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  int threads_;
};

// Buffers that outlive a call, one per thread, purpose and element type: the chunks' activations
// and the gradient slots would otherwise be fresh pages on every call, and the kernel zeroing
// them took a tenth of the time. They grow and never shrink.
enum class Buffer { kChunk, kSlots };

template <typename T, Buffer kPurpose>
T* thread_buffer(size_t count) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

// Chunks of whole rays, about kChunkRows rows each; independent of the thread count, so that
// results are too.
struct ChunkPlan {
  size_t rows_per_ray, rays_per_chunk, n_chunks;
};

ChunkPlan plan_chunks(int n_rays, int n_samples, int n_views) {
  const size_t per_ray = size_t(n_samples) * size_t(n_views);
  const size_t rays = std::max<size_t>(1, kChunkRows / per_ray);
  return {per_ray, rays, (size_t(n_rays) + rays - 1) / rays};
}

}  // namespace

void* allocate_huge_pages(size_t bytes) {
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (!p) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: where refused, 4 KiB pages serve
  return p;
}

size_t default_stored_activations_budget() {
  const size_t cap = size_t(2) << 30;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return cap;
  return std::min(cap, size_t(pages) * size_t(page) / 8);
}

IbrnetAggregator::IbrnetAggregator(ParameterSet& set, const std::string& prefix,
                                   AggregatorOptions options)
    : options_(options),
      block_(set, prefix, ParameterGroup::kMlp),
      s_(options.anti_alias_pooling ? block_.add("s", {}) : 0),
      ray_dir_0_(block_, "ray_dir_fc.0", 4, kDirHidden),
      ray_dir_2_(block_, "ray_dir_fc.2", kDirHidden, options.feature_channels + 3),
      base_0_(block_, "base_fc.0", 3 * (options.feature_channels + 3), kBase),
      base_2_(block_, "base_fc.2", kBase, kWidth),
      vis_0_(block_, "vis_fc.0", kWidth, kWidth),
      vis_2_(block_, "vis_fc.2", kWidth, kWidth + 1),
      vis2_0_(block_, "vis_fc2.0", kWidth, kWidth),
      vis2_2_(block_, "vis_fc2.2", kWidth, 1),
      geometry_0_(block_, "geometry_fc.0", kGeometryIn, kGeometry),
      geometry_2_(block_, "geometry_fc.2", kGeometry, kToken),
      ray_attention_(block_, "ray_attention", 4, kToken, 4, 4, options.attention_mask),
      out_geometry_0_(block_, "out_geometry_fc.0", kToken, kToken),
      out_geometry_2_(block_, "out_geometry_fc.2", kToken, 1),
      rgb_0_(block_, "rgb_fc.0", kRgbIn, kRgbHidden),
      rgb_2_(block_, "rgb_fc.2", kRgbHidden, kRgbHidden2),
      rgb_4_(block_, "rgb_fc.4", kRgbHidden2, 1) {
  if (options.feature_channels < 1 || options.n_samples_max < 1) {
    throw InvalidArgument("aggregator '" + prefix +
                          "': feature_channels and n_samples_max must be positive");
  }
  // IBRNet's sinusoid table: angle pos / 10000^(2 (j / 2) / 16), sin on even j, cos on odd j.
  positional_encoding_.resize(size_t(options.n_samples_max) * kToken);
  for (int pos = 0; pos < options.n_samples_max; ++pos) {
    for (int j = 0; j < kToken; ++j) {
      const double angle = pos / std::pow(10000.0, 2.0 * (j / 2) / kToken);
      positional_encoding_[size_t(pos) * kToken + j] =
          j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
}

AggregatorWidths IbrnetAggregator::widths() const {
  AggregatorWidths w;
  w.feature = options_.feature_channels + 3;
  w.dir_hidden = ray_dir_0_.out();
  w.base_hidden = base_0_.out();
  w.x = base_2_.out();
  w.geometry_in = geometry_0_.in();
  w.geometry_hidden = geometry_0_.out();
  w.token = ray_attention_.d_model();
  w.heads = ray_attention_.n_head();
  w.d_k = ray_attention_.d_k();
  w.d_v = ray_attention_.d_v();
  w.sigma_hidden = out_geometry_0_.out();
  w.rgb_in = rgb_0_.in();
  w.rgb_hidden = rgb_0_.out();
  w.rgb_hidden2 = rgb_2_.out();
  return w;
}

void IbrnetAggregator::initialize(Initializer& init) {
  float* p = block_.values();
  if (options_.anti_alias_pooling) p[s_] = 0.2f;
  ray_dir_0_.init_default(p, init);
  ray_dir_2_.init_default(p, init);
  for (const Linear* layer :
       {&base_0_, &base_2_, &vis_0_, &vis_2_, &vis2_0_, &vis2_2_, &geometry_0_, &geometry_2_}) {
    layer->init_kaiming(p, init);
  }
  ray_attention_.init_default(p, init);
  out_geometry_0_.init_default(p, init);
  out_geometry_2_.init_default(p, init);
  for (const Linear* layer : {&rgb_0_, &rgb_2_, &rgb_4_}) layer->init_kaiming(p, init);
}

void IbrnetAggregator::forward(int n_rays, int n_samples, int n_views, const float* rgb_features,
                               const float* ray_diff, const float* mask,
                               AggregatorWorkspace<float>* workspace, float* rgb,
                               float* sigma) const {
  forward(block_.values(), n_rays, n_samples, n_views, rgb_features, ray_diff, mask, workspace, rgb,
          sigma);
}

void IbrnetAggregator::backward(const AggregatorWorkspace<float>& workspace, const float* grad_rgb,
                                const float* grad_sigma, float* grad_rgb_features) {
  backward(block_.values(), block_.grads(), workspace, grad_rgb, grad_sigma, grad_rgb_features);
}

template <typename T>
void IbrnetAggregator::forward(const T* params, int n_rays, int n_samples, int n_views,
                               const T* rgb_features, const T* ray_diff, const T* mask,
                               AggregatorWorkspace<T>* workspace, T* rgb, T* sigma) const {
  if (n_rays < 0 || n_samples < 1 || n_samples > options_.n_samples_max || n_views < 1) {
    throw InvalidArgument("aggregator: need n_rays >= 0, 1 <= n_samples <= " +
                          std::to_string(options_.n_samples_max) + " and n_views >= 1 (got " +
                          std::to_string(n_rays) + ", " + std::to_string(n_samples) + ", " +
                          std::to_string(n_views) + ")");
  }
  const ChunkPlan plan = plan_chunks(n_rays, n_samples, n_views);
  const int width = options_.feature_channels + 3;
  Activations<T> full_chunk(n_samples, n_views, widths());
  full_chunk.set_rays(plan.rays_per_chunk);
  const size_t stride = full_chunk.layout_forward(nullptr, ray_attention_);
  T* stored = nullptr;  // chunk c's activations at stored + c * stride, or each thread's arena
  if (workspace) {
    workspace->n_rays = n_rays;
    workspace->n_samples = n_samples;
    workspace->n_views = n_views;
    workspace->rgb_features = rgb_features;
    workspace->ray_diff = ray_diff;
    workspace->mask = mask;
    const size_t total = plan.n_chunks * stride;
    if (total <= options_.stored_activations_budget / sizeof(T)) {
      if (workspace->activations.size() < total) workspace->activations.resize(total);
      workspace->chunk_stride = stride;
      stored = workspace->activations.data();
    } else {
      workspace->chunk_stride = 0;
      decltype(workspace->activations)().swap(workspace->activations);
    }
  }
  SerialBlas serial_blas;
#pragma omp parallel
  {
    Activations<T> a(n_samples, n_views, widths());
    a.set_rays(plan.rays_per_chunk);
    const size_t own = stored ? 0 : stride;  // the thread's arena: the stored part, if not stored
    T* arena = thread_buffer<T, Buffer::kChunk>(own + a.layout_derived(nullptr));
#pragma omp for schedule(dynamic)
    for (size_t c = 0; c < plan.n_chunks; ++c) {
      const size_t first = c * plan.rays_per_chunk;
      a.set_rays(std::min(plan.rays_per_chunk, size_t(n_rays) - first));
      a.layout_forward(stored ? stored + c * stride : arena, ray_attention_);
      a.layout_derived(arena + own);
      const size_t row = first * plan.rows_per_ray, sample = first * n_samples;
      forward_chunk(params, a, rgb_features + row * width, ray_diff + row * 4, mask + row,
                    rgb + sample * 3, sigma + sample);
    }
  }
}

template <typename T>
void IbrnetAggregator::backward(const T* params, T* grads, const AggregatorWorkspace<T>& ws,
                                const T* grad_rgb, const T* grad_sigma,
                                T* grad_rgb_features) const {
  if (ws.n_rays > 0 && (ws.n_samples < 1 || ws.n_views < 1 || !ws.rgb_features)) {
    throw InvalidArgument("aggregator backward: the workspace holds no forward pass");
  }
  const ChunkPlan plan = plan_chunks(ws.n_rays, ws.n_samples, ws.n_views);
  const int width = options_.feature_channels + 3;
  const size_t n_params = block_.size();
  const size_t n_slots = std::min(plan.n_chunks, kChunksPerWave) * n_params;
  T* slots = thread_buffer<T, Buffer::kSlots>(n_slots);
  // backward_chunk only reads the forward's activations, stored ones included.
  T* stored = ws.chunk_stride ? const_cast<T*>(ws.activations.data()) : nullptr;
  SerialBlas serial_blas;
  for (size_t wave = 0; wave < plan.n_chunks; wave += kChunksPerWave) {
    const size_t wave_end = std::min(plan.n_chunks, wave + kChunksPerWave);
#pragma omp parallel
    {
      Activations<T> a(ws.n_samples, ws.n_views, widths());
      a.set_rays(plan.rays_per_chunk);
      const size_t forward_size = stored ? 0 : a.layout_forward(nullptr, ray_attention_);
      const size_t derived_size = a.layout_derived(nullptr);
      T* arena = thread_buffer<T, Buffer::kChunk>(forward_size + derived_size +
                                                  a.layout_backward(nullptr, ray_attention_));
      std::vector<T> rgb(stored ? 0 : a.samples * 3), sigma(stored ? 0 : a.samples);  // unused
#pragma omp for schedule(dynamic)
      for (size_t c = wave; c < wave_end; ++c) {
        const size_t first = c * plan.rays_per_chunk;
        a.set_rays(std::min(plan.rays_per_chunk, size_t(ws.n_rays) - first));
        a.layout_forward(stored ? stored + c * ws.chunk_stride : arena, ray_attention_);
        a.layout_derived(arena + forward_size);
        a.layout_backward(arena + forward_size + derived_size, ray_attention_);
        const size_t row = first * plan.rows_per_ray, sample = first * ws.n_samples;
        const T* features = ws.rgb_features + row * width;
        const T* diff = ws.ray_diff + row * 4;
        const T* valid = ws.mask + row;
        if (stored) {
          a.derive_all(features, diff, valid);
        } else {
          forward_chunk(params, a, features, diff, valid, rgb.data(), sigma.data());
        }
        // Zeroed here, by the thread that fills it, while it stays in that core's cache.
        T* slot = slots + (c - wave) * n_params;
        std::fill(slot, slot + n_params, T(0));
        backward_chunk(params, slot, a, features, diff, valid, grad_rgb + sample * 3,
                       grad_sigma + sample,
                       grad_rgb_features ? grad_rgb_features + row * width : nullptr);
      }
    }
    // Chunk order, whatever thread ran which chunk; in blocks of parameters that stay in L1
    // while every slot's part is added, so the slots are read along their rows.
    constexpr size_t kBlock = 1024;
#pragma omp parallel for schedule(static)
    for (size_t first = 0; first < n_params; first += kBlock) {
      const size_t end = std::min(n_params, first + kBlock);
      for (size_t c = 0; c < wave_end - wave; ++c) {
        const T* slot = slots + c * n_params;
        for (size_t i = first; i < end; ++i) grads[i] += slot[i];
      }
    }
  }
}

template <typename T>
void IbrnetAggregator::forward_chunk(const T* params, const Activations<T>& a,
                                     const T* rgb_features, const T* ray_diff, const T* mask,
                                     T* rgb, T* sigma) const {
  const size_t n = a.rows, m = a.samples, V = size_t(a.n_views), w = size_t(a.width);

  // Direction features, added to colours and features.
  ray_dir_0_.forward(params, n, ray_diff, a.h_dir, Activation::kElu);
  ray_dir_2_.forward(params, n, a.h_dir, a.dir, Activation::kElu);
  a.add_direction(rgb_features);

  // Pooling weights over views: anti-aliased (sharper towards the target direction) or uniform.
  const T s = options_.anti_alias_pooling ? std::abs(params[s_]) : T(0);
  for (size_t j = 0; j < m; ++j) {
    a.pool_denominator[j] = pooling_weights(int(V), options_.anti_alias_pooling, s,
                                            ray_diff + j * V * 4, mask + j * V, a.pool + j * V);
  }

  // Weighted mean and variance over views, per sample. base_fc sees them next to the features
  // of every view; its weights split into the part for the pair, applied once per sample, and
  // the part for the view's own features.
  for (size_t j = 0; j < m; ++j) {
    T* mean = a.mean_var + j * 2 * w;
    T* var = mean + w;
    const T* feat = a.feat + j * V * w;
    const T* pool = a.pool + j * V;
    std::fill(mean, mean + 2 * w, T(0));
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < w; ++c) mean[c] += feat[v * w + c] * pool[v];
    }
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < w; ++c) {
        const T dev = feat[v * w + c] - mean[c];
        var[c] += pool[v] * dev * dev;
      }
    }
  }
  base_0_.forward_slice(params, m, 0, int(2 * w), true, a.mean_var, a.h_mean_var);
  base_0_.forward_slice(params, n, int(2 * w), int(w), false, a.feat, a.h_base);
  for (size_t i = 0; i < n; ++i) {
    T* h = a.h_base + i * kBase;
    const T* h_mean_var = a.h_mean_var + (i / V) * kBase;
    for (int c = 0; c < kBase; ++c) h[c] = elu_of(h[c] + h_mean_var[c]);
  }
  base_2_.forward(params, n, a.h_base, a.x_base, Activation::kElu);

  // Visibility: a residual for the features and a first visibility from the pooled features.
  a.pool_x_base();
  vis_0_.forward(params, n, a.x_pooled, a.h_vis, Activation::kElu);
  vis_2_.forward(params, n, a.h_vis, a.x_vis, Activation::kElu);
  for (size_t i = 0; i < n; ++i) a.sig_vis[i] = a.x_vis[i * (kWidth + 1) + kWidth];
  sigmoid(n, a.sig_vis);
  a.add_residual(mask);
  vis2_0_.forward(params, n, a.x_vis_weighted, a.h_vis2, Activation::kElu);
  vis2_2_.forward(params, n, a.h_vis2, a.vis2);
  sigmoid(n, a.vis2);
  for (size_t i = 0; i < n; ++i) a.vis[i] = a.vis2[i] * mask[i];

  // Visibility-weighted mean and variance of x, and the mean weight, per sample.
  for (size_t j = 0; j < m; ++j) {
    T sum = 0;
    for (size_t v = 0; v < V; ++v) sum += a.vis[j * V + v];
    T* g = a.geometry_in + j * kGeometryIn;
    std::fill(g, g + kGeometryIn, T(0));
    a.vis_denominator[j] = sum + T(kWeightEpsilon);
    for (size_t v = 0; v < V; ++v) {
      const T weight = a.vis[j * V + v] / a.vis_denominator[j];
      a.vis_weight[j * V + v] = weight;
      for (int c = 0; c < kWidth; ++c) g[c] += a.x[(j * V + v) * kWidth + c] * weight;
      g[2 * kWidth] += weight;
    }
    g[2 * kWidth] /= T(V);
    for (size_t v = 0; v < V; ++v) {
      for (int c = 0; c < kWidth; ++c) {
        const T dev = a.x[(j * V + v) * kWidth + c] - g[c];
        g[kWidth + c] += a.vis_weight[j * V + v] * dev * dev;
      }
    }
  }
  geometry_0_.forward(params, m, a.geometry_in, a.h_geometry, Activation::kElu);
  geometry_2_.forward(params, m, a.h_geometry, a.geometry_out, Activation::kElu);

  // Ray transformer over the samples of each ray, then density.
  for (size_t j = 0; j < m; ++j) {
    T count = 0;
    for (size_t v = 0; v < V; ++v) count += mask[j * V + v];
    a.n_valid[j] = count;
    a.valid_tokens[j] = count > 1 ? T(1) : T(0);
    const double* pe = positional_encoding_.data() + (j % a.n_samples) * kToken;
    for (int c = 0; c < kToken; ++c) {
      a.tokens[j * kToken + c] = a.geometry_out[j * kToken + c] + T(pe[c]);
    }
  }
  ray_attention_.forward(params, a.rays, size_t(a.n_samples), a.tokens, a.valid_tokens,
                         a.attention_saved, a.attention_out);
  out_geometry_0_.forward(params, m, a.attention_out, a.h_sigma, Activation::kElu);
  out_geometry_2_.forward(params, m, a.h_sigma, a.sigma_relu, Activation::kRelu);
  for (size_t j = 0; j < m; ++j) sigma[j] = a.n_valid[j] < 1 ? T(0) : a.sigma_relu[j];

  // Colour: blending weights over views from x, the visibility and the direction difference.
  a.gather_colour_inputs(ray_diff);
  rgb_0_.forward(params, n, a.rgb_in, a.h_rgb, Activation::kElu);
  rgb_2_.forward(params, n, a.h_rgb, a.h_rgb2, Activation::kElu);
  rgb_4_.forward(params, n, a.h_rgb2, a.blend);
  for (size_t j = 0; j < m; ++j) {
    blend_views(int(V), mask + j * V, rgb_features + j * V * w, w, a.blend + j * V, rgb + j * 3,
                [](T x) { return exp_nonpositive(x); });
  }
}

// Mirrors forward_chunk from the outputs back. g_* is the gradient of the loss with respect to
// the activation of the same name.
template <typename T>
void IbrnetAggregator::backward_chunk(const T* params, T* grads, const Activations<T>& a,
                                      const T* rgb_features, const T* ray_diff, const T* mask,
                                      const T* grad_rgb, const T* grad_sigma,
                                      T* grad_rgb_features) const {
  const size_t n = a.rows, m = a.samples, V = size_t(a.n_views), w = size_t(a.width);

  // Colour: softmax over views (no gradient into masked logits), then rgb_fc.
  for (size_t j = 0; j < m; ++j) {
    blend_views_backward(int(V), mask + j * V, rgb_features + j * V * w, w, a.blend + j * V,
                         grad_rgb + j * 3, a.g_logit + j * V);
  }
  // rgb_fc.4's bias shifts every view's logit of a sample alike, which the softmax ignores: its
  // gradient is exactly zero and is left so, not summed from rounding noise that Adam, which
  // divides by the gradient's own size, would turn into full steps.
  rgb_4_.backward_slice(params, grads, n, 0, kRgbHidden2, /*with_bias=*/false, a.h_rgb2, a.g_logit,
                        a.g_h_rgb2);
  elu_backward(n * kRgbHidden2, a.h_rgb2, a.g_h_rgb2);
  rgb_2_.backward(params, grads, n, a.h_rgb, a.g_h_rgb2, a.g_h_rgb);
  elu_backward(n * kRgbHidden, a.h_rgb, a.g_h_rgb);
  rgb_0_.backward(params, grads, n, a.rgb_in, a.g_h_rgb, a.g_rgb_in);
  for (size_t i = 0; i < n; ++i) {
    const T* g = a.g_rgb_in + i * kRgbIn;
    std::copy(g, g + kWidth, a.g_x + i * kWidth);
    a.g_vis[i] = g[kWidth];
  }

  // Density: zero where no view sees the sample, then the ReLU, out_geometry_fc and attention.
  for (size_t j = 0; j < m; ++j) a.g_sigma[j] = a.n_valid[j] < 1 ? T(0) : grad_sigma[j];
  relu_backward(m, a.sigma_relu, a.g_sigma);
  out_geometry_2_.backward(params, grads, m, a.h_sigma, a.g_sigma, a.g_h_sigma);
  elu_backward(m * kToken, a.h_sigma, a.g_h_sigma);
  out_geometry_0_.backward(params, grads, m, a.attention_out, a.g_h_sigma, a.g_attention_out);
  ray_attention_.backward(params, grads, a.rays, size_t(a.n_samples), a.tokens, a.valid_tokens,
                          a.attention_saved, a.g_attention_out, a.g_tokens, a.attention_scratch);
  elu_backward(m * kToken, a.geometry_out, a.g_tokens);  // the encoding is a constant
  geometry_2_.backward(params, grads, m, a.h_geometry, a.g_tokens, a.g_h_geometry);
  elu_backward(m * kGeometry, a.h_geometry, a.g_h_geometry);
  geometry_0_.backward(params, grads, m, a.geometry_in, a.g_h_geometry, a.g_geometry_in);

  // Mean, variance and mean weight of x under the visibility weights, then their normalisation.
  std::vector<T> scratch(2 * std::max(w, size_t(kWidth)));
  for (size_t j = 0; j < m; ++j) {
    const T* g_in = a.g_geometry_in + j * kGeometryIn;
    T* g_weight = a.g_vis_weight + j * V;
    const T common =
        mean_var_backward(V, kWidth, a.x + j * V * kWidth, a.vis_weight + j * V,
                          a.vis_denominator[j], a.geometry_in + j * kGeometryIn, g_in,
                          g_in + kWidth, a.g_x + j * V * kWidth, g_weight, scratch.data());
    const T g_mean_weight = g_in[2 * kWidth] / T(V);
    for (size_t v = 0; v < V; ++v) {
      a.g_vis[j * V + v] += normalisation_backward(int(V), int(v), a.vis_weight + j * V, g_weight,
                                                   common + g_mean_weight, a.vis_denominator[j]);
    }
  }

  // vis_fc2 and the first visibility.
  for (size_t i = 0; i < n; ++i) a.g_vis2[i] = a.g_vis[i] * mask[i];
  sigmoid_backward(n, a.vis2, a.g_vis2);
  vis2_2_.backward(params, grads, n, a.h_vis2, a.g_vis2, a.g_h_vis2);
  elu_backward(n * kWidth, a.h_vis2, a.g_h_vis2);
  vis2_0_.backward(params, grads, n, a.x_vis_weighted, a.g_h_vis2, a.g_x_vis_weighted);
  for (size_t i = 0; i < n; ++i) {
    const T first_vis = a.sig_vis[i] * mask[i];
    T g_first_vis = 0;
    T* g_xv = a.g_x_vis + i * (kWidth + 1);
    for (int c = 0; c < kWidth; ++c) {
      const T g = a.g_x_vis_weighted[i * kWidth + c];
      g_first_vis += g * a.x[i * kWidth + c];
      a.g_x[i * kWidth + c] += g * first_vis;
      g_xv[c] = a.g_x[i * kWidth + c];  // x = x_base + residual
    }
    g_xv[kWidth] = g_first_vis * mask[i] * a.sig_vis[i] * (T(1) - a.sig_vis[i]);
  }
  elu_backward(n * (kWidth + 1), a.x_vis, a.g_x_vis);
  vis_2_.backward(params, grads, n, a.h_vis, a.g_x_vis, a.g_h_vis);
  elu_backward(n * kWidth, a.h_vis, a.g_h_vis);
  vis_0_.backward(params, grads, n, a.x_pooled, a.g_h_vis, a.g_x_pooled);
  for (size_t i = 0; i < n; ++i) {
    T g_pool = 0;
    for (int c = 0; c < kWidth; ++c) {
      const T g = a.g_x_pooled[i * kWidth + c];
      g_pool += g * a.x_base[i * kWidth + c];
      a.g_x_base[i * kWidth + c] = a.g_x[i * kWidth + c] + g * a.pool[i];
    }
    a.g_pool[i] = g_pool;
  }

  // base_fc, then the pooled mean and variance of the features back to every view.
  elu_backward(n * kWidth, a.x_base, a.g_x_base);
  base_2_.backward(params, grads, n, a.h_base, a.g_x_base, a.g_h_base);
  elu_backward(n * kBase, a.h_base, a.g_h_base);
  base_0_.backward_slice(params, grads, n, int(2 * w), int(w), false, a.feat, a.g_h_base, a.g_feat);
  for (size_t j = 0; j < m; ++j) {  // a sample's mean and variance feed all of its views
    T* g = a.g_h_mean_var + j * kBase;
    std::fill(g, g + kBase, T(0));
    for (size_t v = 0; v < V; ++v) {
      for (int c = 0; c < kBase; ++c) g[c] += a.g_h_base[(j * V + v) * kBase + c];
    }
  }
  base_0_.backward_slice(params, grads, m, 0, int(2 * w), true, a.mean_var, a.g_h_mean_var,
                         a.g_mean_var);
  std::vector<T> g_weight(V);
  for (size_t j = 0; j < m; ++j) {
    const T* g_mean = a.g_mean_var + j * 2 * w;
    a.g_pool_common[j] = mean_var_backward(
        V, w, a.feat + j * V * w, a.pool + j * V, a.pool_denominator[j], a.mean_var + j * 2 * w,
        g_mean, g_mean + w, a.g_feat + j * V * w, g_weight.data(), scratch.data());
    for (size_t v = 0; v < V; ++v) a.g_pool[j * V + v] += g_weight[v];
  }

  // The sharpness s of the anti-aliased pooling, through raw_v = (e_v - min_u e_u) mask_v with
  // e_v = exp(|s| (d_v - 1)), de_v/d|s| = (d_v - 1) e_v, normalised to pool_v = raw_v / D. The
  // raw weights are nearly proportional to |s|, which the normalisation divides out, so each
  // sample's sum cancels to a small fraction of its terms: it is formed in double, from the
  // weights recomputed in double, even in a float run (float alone leaves errors near 1e-3, as
  // PyTorch's float32 autograd shows). The incoming g_pool needs no such care.
  if (options_.anti_alias_pooling) {
    const double s = params[s_];
    std::vector<double> e(V), weight(V);
    double g_scale = 0;
    for (size_t j = 0; j < m; ++j) {
      add_sharpness_gradient(int(V), std::abs(s), ray_diff + j * V * 4, mask + j * V,
                             a.g_pool + j * V, double(a.g_pool_common[j]), e.data(), weight.data(),
                             &g_scale);
    }
    grads[s_] += T((s > 0 ? 1 : (s < 0 ? -1 : 0)) * g_scale);  // d|s|/ds, 0 at 0
  }

  // ray_dir_fc, through the direction features added to every channel.
  for (size_t i = 0; i < n * w; ++i) a.g_dir[i] = a.g_feat[i];
  elu_backward(n * w, a.dir, a.g_dir);
  ray_dir_2_.backward(params, grads, n, a.h_dir, a.g_dir, a.g_h_dir);
  elu_backward(n * kDirHidden, a.h_dir, a.g_h_dir);
  ray_dir_0_.backward(params, grads, n, ray_diff, a.g_h_dir, static_cast<T*>(nullptr));

  if (!grad_rgb_features) return;
  std::copy(a.g_feat, a.g_feat + n * w, grad_rgb_features);
  for (size_t j = 0; j < m; ++j) {  // the colours also blend into the output directly
    for (size_t v = 0; v < V; ++v) {
      for (int c = 0; c < 3; ++c) {
        grad_rgb_features[(j * V + v) * w + c] += grad_rgb[j * 3 + c] * a.blend[j * V + v];
      }
    }
  }
}

#define MVIBR_AGGREGATOR(T)                                                                       \
  template void IbrnetAggregator::forward(const T*, int, int, int, const T*, const T*, const T*,  \
                                          AggregatorWorkspace<T>*, T*, T*) const;                 \
  template void IbrnetAggregator::backward(const T*, T*, const AggregatorWorkspace<T>&, const T*, \
                                           const T*, T*) const;
MVIBR_AGGREGATOR(float)
MVIBR_AGGREGATOR(double)
#undef MVIBR_AGGREGATOR

}  // namespace mvibr::nn
