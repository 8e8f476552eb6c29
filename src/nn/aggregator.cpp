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
// The backward's gradient slots: runs of consecutive chunks share one, each run on one thread in
// chunk order, and the slots are added in run order, so the sums are the same bits for any number
// of threads. At most this many: a slot holds every parameter (1.5 MiB for DynIBaR's networks),
// and one per chunk meant zeroing and adding 130 MiB per branch and step.
constexpr size_t kGradientSlots = 32;

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

namespace {

// DynIBaR's embeddings (log spacing): the sample's position, Plucker coordinates, time, and the
// target ray's direction.
constexpr int kXyzFrequencies = 5, kRayFrequencies = 5, kTimeFrequencies = 10,
              kViewDirFrequencies = 4;

int embedded(int dim, int frequencies) {
  return dim * (1 + 2 * frequencies);
}

AggregatorWidths widths_of(const AggregatorOptions& o) {
  const bool ibrnet = o.variant == AggregatorVariant::kIbrnet;
  const bool is_static = o.variant == AggregatorVariant::kDynibarStatic;
  const bool dynamic = o.variant == AggregatorVariant::kDynibarDynamic;
  AggregatorWidths w{};
  w.gathered = o.feature_channels + 3;
  w.feature = is_static ? 2 * w.gathered : w.gathered;
  w.xyz_embedded = ibrnet ? 0 : embedded(3, kXyzFrequencies);
  w.ref_in = is_static ? embedded(6, kRayFrequencies) : 0;
  w.ref_feature = is_static ? w.gathered : 0;
  w.dir_per = dynamic ? kPerSample : kPerRow;
  w.dir_in = ibrnet ? 0 : is_static ? w.xyz_embedded + w.ref_in + 4 : embedded(1, kTimeFrequencies);
  w.dir_hidden = ibrnet ? 16 : 256;
  w.base_hidden = ibrnet ? 64 : 256;
  w.x = ibrnet ? 32 : 128;
  w.geometry_in = 2 * w.x + 1;
  w.geometry_hidden = ibrnet ? 64 : 256;
  w.token = ibrnet ? 16 : 128;
  w.heads = 4;
  w.d_k = w.d_v = w.token / w.heads;
  w.point_in = dynamic ? w.token + w.xyz_embedded : 0;
  w.point_hidden = dynamic ? 256 : 0;
  w.point = dynamic ? w.token : 0;
  w.sigma_hidden = w.token;
  w.colour_per = dynamic ? kPerSample : kPerRow;
  w.rgb_in = ibrnet      ? w.x + 1 + 4
             : is_static ? w.token + w.x + 1 + 4
                         : w.point + embedded(3, kViewDirFrequencies);
  w.rgb_hidden = ibrnet ? 16 : 128;
  w.rgb_hidden2 = ibrnet ? 8 : 64;
  w.blend = dynamic ? 0 : 1;
  w.colour = dynamic ? 3 : 0;
  return w;
}

}  // namespace

template <typename T>
AggregatorInputs<T> AggregatorInputs<T>::from_ray(size_t first, int n_samples, int n_views,
                                                  int channels) const {
  const size_t sample = first * size_t(n_samples), row = sample * size_t(n_views);
  const auto at = [](const T* p, size_t offset) { return p ? p + offset : nullptr; };
  return {at(rgb_features, row * size_t(3 + channels)),
          at(ray_diff, row * 4),
          at(mask, row),
          at(xyz, sample * 3),
          at(src_rays, row * 6),
          at(target_rays, first * 6),
          at(time, first),
          at(view_dir, first * 3)};
}
template struct AggregatorInputs<float>;
template struct AggregatorInputs<double>;

template <typename T>
void check_aggregator_call(const AggregatorOptions& options, int n_rays, int n_samples, int n_views,
                           const AggregatorInputs<T>& in, const std::string& network) {
  if (n_rays < 0 || n_samples < 1 || n_samples > options.n_samples_max || n_views < 1) {
    throw InvalidArgument(
        network + ": need n_rays >= 0, 1 <= n_samples <= " + std::to_string(options.n_samples_max) +
        " and n_views >= 1 (got " + std::to_string(n_rays) + ", " + std::to_string(n_samples) +
        ", " + std::to_string(n_views) + ")");
  }
  const AggregatorVariant variant = options.variant;
  const bool has_views = in.rgb_features && in.ray_diff && in.mask;
  const bool has_geometry =
      variant == AggregatorVariant::kIbrnet ||
      (variant == AggregatorVariant::kDynibarStatic && in.xyz && in.src_rays && in.target_rays) ||
      (variant == AggregatorVariant::kDynibarDynamic && in.xyz && in.time && in.view_dir);
  if (n_rays > 0 && !(has_views && has_geometry)) {
    throw InvalidArgument(
        network +
        ": missing inputs (every variant reads rgb_features, ray_diff and mask; DynIBaR's static "
        "network also xyz, src_rays and target_rays, its dynamic one xyz, time and view_dir)");
  }
}
template void check_aggregator_call(const AggregatorOptions&, int, int, int,
                                    const AggregatorInputs<float>&, const std::string&);
template void check_aggregator_call(const AggregatorOptions&, int, int, int,
                                    const AggregatorInputs<double>&, const std::string&);

Linear IbrnetAggregator::layer(const std::string& name, int in, int out) {
  return Linear(block_, name, in, out, true, options_.linear_operands);
}

std::optional<Linear> IbrnetAggregator::layer_if(bool present, const std::string& name, int in,
                                                 int out) {
  if (!present) return std::nullopt;
  return layer(name, in, out);
}

