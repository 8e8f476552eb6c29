// IBRNet's aggregation network (the "IBRNet" module of Wang et al., CVPR 2021) and DynIBaR's two
// wider variants of it (Li et al., CVPR 2023), on the CPU, forward and hand-written backward:
// from the gathered colours, features, ray differences and masks of every sample in every source
// view to a density and a colour per sample.
//
// The variants share the pooling over views, the visibility blocks, geometry_fc and the ray
// transformer; they differ at the two ends:
// - IBRNet: features += ELU MLP of ray_diff (ray_dir_fc 4 -> 16 -> 3 + C); anti-aliased pooling;
//   positional encoding; density ReLU(out_geometry_fc), 0 where no view sees the sample; colour by
//   blending the views with softmax(rgb_fc(x, vis, ray_diff)) over views.
// - DynIBaR static (DynibarStatic): features = cat(gathered, ray_dir_fc(xyz embedded, source ray's
//   Plucker coordinates embedded, ray_diff) * ref_feature_fc(target ray's Plucker coordinates
//   embedded)); pooling uniform or anti-aliased; no positional encoding; density out_geometry_fc
//   unbounded, -1e9 where no view sees the sample; blending logits from rgb_fc(token, x, vis,
//   ray_diff). Widths 256 / 128, attention 4 heads of 32.
// - DynIBaR dynamic (DynibarDynamic): features += ELU MLP of the embedded time; uniform pooling;
//   positional encoding; after the transformer, ref_pts_fc(token, xyz embedded) -> h; density
//   out_geometry_fc(h) - shift, -1e9 where no view sees the sample; colour sigmoid(rgb_fc(h,
//   embedded view direction)), 0 where no view sees the sample.
// Embeddings are PeriodicEmbed's, log spacing: xyz and Plucker 5 frequencies, time 10, view
// direction 4. DynIBaR's mask_rgb (near-black colours count as unseen) is the caller's: it passes
// the mask so multiplied.
//
// Memory shapes the design. The activations the backward reads take about 1.4 KiB per (ray,
// sample, view) row for IBRNet (several times that for DynIBaR's widths): 0.42 GiB for 512 rays x
// 64 samples x 10 views, 0.9 GiB at 128 samples (those that are elementwise functions of others
// are derived again instead of stored).
// The forward runs chunks of rays (about 640 rows, a working set of about 2.5 MiB per thread,
// close to a core's L2). When the whole batch's activations fit
// AggregatorOptions::stored_activations_budget, the forward writes each chunk's into the
// workspace and the backward reads them back; otherwise the workspace keeps only pointers to the
// inputs and the backward recomputes each chunk's activations right before it backpropagates
// through them (one extra forward, a third more work, on data that stays in L2). Storing trades
// that forward for memory traffic, so it gains less than the forward costs: on 2 cores, 10-15%
// of forward + backward at 64 and at 128 samples once the workspace's pages exist (its first use
// pays for faulting them in, about one step's saving). Both paths run the same forward code on
// the same chunks, so the stored values are exactly what recomputation gives and the results are
// bit-identical either way. Chunks of rays are independent (the ray transformer mixes samples of
// one ray only), so OpenMP runs them in parallel with single-threaded BLAS inside. Each chunk
// accumulates its parameter gradients in its own slot, and slots are summed in chunk order, so
// results are the same for every thread count.
//
// Layouts are render_ops.h's: rgb_features [R,S,V,3+C] (colour then features), ray_diff
// [R,S,V,4] (direction difference, then the dot product of the directions), mask [R,S,V] (1 for
// a valid projection, 0 otherwise); outputs rgb [R,S,3] and sigma [R,S] (the density before any
// softplus, for DynIBaR's compositing).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/nn/aggregator_layout.h"
#include "mvibr/nn/layers.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/nn/periodic_embed.h"

