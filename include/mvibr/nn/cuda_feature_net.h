// IBRNet's ResUNet feature network (nn/feature_net.h) on the GPU, forward and backward.
// - The CPU network's graph (nn/resunet_graph.h) run over the GPU layers (nn/cuda_layers.h): the
//   same code, units and parameter offsets, so it computes what the CPU computes, to fp32
//   rounding in the convolutions (cuDNN sums in another order than oneDNN), bit for bit elsewhere.
// - Parameters and gradients are device copies of ParameterSet::values() and grads().
// - Asynchronous on the Context's stream; only in a build with the CUDA backend (mvibr_cuda).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/feature_net.h"

namespace mvibr::nn::cuda {

class ResUNet {
 public:
  // Takes the wiring and parameter offsets of `network`, which need not outlive this object.
  // Allocates nothing on the device until the first forward.
  explicit ResUNet(const nn::ResUNet& network);
  ~ResUNet();
  ResUNet(const ResUNet&) = delete;
  ResUNet& operator=(const ResUNet&) = delete;

  // images: [V, H, W, 3] in [0, 1]; params: the device copy of the ParameterSet's values.
  // coarse_out: [V, Hf, Wf, coarse_out_ch]; fine_out: [V, Hf, Wf, fine_out_ch] (unused when
  // coarse_only); either may be null. {Hf, Wf} = nn::ResUNet::output_size(H, W), which also
  // rejects images too small. Keeps what backward needs in this object's device workspace, which
  // grows on demand (waiting for the device first) and is reused while the sizes stay the same.
  // One forward/backward in flight per object, and the calls in stream order.
  void forward(Context& context, int views, int height, int width, const float* images,
               const float* params, float* coarse_out, float* fine_out);

  // Gradients of the last forward, given those of its outputs (channels last; either may be null
  // for zero), accumulated (+=) into grads (the device gradient buffer, ParameterSet layout).
  // params must hold the values the forward used. The images get none.
  void backward(Context& context, const float* params, float* grads, const float* grad_coarse,
                const float* grad_fine);

  // Every conv unit's output of the last forward (device maps, valid until the next forward),
  // named and ordered as nn::ResUNet::unit_outputs: for comparing with the CPU layer by layer.
  using UnitOutput = ResUNetGraph::UnitOutput;
  std::vector<UnitOutput> unit_outputs() const;

  const ResUNetOptions& options() const;
  // Device memory held by the workspace.
  size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mvibr::nn::cuda