IbrnetAggregator::IbrnetAggregator(ParameterSet& set, const std::string& prefix,
                                   AggregatorOptions options)
    : options_(options),
      widths_(widths_of(options)),
      block_(set, prefix, options.group),
      s_(options.anti_alias_pooling ? block_.add("s", {}) : 0),
      xyz_embed_(3, FrequencySpacing::kLog, kXyzFrequencies, kXyzFrequencies),
      ray_embed_(6, FrequencySpacing::kLog, kRayFrequencies, kRayFrequencies),
      time_embed_(1, FrequencySpacing::kLog, kTimeFrequencies, kTimeFrequencies),
      view_dir_embed_(3, FrequencySpacing::kLog, kViewDirFrequencies, kViewDirFrequencies),
      ray_dir_0_(layer("ray_dir_fc.0", widths_.dir_in ? widths_.dir_in : 4, widths_.dir_hidden)),
      ray_dir_2_(layer("ray_dir_fc.2", widths_.dir_hidden, widths_.gathered)),
      ref_feature_(layer_if(widths_.ref_feature > 0, "ref_feature_fc.0", widths_.ref_in,
                            widths_.ref_feature)),
      base_0_(layer("base_fc.0", 3 * widths_.feature, widths_.base_hidden)),
      base_2_(layer("base_fc.2", widths_.base_hidden, widths_.x)),
      vis_0_(layer("vis_fc.0", widths_.x, widths_.x)),
      vis_2_(layer("vis_fc.2", widths_.x, widths_.x + 1)),
      vis2_0_(layer("vis_fc2.0", widths_.x, widths_.x)),
      vis2_2_(layer("vis_fc2.2", widths_.x, 1)),
      geometry_0_(layer("geometry_fc.0", widths_.geometry_in, widths_.geometry_hidden)),
      geometry_2_(layer("geometry_fc.2", widths_.geometry_hidden, widths_.token)),
      ray_attention_(block_, "ray_attention", widths_.heads, widths_.token, widths_.d_k,
                     widths_.d_v, options.attention_mask, options.linear_operands),
      point_0_(layer_if(widths_.point > 0, "ref_pts_fc.0", widths_.point_in, widths_.point_hidden)),
      point_2_(layer_if(widths_.point > 0, "ref_pts_fc.2", widths_.point_hidden, widths_.point)),
      out_geometry_0_(layer("out_geometry_fc.0", widths_.token, widths_.sigma_hidden)),
      out_geometry_2_(layer("out_geometry_fc.2", widths_.sigma_hidden, 1)),
      rgb_0_(layer("rgb_fc.0", widths_.rgb_in, widths_.rgb_hidden)),
      rgb_2_(layer("rgb_fc.2", widths_.rgb_hidden, widths_.rgb_hidden2)),
      rgb_4_(layer("rgb_fc.4", widths_.rgb_hidden2, widths_.blend + widths_.colour)) {
  if (options.feature_channels < 1 || options.n_samples_max < 1) {
    throw InvalidArgument("aggregator '" + prefix +
                          "': feature_channels and n_samples_max must be positive");
  }
  if (options.variant == AggregatorVariant::kDynibarDynamic && options.anti_alias_pooling) {
    throw InvalidArgument("aggregator '" + prefix +
                          "': DynIBaR's dynamic network pools uniformly (no anti-alias pooling)");
  }
  if (options.variant == AggregatorVariant::kDynibarStatic) return;  // no positional encoding
  // The sinusoid table: angle pos / 10000^(2 (j / 2) / d), sin on even j, cos on odd j.
  const int d = widths_.token;
  positional_encoding_.resize(size_t(options.n_samples_max) * size_t(d));
  for (int pos = 0; pos < options.n_samples_max; ++pos) {
    for (int j = 0; j < d; ++j) {
      const double angle = pos / std::pow(10000.0, 2.0 * (j / 2) / d);
      positional_encoding_[size_t(pos) * size_t(d) + size_t(j)] =
          j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
}

void IbrnetAggregator::initialize(Initializer& init) {
  float* p = block_.values();
  if (options_.anti_alias_pooling) p[s_] = 0.2f;
  const bool ibrnet = options_.variant == AggregatorVariant::kIbrnet;
  const auto init_mlp = [&](const Linear& layer) {
    if (ibrnet) {
      layer.init_kaiming(p, init);
    } else {
      layer.init_default(p, init);
    }
  };
  ray_dir_0_.init_default(p, init);
  ray_dir_2_.init_default(p, init);
  if (ref_feature_) ref_feature_->init_default(p, init);
  for (const Linear* layer :
       {&base_0_, &base_2_, &vis_0_, &vis_2_, &vis2_0_, &vis2_2_, &geometry_0_, &geometry_2_}) {
    init_mlp(*layer);
  }
  ray_attention_.init_default(p, init);
  if (point_0_) point_0_->init_default(p, init);
  if (point_2_) point_2_->init_default(p, init);
  out_geometry_0_.init_default(p, init);
  out_geometry_2_.init_default(p, init);
  for (const Linear* layer : {&rgb_0_, &rgb_2_, &rgb_4_}) init_mlp(*layer);
}

void IbrnetAggregator::forward(int n_rays, int n_samples, int n_views,
                               const AggregatorInputs<float>& inputs,
                               AggregatorWorkspace<float>* workspace, float* rgb,
                               float* sigma) const {
  const FrozenWeights frozen(block_.values(), block_.size());
  forward(block_.values(), n_rays, n_samples, n_views, inputs, workspace, rgb, sigma);
}

void IbrnetAggregator::backward(const AggregatorWorkspace<float>& workspace, const float* grad_rgb,
                                const float* grad_sigma, float* grad_rgb_features,
                                float* grad_xyz) {
  const FrozenWeights frozen(block_.values(), block_.size());
  backward(block_.values(), block_.grads(), workspace, grad_rgb, grad_sigma, grad_rgb_features,
           grad_xyz);
}

template <typename T>
void IbrnetAggregator::forward(const T* params, int n_rays, int n_samples, int n_views,
                               const AggregatorInputs<T>& inputs, AggregatorWorkspace<T>* workspace,
                               T* rgb, T* sigma) const {
  check_aggregator_call(options_, n_rays, n_samples, n_views, inputs, "aggregator");
  const ChunkPlan plan = plan_chunks(n_rays, n_samples, n_views);
  Activations<T> full_chunk(n_samples, n_views, widths_);
  full_chunk.set_rays(plan.rays_per_chunk);
  const size_t stride = full_chunk.layout_forward(nullptr, ray_attention_);
  T* stored = nullptr;  // chunk c's activations at stored + c * stride, or each thread's arena
  if (workspace) {
    workspace->n_rays = n_rays;
    workspace->n_samples = n_samples;
    workspace->n_views = n_views;
    workspace->inputs = inputs;
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
    Activations<T> a(n_samples, n_views, widths_);
    a.set_rays(plan.rays_per_chunk);
    const size_t own = stored ? 0 : stride;  // the thread's arena: the stored part, if not stored
    T* arena = thread_buffer<T, Buffer::kChunk>(own + a.layout_derived(nullptr));
#pragma omp for schedule(dynamic)
    for (size_t c = 0; c < plan.n_chunks; ++c) {
      const size_t first = c * plan.rays_per_chunk;
      a.set_rays(std::min(plan.rays_per_chunk, size_t(n_rays) - first));
      a.layout_forward(stored ? stored + c * stride : arena, ray_attention_);
      a.layout_derived(arena + own);
      const size_t sample = first * size_t(n_samples);
      forward_chunk(params, a,
                    inputs.from_ray(first, n_samples, n_views, options_.feature_channels),
                    rgb + sample * 3, sigma + sample);
    }
  }
}

template <typename T>
void IbrnetAggregator::backward(const T* params, T* grads, const AggregatorWorkspace<T>& ws,
                                const T* grad_rgb, const T* grad_sigma, T* grad_rgb_features,
                                T* grad_xyz) const {
  if (ws.n_rays > 0 && (ws.n_samples < 1 || ws.n_views < 1 || !ws.inputs.rgb_features)) {
    throw InvalidArgument("aggregator backward: the workspace holds no forward pass");
  }
  if (grad_xyz && options_.variant != AggregatorVariant::kDynibarDynamic) {
    throw InvalidArgument(
        "aggregator backward: only DynIBaR's dynamic network has a gradient "
        "for the samples' positions");
  }
  const ChunkPlan plan = plan_chunks(ws.n_rays, ws.n_samples, ws.n_views);
  const size_t width = size_t(widths_.gathered);
  const size_t n_params = block_.size();
  const size_t chunks_per_slot = (plan.n_chunks + kGradientSlots - 1) / kGradientSlots;
  const size_t n_slots =
      chunks_per_slot ? (plan.n_chunks + chunks_per_slot - 1) / chunks_per_slot : 0;
  T* slots = thread_buffer<T, Buffer::kSlots>(n_slots * n_params);
  // backward_chunk only reads the forward's activations, stored ones included.
  T* stored = ws.chunk_stride ? const_cast<T*>(ws.activations.data()) : nullptr;
  SerialBlas serial_blas;
#pragma omp parallel
  {
    Activations<T> a(ws.n_samples, ws.n_views, widths_);
    a.set_rays(plan.rays_per_chunk);
    const size_t forward_size = stored ? 0 : a.layout_forward(nullptr, ray_attention_);
    const size_t derived_size = a.layout_derived(nullptr);
    T* arena = thread_buffer<T, Buffer::kChunk>(forward_size + derived_size +
                                                a.layout_backward(nullptr, ray_attention_));
    std::vector<T> rgb(stored ? 0 : a.samples * 3), sigma(stored ? 0 : a.samples);  // unused
#pragma omp for schedule(dynamic)
    for (size_t s = 0; s < n_slots; ++s) {
      // Zeroed here, by the thread that fills it, while it stays in that core's cache.
      T* slot = slots + s * n_params;
      std::fill(slot, slot + n_params, T(0));
      const size_t run_end = std::min(plan.n_chunks, (s + 1) * chunks_per_slot);
      for (size_t c = s * chunks_per_slot; c < run_end; ++c) {
        const size_t first = c * plan.rays_per_chunk;
        a.set_rays(std::min(plan.rays_per_chunk, size_t(ws.n_rays) - first));
        a.layout_forward(stored ? stored + c * ws.chunk_stride : arena, ray_attention_);
        a.layout_derived(arena + forward_size);
        a.layout_backward(arena + forward_size + derived_size, ray_attention_);
        const size_t sample = first * size_t(ws.n_samples), row = sample * size_t(ws.n_views);
        const AggregatorInputs<T> in =
            ws.inputs.from_ray(first, ws.n_samples, ws.n_views, options_.feature_channels);
        if (stored) {
          derive_view_inputs(a, in);
          derive_features(a, in);
          a.pool_x_base();
          a.add_residual(in.mask);
          derive_colour_inputs(a, in);
        } else {
          forward_chunk(params, a, in, rgb.data(), sigma.data());
        }
        backward_chunk(params, slot, a, in, grad_rgb + sample * 3, grad_sigma + sample,
                       grad_rgb_features ? grad_rgb_features + row * width : nullptr,
                       grad_xyz ? grad_xyz + sample * 3 : nullptr);
      }
    }
  }
  // Slot order, whatever thread ran which run; in blocks of parameters that stay in L1 while
  // every slot's part is added, so the slots are read along their rows.
  constexpr size_t kBlock = 1024;
#pragma omp parallel for schedule(static)
  for (size_t first = 0; first < n_params; first += kBlock) {
    const size_t end = std::min(n_params, first + kBlock);
    for (size_t s = 0; s < n_slots; ++s) {
      const T* slot = slots + s * n_params;
      for (size_t i = first; i < end; ++i) grads[i] += slot[i];
    }
  }
}

// ray_dir_fc's input where the variant builds one: the static network's [xyz embedded, source ray
// embedded, ray_diff] per row, the dynamic network's embedded time per sample.
template <typename T>
void IbrnetAggregator::derive_view_inputs(const Activations<T>& a,
                                          const AggregatorInputs<T>& in) const {
  const AggregatorWidths& w = widths_;
  const size_t V = size_t(a.n_views), S = size_t(a.n_samples), D = size_t(w.dir_in);
  const size_t E = size_t(w.xyz_embedded), R = size_t(w.ref_in);
  if (options_.variant == AggregatorVariant::kDynibarStatic) {
    for (size_t i = 0; i < a.rows; ++i) {
      T* d = a.dir_in + i * D;
      const T* xyz = a.xyz_embedded + (i / V) * E;
      std::copy(xyz, xyz + E, d);
      ray_embed_.forward(1, in.src_rays + i * 6, d + E);
      std::copy(in.ray_diff + i * 4, in.ray_diff + i * 4 + 4, d + E + R);
    }
  } else if (options_.variant == AggregatorVariant::kDynibarDynamic) {
    for (size_t j = 0; j < a.samples; ++j)
      time_embed_.forward(1, in.time + j / S, a.dir_in + j * D);
  }
}

// The features the pooling sees: the gathered ones plus the direction term (IBRNet) or the time
// term (dynamic), or next to the source ray's term times the target ray's (static).
template <typename T>
void IbrnetAggregator::derive_features(const Activations<T>& a,
                                       const AggregatorInputs<T>& in) const {
  const size_t V = size_t(a.n_views), G = size_t(widths_.gathered), F = size_t(widths_.feature);
  const T* gathered = in.rgb_features;
  switch (options_.variant) {
    case AggregatorVariant::kIbrnet:
      for (size_t i = 0; i < a.rows * G; ++i) a.feat[i] = gathered[i] + a.dir[i];
      break;
    case AggregatorVariant::kDynibarStatic:
      for (size_t i = 0; i < a.rows; ++i) {
        T* f = a.feat + i * F;
        const T* dir = a.dir + i * G;
        const T* ref = a.ref_feature + (i / V) * G;
        std::copy(gathered + i * G, gathered + (i + 1) * G, f);
        for (size_t c = 0; c < G; ++c) f[G + c] = dir[c] * ref[c];
      }
      break;
    case AggregatorVariant::kDynibarDynamic:
      for (size_t i = 0; i < a.rows; ++i) {
        const T* time = a.dir + (i / V) * G;
        for (size_t c = 0; c < G; ++c) a.feat[i * G + c] = gathered[i * G + c] + time[c];
      }
      break;
  }
}

// rgb_fc's input: per row [x, vis, ray_diff] (IBRNet), [token, x, vis, ray_diff] (static); per
// sample [h, view direction embedded] (dynamic).
template <typename T>
void IbrnetAggregator::derive_colour_inputs(const Activations<T>& a,
                                            const AggregatorInputs<T>& in) const {
  const AggregatorWidths& w = widths_;
  const size_t V = size_t(a.n_views), S = size_t(a.n_samples), X = size_t(w.x);
  const size_t K = size_t(w.token), I = size_t(w.rgb_in);
  if (options_.variant == AggregatorVariant::kDynibarDynamic) {
    for (size_t j = 0; j < a.samples; ++j) {
      T* row = a.rgb_in + j * I;
      std::copy(a.point + j * K, a.point + (j + 1) * K, row);
      view_dir_embed_.forward(1, in.view_dir + (j / S) * 3, row + K);
    }
    return;
  }
  const size_t token = options_.variant == AggregatorVariant::kDynibarStatic ? K : 0;
  for (size_t i = 0; i < a.rows; ++i) {
    T* row = a.rgb_in + i * I;
    const T* attention = a.attention_out + (i / V) * K;
    std::copy(attention, attention + token, row);
    std::copy(a.x + i * X, a.x + (i + 1) * X, row + token);
    row[token + X] = a.vis[i];
    std::copy(in.ray_diff + i * 4, in.ray_diff + i * 4 + 4, row + token + X + 1);
  }
}

template <typename T>
void IbrnetAggregator::forward_chunk(const T* params, const Activations<T>& a,
                                     const AggregatorInputs<T>& in, T* rgb, T* sigma) const {
  const AggregatorWidths& w = widths_;
  const AggregatorVariant variant = options_.variant;
  const size_t n = a.rows, m = a.samples, V = size_t(a.n_views);
  const size_t F = size_t(w.feature), G = size_t(w.gathered), X = size_t(w.x);
  const size_t B = size_t(w.base_hidden), K = size_t(w.token), GI = size_t(w.geometry_in);
  const T* mask = in.mask;

  // Per-view features: the gathered ones with the variant's direction, geometry or time term.
  if (variant != AggregatorVariant::kIbrnet) xyz_embed_.forward(m, in.xyz, a.xyz_embedded);
  if (variant == AggregatorVariant::kDynibarStatic) {
    for (size_t j = 0; j < m; ++j) {
      ray_embed_.forward(1, in.target_rays + (j / size_t(a.n_samples)) * 6,
                         a.ref_in + j * w.ref_in);
    }
    ref_feature_->forward(params, m, a.ref_in, a.ref_feature);
  }
  derive_view_inputs(a, in);
  const size_t dir_rows = a.count(w.dir_per);
  ray_dir_0_.forward(params, dir_rows,
                     variant == AggregatorVariant::kIbrnet ? in.ray_diff : a.dir_in, a.h_dir,
                     Activation::kElu);
  ray_dir_2_.forward(
      params, dir_rows, a.h_dir, a.dir,
      variant == AggregatorVariant::kDynibarStatic ? Activation::kNone : Activation::kElu);
  derive_features(a, in);

  // Pooling weights over views: anti-aliased (sharper towards the target direction) or uniform.
  const T s = options_.anti_alias_pooling ? std::abs(params[s_]) : T(0);
  for (size_t j = 0; j < m; ++j) {
    a.pool_denominator[j] = pooling_weights(int(V), options_.anti_alias_pooling, s,
                                            in.ray_diff + j * V * 4, mask + j * V, a.pool + j * V);
  }

  // Weighted mean and variance over views, per sample. base_fc sees them next to the features
  // of every view; its weights split into the part for the pair, applied once per sample, and
  // the part for the view's own features.
  for (size_t j = 0; j < m; ++j) {
    T* mean = a.mean_var + j * 2 * F;
    T* var = mean + F;
    const T* feat = a.feat + j * V * F;
    const T* pool = a.pool + j * V;
    std::fill(mean, mean + 2 * F, T(0));
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < F; ++c) mean[c] += feat[v * F + c] * pool[v];
    }
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < F; ++c) {
        const T dev = feat[v * F + c] - mean[c];
        var[c] += pool[v] * dev * dev;
      }
    }
  }
  base_0_.forward_slice(params, m, 0, int(2 * F), true, a.mean_var, a.h_mean_var);
  base_0_.forward_slice(params, n, int(2 * F), int(F), false, a.feat, a.h_base);
  for (size_t i = 0; i < n; ++i) {
    T* h = a.h_base + i * B;
    const T* h_mean_var = a.h_mean_var + (i / V) * B;
    for (size_t c = 0; c < B; ++c) h[c] = elu_of(h[c] + h_mean_var[c]);
  }
  base_2_.forward(params, n, a.h_base, a.x_base, Activation::kElu);

  // Visibility: a residual for the features and a first visibility from the pooled features.
  a.pool_x_base();
  vis_0_.forward(params, n, a.x_pooled, a.h_vis, Activation::kElu);
  vis_2_.forward(params, n, a.h_vis, a.x_vis, Activation::kElu);
  for (size_t i = 0; i < n; ++i) a.sig_vis[i] = a.x_vis[i * (X + 1) + X];
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
    T* g = a.geometry_in + j * GI;
    std::fill(g, g + GI, T(0));
    a.vis_denominator[j] = sum + T(kWeightEpsilon);
    for (size_t v = 0; v < V; ++v) {
      const T weight = a.vis[j * V + v] / a.vis_denominator[j];
      a.vis_weight[j * V + v] = weight;
      for (size_t c = 0; c < X; ++c) g[c] += a.x[(j * V + v) * X + c] * weight;
      g[2 * X] += weight;
    }
    g[2 * X] /= T(V);
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < X; ++c) {
        const T dev = a.x[(j * V + v) * X + c] - g[c];
        g[X + c] += a.vis_weight[j * V + v] * dev * dev;
      }
    }
  }
  geometry_0_.forward(params, m, a.geometry_in, a.h_geometry, Activation::kElu);
  geometry_2_.forward(params, m, a.h_geometry, a.geometry_out, Activation::kElu);

  // Ray transformer over the samples of each ray.
  for (size_t j = 0; j < m; ++j) {
    T count = 0;
    for (size_t v = 0; v < V; ++v) count += mask[j * V + v];
    a.n_valid[j] = count;
    a.valid_tokens[j] = count > 1 ? T(1) : T(0);
    const double* pe = positional_encoding_.empty()
                           ? nullptr
                           : positional_encoding_.data() + (j % size_t(a.n_samples)) * K;
    for (size_t c = 0; c < K; ++c) {
      a.tokens[j * K + c] = a.geometry_out[j * K + c] + (pe ? T(pe[c]) : T(0));
    }
  }
  ray_attention_.forward(params, a.rays, size_t(a.n_samples), a.tokens, a.valid_tokens,
                         a.attention_saved, a.attention_out);

  // Density: from the token, or (dynamic) from ref_pts_fc on the token and the position.
  const T* density_in = a.attention_out;
  if (variant == AggregatorVariant::kDynibarDynamic) {
    const size_t E = size_t(w.xyz_embedded), P = size_t(w.point_in);
    for (size_t j = 0; j < m; ++j) {
      std::copy(a.attention_out + j * K, a.attention_out + (j + 1) * K, a.point_in + j * P);
      std::copy(a.xyz_embedded + j * E, a.xyz_embedded + (j + 1) * E, a.point_in + j * P + K);
    }
    point_0_->forward(params, m, a.point_in, a.h_point, Activation::kElu);
    point_2_->forward(params, m, a.h_point, a.point, Activation::kElu);
    density_in = a.point;
  }
  out_geometry_0_.forward(params, m, density_in, a.h_sigma, Activation::kElu);
  const bool ibrnet = variant == AggregatorVariant::kIbrnet;
  out_geometry_2_.forward(params, m, a.h_sigma, a.sigma_head,
                          ibrnet ? Activation::kRelu : Activation::kNone);
  const T shift = variant == AggregatorVariant::kDynibarDynamic ? T(options_.density_shift) : T(0);
  const T unseen = ibrnet ? T(0) : T(kMaskedDensity);
  for (size_t j = 0; j < m; ++j) sigma[j] = a.n_valid[j] < 1 ? unseen : a.sigma_head[j] - shift;

  // Colour: blending weights over views, or (dynamic) a colour per sample.
  derive_colour_inputs(a, in);
  const size_t colour_rows = a.count(w.colour_per);
  rgb_0_.forward(params, colour_rows, a.rgb_in, a.h_rgb, Activation::kElu);
  rgb_2_.forward(params, colour_rows, a.h_rgb, a.h_rgb2, Activation::kElu);
  if (variant == AggregatorVariant::kDynibarDynamic) {
    rgb_4_.forward(params, m, a.h_rgb2, a.colour);
    sigmoid(m * 3, a.colour);
    for (size_t j = 0; j < m * 3; ++j) rgb[j] = a.n_valid[j / 3] < 1 ? T(0) : a.colour[j];
    return;
  }
  rgb_4_.forward(params, n, a.h_rgb2, a.blend);
  for (size_t j = 0; j < m; ++j) {
    blend_views(int(V), mask + j * V, in.rgb_features + j * V * G, G, a.blend + j * V, rgb + j * 3,
                [](T x) { return exp_nonpositive(x); });
  }
}