namespace mvibr::nn {

// min(2 GiB, physical memory / 8).
size_t default_stored_activations_budget();

struct AggregatorOptions {
  AggregatorVariant variant = AggregatorVariant::kIbrnet;
  int feature_channels = 32;       // C: rgb_features carry 3 + C channels
  int n_samples_max = 128;         // rows of the positional-encoding table: S may not exceed it
  bool anti_alias_pooling = true;  // IBRNet's and the static network's; never the dynamic's
  double density_shift = 5.0;      // the dynamic network's (DynIBaR's monocular model)
  ParameterGroup group = ParameterGroup::kMlp;  // the learning rate its parameters train at
  // kQueries is what IBRNet's code computes (its mask broadcasts over keys); kKeys is the
  // key-padding mask the transformer literature means.
  AttentionMask attention_mask = AttentionMask::kQueries;
  Operands linear_operands = Operands::kFp32;  // every Linear's, the ray attention's included
  // Bytes of activations a forward with a workspace may keep for its backward (each network's
  // workspace on its own); above it, the backward recomputes them. The default is the smaller of
  // 2 GiB and an eighth of physical memory: room for the fine pass at 512 rays x 128 samples x
  // 10 views (0.9 GiB; training holds it and the coarse pass's 0.42 GiB) without crowding a small
  // machine. Tests set 0 (always recompute) or SIZE_MAX (always store).
  size_t stored_activations_budget = default_stored_activations_budget();
};

// At least `bytes`, aligned to and advised (madvise) into 2 MiB pages; std::free releases it.
void* allocate_huge_pages(size_t bytes);

// For the stored activations. A fresh 0.42 GiB workspace in 4 KiB pages costs 110,000 page
// faults, more time than storing saves in a step, so it asks for 2 MiB pages; and it leaves new
// elements uninitialised (the forward writes every stored value before the backward reads it),
// which spares a pass that would zero them.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_huge_pages(n * sizeof(T))); }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

// A batch's inputs: the gathered views, and the geometry DynIBaR's variants read (null where the
// variant reads none).
template <typename T>
struct AggregatorInputs {
  const T* rgb_features = nullptr;  // [R,S,V,3+C]
  const T* ray_diff = nullptr;      // [R,S,V,4]
  const T* mask = nullptr;          // [R,S,V]
  const T* xyz = nullptr;           // [R,S,3] the samples (static, dynamic)
  const T* src_rays = nullptr;      // [R,S,V,6] each source ray's Plucker coordinates (static)
  const T* target_rays = nullptr;   // [R,6] the target ray's (static)
  const T* time = nullptr;          // [R] the target's frame / number of frames (dynamic)
  const T* view_dir = nullptr;      // [R,3] the target ray's unit direction (dynamic)

  // The same arrays from ray `first` on.
  AggregatorInputs from_ray(size_t first, int n_samples, int n_views, int channels) const;
};

// Throws InvalidArgument, naming `network` ("aggregator", "aggregator on the GPU"), unless
// R >= 0, 1 <= S <= n_samples_max and V >= 1, and (with rays) the inputs the variant reads are
// there. Both backends' forward check their call with it.
template <typename T>
void check_aggregator_call(const AggregatorOptions& options, int n_rays, int n_samples, int n_views,
                           const AggregatorInputs<T>& in, const std::string& network);

// What forward keeps for backward: the sizes, pointers to the inputs (not copies), and, within
// the budget, every chunk's activations. The inputs must stay alive and unchanged until the
// backward that uses this workspace has returned. The activations' buffer grows and never
// shrinks while batches fit (fresh pages on every step would cost their faults), and is freed
// when one does not.
template <typename T>
struct AggregatorWorkspace {
  int n_rays = 0, n_samples = 0, n_views = 0;
  AggregatorInputs<T> inputs;
  size_t chunk_stride = 0;  // elements per chunk in `activations`; 0: backward recomputes
  std::vector<T, HugePageAllocator<T>> activations;  // chunk c's at c * chunk_stride
};

class IbrnetAggregator {
 public:
  // Registers every parameter in `set` under `prefix` (e.g. "net_coarse."), named and shaped as
  // PyTorch's state_dict (IBRNet's, or DynIBaR's DynibarStatic / DynibarDynamic), all in
  // options.group, back to back. The set must outlive this. InvalidArgument for a dynamic
  // network with anti-aliased pooling.
  IbrnetAggregator(ParameterSet& set, const std::string& prefix, AggregatorOptions options);

  // IBRNet's initialisation: kaiming_normal_ weights and zero biases for base_fc, vis_fc,
  // vis_fc2, geometry_fc and rgb_fc; nn.Linear's defaults for ray_dir_fc, the attention and
  // out_geometry_fc; LayerNorm 1 and 0; s = 0.2. DynIBaR's: nn.Linear's defaults everywhere.
  void initialize(Initializer& init);

  // rgb [R,S,3] and sigma [R,S] are overwritten. `workspace` (null for inference) records what
  // backward needs. Throws InvalidArgument unless R >= 0, 1 <= S <= n_samples_max and V >= 1,
  // and the inputs the variant reads are there.
  void forward(int n_rays, int n_samples, int n_views, const AggregatorInputs<float>& inputs,
               AggregatorWorkspace<float>* workspace, float* rgb, float* sigma) const;
  // Accumulates (+=) the parameter gradients into the set's grads, and overwrites
  // grad_rgb_features [R,S,V,3+C] (nullable) with the gradient of the inputs' colours and
  // features, through the blending and through the pooled features, and grad_xyz [R,S,3]
  // (nullable; the dynamic network only, InvalidArgument otherwise) with the gradient of the
  // samples' positions through their embedding. The other inputs get none.
  void backward(const AggregatorWorkspace<float>& workspace, const float* grad_rgb,
                const float* grad_sigma, float* grad_rgb_features, float* grad_xyz = nullptr);

