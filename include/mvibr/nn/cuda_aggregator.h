// The GPU version of the aggregation networks (nn/aggregator.h: IBRNet's, DynIBaR's static and
// dynamic), forward and backward on device pointers, so that the training step can run the
// network where its inputs already are. It computes what the CPU IbrnetAggregator computes, on
// the same layouts (render_ops.h's) and the same parameter layout (the network's run of the
// ParameterSet, parameter_count() floats from parameter_offset(), here a device copy), in fp32;
// results differ from the CPU's only by rounding (the GPU test states the bounds).
//
// Unlike the CPU network, it does not work in chunks: every dense layer is one cuBLAS GEMM over
// all rows of the batch (R*S*V rows for the per-view MLPs, R*S for the per-sample ones), and the
// activations the backward needs (about 2 KiB per (ray, sample, view) row for IBRNet, 1.3 GiB at
// 512 rays x 128 samples x 10 views, several times that for DynIBaR's widths) are kept by
// forward(), in device buffers that grow on demand and are reused by later calls; infer() keeps
// none beyond one bounded chunk. Everything else (embeddings, direction features, pooling
// weights, weighted means and variances over views, visibility, the ray transformer's attention,
// the blending softmax or the colour) runs in the hand-written kernels of kernels/aggregator.cu
// and kernels/periodic_embed.cu. Parameter gradients are reduced in fixed order, without atomics,
// so the same inputs give the same bits on every run.
//
// Exists only in a build with the CUDA backend (MVIBR_HAVE_CUDA, library mvibr_cuda).
#pragma once

#include <memory>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::nn::cuda {

class IbrnetAggregator {
 public:
  // Copies the options and the parameter layout of `network`, which may then go. Allocates no
  // device memory until the first forward.
  explicit IbrnetAggregator(const nn::IbrnetAggregator& network);
  ~IbrnetAggregator();
  IbrnetAggregator(const IbrnetAggregator&) = delete;
  IbrnetAggregator& operator=(const IbrnetAggregator&) = delete;

  // As nn::IbrnetAggregator::forward, on the context's stream: rgb [R,S,3] and sigma [R,S] are
  // overwritten. `params` is the device copy of the network's run, `inputs` device pointers.
  // Keeps the activations for backward, and the input pointers (not copies): those inputs must
  // stay unchanged until the last backward of this forward has run. Throws InvalidArgument
  // unless R >= 0, 1 <= S <= n_samples_max and V >= 1, and the inputs the variant reads are
  // there.
  void forward(Context& context, int n_rays, int n_samples, int n_views, const float* params,
               const AggregatorInputs<float>& inputs, float* rgb, float* sigma);

  // The backward of the last forward, on the same stream and with the same params: accumulates
  // (+=) the parameter gradients into `grads` (the run's layout, device) and overwrites
  // grad_rgb_features [R,S,V,3+C] (nullable) with the gradient of the inputs' colours and
  // features, and grad_xyz [R,S,3] (nullable; the dynamic network only) with the gradient of
  // the samples' positions. May run more than once per forward. Throws InvalidArgument before
  // any forward, and for grad_xyz of another variant.
  void backward(Context& context, const float* params, float* grads, const float* grad_rgb,
                const float* grad_sigma, float* grad_rgb_features, float* grad_xyz = nullptr);

  // The forward's rgb and sigma when no backward follows (validation, rendering): rays in
  // chunks whose activations, for at most `rows_per_chunk` (ray, sample, view) rows (at least
  // one ray), reuse one buffer of their own. The last forward stays valid for its backward.
  static constexpr size_t kInferenceRows = size_t(1) << 18;  // ~0.5 GiB of activations
  void infer(Context& context, int n_rays, int n_samples, int n_views, const float* params,
             const AggregatorInputs<float>& inputs, float* rgb, float* sigma,
             size_t rows_per_chunk = kInferenceRows);

  // Device memory held by this network's buffers.
  size_t device_bytes() const;

 private:
  struct Impl;  // in kernels/aggregator.cu
  std::unique_ptr<Impl> impl_;
};

}  // namespace mvibr::nn::cuda