// From the density's gradient back to the token (g_attention_out, overwritten) and, for the
// dynamic network, the position. For the dynamic network g_point already holds the colour head's
// part.
template <typename T>
void IbrnetAggregator::density_backward(const T* params, T* grads, const Activations<T>& a,
                                        const T* grad_sigma, T* grad_xyz) const {
  const AggregatorWidths& w = widths_;
  const size_t m = a.samples, K = size_t(w.token);
  for (size_t j = 0; j < m; ++j) a.g_sigma[j] = a.n_valid[j] < 1 ? T(0) : grad_sigma[j];
  if (options_.variant == AggregatorVariant::kIbrnet) relu_backward(m, a.sigma_head, a.g_sigma);
  out_geometry_2_.backward(params, grads, m, a.h_sigma, a.g_sigma, a.g_h_sigma);
  elu_backward(m * size_t(w.sigma_hidden), a.h_sigma, a.g_h_sigma);
  if (options_.variant != AggregatorVariant::kDynibarDynamic) {
    out_geometry_0_.backward(params, grads, m, a.attention_out, a.g_h_sigma, a.g_attention_out);
    return;
  }
  const size_t P = size_t(w.point_in), E = size_t(w.xyz_embedded);
  out_geometry_0_.backward(params, grads, m, a.point, a.g_h_sigma, a.g_point, true);
  elu_backward(m * K, a.point, a.g_point);
  point_2_->backward(params, grads, m, a.h_point, a.g_point, a.g_h_point);
  elu_backward(m * size_t(w.point_hidden), a.h_point, a.g_h_point);
  point_0_->backward(params, grads, m, a.point_in, a.g_h_point, a.g_point_in);
  for (size_t j = 0; j < m; ++j) {
    const T* g = a.g_point_in + j * P;
    std::copy(g, g + K, a.g_attention_out + j * K);
    if (grad_xyz) xyz_embed_.backward(1, a.xyz_embedded + j * E, g + K, grad_xyz + j * 3);
  }
}