  // The same on explicit arrays laid out as this network's run of the set (parameter_count()
  // values from parameter_offset()): double precision for the finite-difference and PyTorch
  // checks.
  template <typename T>
  void forward(const T* params, int n_rays, int n_samples, int n_views,
               const AggregatorInputs<T>& inputs, AggregatorWorkspace<T>* workspace, T* rgb,
               T* sigma) const;
  template <typename T>
  void backward(const T* params, T* grads, const AggregatorWorkspace<T>& workspace,
                const T* grad_rgb, const T* grad_sigma, T* grad_rgb_features,
                T* grad_xyz = nullptr) const;

  const AggregatorOptions& options() const { return options_; }
  AggregatorVariant variant() const { return options_.variant; }
  size_t parameter_offset() const { return block_.offset(); }
  size_t parameter_count() const { return block_.size(); }

  // Copies of the layers (where each one's parameters sit in this network's run) and of the
  // embeddings, the offset of s in the run (when anti_alias_pooling) and the positional-encoding
  // table [n_samples_max, token]: what the GPU version of this network (nn/cuda_aggregator.h)
  // needs to run it on the same parameter layout.
  struct Layers {
    Linear ray_dir_0, ray_dir_2, base_0, base_2, vis_0, vis_2, vis2_0, vis2_2, geometry_0,
        geometry_2;
    MultiHeadAttention ray_attention;
    Linear out_geometry_0, out_geometry_2, rgb_0, rgb_2, rgb_4;
    std::optional<Linear> ref_feature, point_0, point_2;  // static; dynamic (ref_pts_fc)
    PeriodicEmbed xyz_embed, ray_embed, time_embed, view_dir_embed;
  };
  Layers layers() const {
    return {ray_dir_0_,      ray_dir_2_, base_0_,     base_2_,     vis_0_,         vis_2_,
            vis2_0_,         vis2_2_,    geometry_0_, geometry_2_, ray_attention_, out_geometry_0_,
            out_geometry_2_, rgb_0_,     rgb_2_,      rgb_4_,      ref_feature_,   point_0_,
            point_2_,        xyz_embed_, ray_embed_,  time_embed_, view_dir_embed_};
  }
  const AggregatorWidths& widths() const { return widths_; }  // aggregator_layout.h
  size_t sharpness_offset() const { return s_; }
  const std::vector<double>& positional_encoding() const { return positional_encoding_; }

 private:
  template <typename T>
  struct Activations;  // one chunk's activations and gradients, in aggregator_activations.h

  template <typename T>
  void forward_chunk(const T* params, const Activations<T>& a, const AggregatorInputs<T>& in,
                     T* rgb, T* sigma) const;
  template <typename T>
  void backward_chunk(const T* params, T* grads, const Activations<T>& a,
                      const AggregatorInputs<T>& in, const T* grad_rgb, const T* grad_sigma,
                      T* grad_rgb_features, T* grad_xyz) const;
  // The variant's ends, and the activations derived from others (aggregator.h's note).
  template <typename T>
  void derive_view_inputs(const Activations<T>& a, const AggregatorInputs<T>& in) const;
  template <typename T>
  void derive_features(const Activations<T>& a, const AggregatorInputs<T>& in) const;
  template <typename T>
  void derive_colour_inputs(const Activations<T>& a, const AggregatorInputs<T>& in) const;
  template <typename T>
  void view_features_backward(const T* params, T* grads, const Activations<T>& a,
                              const AggregatorInputs<T>& in) const;
  template <typename T>
  void density_backward(const T* params, T* grads, const Activations<T>& a, const T* grad_sigma,
                        T* grad_xyz) const;

  // A layer of this network (with a bias, on options_.linear_operands) in block_; none where
  // `present` is false. For the constructor, after options_ and block_.
  Linear layer(const std::string& name, int in, int out);
  std::optional<Linear> layer_if(bool present, const std::string& name, int in, int out);

  AggregatorOptions options_;
  AggregatorWidths widths_;
  ParameterBlock block_;
  size_t s_ = 0;  // the anti-alias pooling sharpness, when pooling is on
  PeriodicEmbed xyz_embed_, ray_embed_, time_embed_, view_dir_embed_;
  Linear ray_dir_0_, ray_dir_2_;
  std::optional<Linear> ref_feature_;  // static
  Linear base_0_, base_2_;
  Linear vis_0_, vis_2_;
  Linear vis2_0_, vis2_2_;
  Linear geometry_0_, geometry_2_;
  MultiHeadAttention ray_attention_;
  std::optional<Linear> point_0_, point_2_;  // dynamic: ref_pts_fc
  Linear out_geometry_0_, out_geometry_2_;
  Linear rgb_0_, rgb_2_, rgb_4_;
  std::vector<double> positional_encoding_;  // [n_samples_max, token], empty for static
};

}  // namespace mvibr::nn