// From the features' gradient (g_feat) into the variant's direction, geometry or time MLPs.
template <typename T>
void IbrnetAggregator::view_features_backward(const T* params, T* grads, const Activations<T>& a,
                                              const AggregatorInputs<T>& in) const {
  const AggregatorWidths& w = widths_;
  const size_t V = size_t(a.n_views), G = size_t(w.gathered), F = size_t(w.feature);
  const size_t dir_rows = a.count(w.dir_per);
  switch (options_.variant) {
    case AggregatorVariant::kIbrnet:
      std::copy(a.g_feat, a.g_feat + a.rows * G, a.g_dir);
      elu_backward(a.rows * G, a.dir, a.g_dir);
      break;
    case AggregatorVariant::kDynibarStatic:
      std::fill(a.g_ref_feature, a.g_ref_feature + a.samples * G, T(0));
      for (size_t i = 0; i < a.rows; ++i) {
        const T* g = a.g_feat + i * F + G;
        const T* dir = a.dir + i * G;
        const T* ref = a.ref_feature + (i / V) * G;
        T* g_ref = a.g_ref_feature + (i / V) * G;
        for (size_t c = 0; c < G; ++c) {
          a.g_dir[i * G + c] = g[c] * ref[c];
          g_ref[c] += g[c] * dir[c];
        }
      }
      ref_feature_->backward(params, grads, a.samples, a.ref_in, a.g_ref_feature,
                             static_cast<T*>(nullptr));
      break;
    case AggregatorVariant::kDynibarDynamic:
      std::fill(a.g_dir, a.g_dir + a.samples * G, T(0));
      for (size_t i = 0; i < a.rows; ++i) {
        T* g_time = a.g_dir + (i / V) * G;
        for (size_t c = 0; c < G; ++c) g_time[c] += a.g_feat[i * F + c];
      }
      elu_backward(a.samples * G, a.dir, a.g_dir);
      break;
  }
  ray_dir_2_.backward(params, grads, dir_rows, a.h_dir, a.g_dir, a.g_h_dir);
  elu_backward(dir_rows * size_t(w.dir_hidden), a.h_dir, a.g_h_dir);
  ray_dir_0_.backward(params, grads, dir_rows,
                      options_.variant == AggregatorVariant::kIbrnet ? in.ray_diff : a.dir_in,
                      a.g_h_dir, static_cast<T*>(nullptr));
}

// Mirrors forward_chunk from the outputs back. g_* is the gradient of the loss with respect to
// the activation of the same name.
template <typename T>
void IbrnetAggregator::backward_chunk(const T* params, T* grads, const Activations<T>& a,
                                      const AggregatorInputs<T>& in, const T* grad_rgb,
                                      const T* grad_sigma, T* grad_rgb_features,
                                      T* grad_xyz) const {
  const AggregatorWidths& w = widths_;
  const AggregatorVariant variant = options_.variant;
  const size_t n = a.rows, m = a.samples, V = size_t(a.n_views);
  const size_t F = size_t(w.feature), G = size_t(w.gathered), X = size_t(w.x);
  const size_t B = size_t(w.base_hidden), K = size_t(w.token), GI = size_t(w.geometry_in);
  const size_t I = size_t(w.rgb_in), H2 = size_t(w.rgb_hidden2);
  const T* mask = in.mask;

  // Colour: the sigmoid (dynamic) or the softmax over views (no gradient into masked logits),
  // then rgb_fc.
  const size_t colour_rows = a.count(w.colour_per);
  if (variant == AggregatorVariant::kDynibarDynamic) {
    for (size_t j = 0; j < m * 3; ++j) a.g_colour[j] = a.n_valid[j / 3] < 1 ? T(0) : grad_rgb[j];
    sigmoid_backward(m * 3, a.colour, a.g_colour);
    rgb_4_.backward(params, grads, m, a.h_rgb2, a.g_colour, a.g_h_rgb2);
  } else {
    for (size_t j = 0; j < m; ++j) {
      blend_views_backward(int(V), mask + j * V, in.rgb_features + j * V * G, G, a.blend + j * V,
                           grad_rgb + j * 3, a.g_logit + j * V);
    }
    // rgb_fc.4's bias shifts every view's logit of a sample alike, which the softmax ignores: its
    // gradient is exactly zero and is left so, not summed from rounding noise that Adam, which
    // divides by the gradient's own size, would turn into full steps.
    rgb_4_.backward_slice(params, grads, n, 0, int(H2), /*with_bias=*/false, a.h_rgb2, a.g_logit,
                          a.g_h_rgb2);
  }
  elu_backward(colour_rows * H2, a.h_rgb2, a.g_h_rgb2);
  rgb_2_.backward(params, grads, colour_rows, a.h_rgb, a.g_h_rgb2, a.g_h_rgb);
  elu_backward(colour_rows * size_t(w.rgb_hidden), a.h_rgb, a.g_h_rgb);
  rgb_0_.backward(params, grads, colour_rows, a.rgb_in, a.g_h_rgb, a.g_rgb_in);
  if (variant == AggregatorVariant::kDynibarDynamic) {  // the colour comes from h, not x
    for (size_t j = 0; j < m; ++j) {
      std::copy(a.g_rgb_in + j * I, a.g_rgb_in + j * I + K, a.g_point + j * K);
    }
    std::fill(a.g_x, a.g_x + n * X, T(0));
    std::fill(a.g_vis, a.g_vis + n, T(0));
  } else {
    const size_t token = variant == AggregatorVariant::kDynibarStatic ? K : 0;
    for (size_t i = 0; i < n; ++i) {
      const T* g = a.g_rgb_in + i * I + token;
      std::copy(g, g + X, a.g_x + i * X);
      a.g_vis[i] = g[X];
    }
  }

  // Density, then the static network's colour head's part of the token's gradient.
  density_backward(params, grads, a, grad_sigma, grad_xyz);
  if (variant == AggregatorVariant::kDynibarStatic) {
    for (size_t i = 0; i < n; ++i) {
      T* g_token = a.g_attention_out + (i / V) * K;
      for (size_t c = 0; c < K; ++c) g_token[c] += a.g_rgb_in[i * I + c];
    }
  }
  ray_attention_.backward(params, grads, a.rays, size_t(a.n_samples), a.tokens, a.valid_tokens,
                          a.attention_saved, a.g_attention_out, a.g_tokens, a.attention_scratch);
  elu_backward(m * K, a.geometry_out, a.g_tokens);  // the encoding is a constant
  geometry_2_.backward(params, grads, m, a.h_geometry, a.g_tokens, a.g_h_geometry);
  elu_backward(m * size_t(w.geometry_hidden), a.h_geometry, a.g_h_geometry);
  geometry_0_.backward(params, grads, m, a.geometry_in, a.g_h_geometry, a.g_geometry_in);

  // Mean, variance and mean weight of x under the visibility weights, then their normalisation.
  std::vector<T> scratch(2 * std::max(F, X));
  for (size_t j = 0; j < m; ++j) {
    const T* g_in = a.g_geometry_in + j * GI;
    T* g_weight = a.g_vis_weight + j * V;
    const T common = mean_var_backward(V, X, a.x + j * V * X, a.vis_weight + j * V,
                                       a.vis_denominator[j], a.geometry_in + j * GI, g_in, g_in + X,
                                       a.g_x + j * V * X, g_weight, scratch.data());
    const T g_mean_weight = g_in[2 * X] / T(V);
    for (size_t v = 0; v < V; ++v) {
      a.g_vis[j * V + v] += normalisation_backward(int(V), int(v), a.vis_weight + j * V, g_weight,
                                                   common + g_mean_weight, a.vis_denominator[j]);
    }
  }

  // vis_fc2 and the first visibility.
  for (size_t i = 0; i < n; ++i) a.g_vis2[i] = a.g_vis[i] * mask[i];
  sigmoid_backward(n, a.vis2, a.g_vis2);
  vis2_2_.backward(params, grads, n, a.h_vis2, a.g_vis2, a.g_h_vis2);
  elu_backward(n * X, a.h_vis2, a.g_h_vis2);
  vis2_0_.backward(params, grads, n, a.x_vis_weighted, a.g_h_vis2, a.g_x_vis_weighted);
  for (size_t i = 0; i < n; ++i) {
    const T first_vis = a.sig_vis[i] * mask[i];
    T g_first_vis = 0;
    T* g_xv = a.g_x_vis + i * (X + 1);
    for (size_t c = 0; c < X; ++c) {
      const T g = a.g_x_vis_weighted[i * X + c];
      g_first_vis += g * a.x[i * X + c];
      a.g_x[i * X + c] += g * first_vis;
      g_xv[c] = a.g_x[i * X + c];  // x = x_base + residual
    }
    g_xv[X] = g_first_vis * mask[i] * a.sig_vis[i] * (T(1) - a.sig_vis[i]);
  }
  elu_backward(n * (X + 1), a.x_vis, a.g_x_vis);
  vis_2_.backward(params, grads, n, a.h_vis, a.g_x_vis, a.g_h_vis);
  elu_backward(n * X, a.h_vis, a.g_h_vis);
  vis_0_.backward(params, grads, n, a.x_pooled, a.g_h_vis, a.g_x_pooled);
  for (size_t i = 0; i < n; ++i) {
    T g_pool = 0;
    for (size_t c = 0; c < X; ++c) {
      const T g = a.g_x_pooled[i * X + c];
      g_pool += g * a.x_base[i * X + c];
      a.g_x_base[i * X + c] = a.g_x[i * X + c] + g * a.pool[i];
    }
    a.g_pool[i] = g_pool;
  }

  // base_fc, then the pooled mean and variance of the features back to every view.
  elu_backward(n * X, a.x_base, a.g_x_base);
  base_2_.backward(params, grads, n, a.h_base, a.g_x_base, a.g_h_base);
  elu_backward(n * B, a.h_base, a.g_h_base);
  base_0_.backward_slice(params, grads, n, int(2 * F), int(F), false, a.feat, a.g_h_base, a.g_feat);
  for (size_t j = 0; j < m; ++j) {  // a sample's mean and variance feed all of its views
    T* g = a.g_h_mean_var + j * B;
    std::fill(g, g + B, T(0));
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < B; ++c) g[c] += a.g_h_base[(j * V + v) * B + c];
    }
  }
  base_0_.backward_slice(params, grads, m, 0, int(2 * F), true, a.mean_var, a.g_h_mean_var,
                         a.g_mean_var);
  std::vector<T> g_weight(V);
  for (size_t j = 0; j < m; ++j) {
    const T* g_mean = a.g_mean_var + j * 2 * F;
    a.g_pool_common[j] = mean_var_backward(
        V, F, a.feat + j * V * F, a.pool + j * V, a.pool_denominator[j], a.mean_var + j * 2 * F,
        g_mean, g_mean + F, a.g_feat + j * V * F, g_weight.data(), scratch.data());
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
      add_sharpness_gradient(int(V), std::abs(s), in.ray_diff + j * V * 4, mask + j * V,
                             a.g_pool + j * V, double(a.g_pool_common[j]), e.data(), weight.data(),
                             &g_scale);
    }
    grads[s_] += T((s > 0 ? 1 : (s < 0 ? -1 : 0)) * g_scale);  // d|s|/ds, 0 at 0
  }

  view_features_backward(params, grads, a, in);

  if (!grad_rgb_features) return;
  for (size_t i = 0; i < n; ++i) {
    std::copy(a.g_feat + i * F, a.g_feat + i * F + G, grad_rgb_features + i * G);
  }
  if (variant == AggregatorVariant::kDynibarDynamic) return;
  for (size_t j = 0; j < m; ++j) {  // the colours also blend into the output directly
    for (size_t v = 0; v < V; ++v) {
      for (size_t c = 0; c < 3; ++c) {
        grad_rgb_features[(j * V + v) * G + c] += grad_rgb[j * 3 + c] * a.blend[j * V + v];
      }
    }
  }
}

#define MVIBR_AGGREGATOR(T)                                                                       \
  template void IbrnetAggregator::forward(const T*, int, int, int, const AggregatorInputs<T>&,    \
                                          AggregatorWorkspace<T>*, T*, T*) const;                 \
  template void IbrnetAggregator::backward(const T*, T*, const AggregatorWorkspace<T>&, const T*, \
                                           const T*, T*, T*) const;
MVIBR_AGGREGATOR(float)
MVIBR_AGGREGATOR(double)
#undef MVIBR_AGGREGATOR

}  // namespace mvibr::nn
