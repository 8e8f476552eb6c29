// IBRNet's ResUNet as a graph of conv units, its forward and backward written once over MapOps:
// the CPU network (feature_net.h) and the GPU one (cuda_feature_net.h) both run this code.
// - Parameters are offsets into the flat ParameterSet buffers: `params` and `grads` are the
//   backend's copies of values() and grads().
// - forward records each unit's input, convolution output and output in the Workspace; backward
//   walks the units in reverse, so every gradient accumulates in the same order on each backend.
// - Images and outputs are channels last ([V, H, W, 3], [V, Hf, Wf, C]); maps inside are in the
//   ops' layout (MapOps::layout), recorded in each MapBatch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/map_ops.h"

namespace mvibr::nn {

struct ResUNetGraph {
  static constexpr size_t kNoBias = SIZE_MAX;

  // Conv2d (reflect padding (k - 1) / 2) → InstanceNorm2d(affine) → activation: every
  // convolution but out_conv. The decoder's have a bias (nn.Conv2d's default); the norm right
  // after cancels it exactly, so its gradient is exactly zero and backward leaves it alone.
  struct Unit {
    std::string name;  // the convolution's PyTorch module path ("layer1.0.conv2")
    size_t weight = 0, bias = kNoBias, gamma = 0, beta = 0;  // offsets
    int in_channels = 0, out_channels = 0, kernel = 1, stride = 1;
    bool upsample = false;  // the decoder's upconvs: the input upsampled by 2 (ConvShape::upsample)
    Activation activation = Activation::kNone;
  };
  // out = ReLU(IN(conv2(ReLU(IN(conv1(x))))) + identity), identity = downsample(x) or x.
  struct Block {
    int conv1 = -1, conv2 = -1, downsample = -1;  // indices into units; -1: identity
  };

  // What forward keeps for backward (every unit's input, convolution output and output) plus
  // backward's scratch, in one backend's memory: handed out in the same order on every call of
  // one size, so allocated once.
  class Workspace {
   public:
    explicit Workspace(const MapOps& ops);
    size_t bytes() const;

   private:
    friend struct ResUNetGraph;
    struct UnitRecord {
      MapBatch input, conv_output, output;  // conv_output: what the norm normalised
      float* norm_statistics = nullptr;     // kInstanceNormStatisticsFloats per plane
      float* kept_input = nullptr;          // the convolution's (MapOps::conv2d_kept_input_floats)
    };
    MapBatch take(int batch, int channels, int height, int width);
    float* scratch(int slot, size_t count);  // the buffers shared by all units (resunet_graph.cpp)

    const MapOps& ops_;
    std::vector<std::unique_ptr<MapBuffer>> buffers_, scratch_;
    size_t next_ = 0;
    MapLayout layout_ = MapLayout::kPlanar;  // the last forward's ops'
    bool forward_done_ = false;
    std::vector<UnitRecord> records_;
    MapBatch images_, stages_[3], skip3_, skip2_, features_, out_;
    float* grad_skip_[2] = {nullptr, nullptr};  // the encoder stages' gradients from the skips
  };

  std::vector<Unit> units;                                              // in registration order
  std::array<std::vector<Block>, 3> stages;                             // layer1..layer3
  int stem = -1, upconv3 = -1, iconv3 = -1, upconv2 = -1, iconv2 = -1;  // indices into units
  size_t out_weight = 0, out_bias = 0;                                  // out_conv, 1x1 with bias
  int coarse_channels = 0, fine_channels = 0;  // the outputs; fine 0 when coarse only
  // DynIBaR's forward: conv1 → layer1 → out_conv, layers 2-3 and the decoder unused (their
  // parameters stay, with zero gradients, as the published state_dict has them).
  bool shallow = false;
  ConvAlgorithm conv_algorithm = ConvAlgorithm::kDirect;  // the CPU's 3x3 stride-1 convolutions
  Operands conv_operands = Operands::kFp32;               // the CPU's convolutions above 1x1

  int out_channels() const { return coarse_channels + fine_channels; }

  // images [V, H, W, 3] in [0, 1] → coarse_out [V, Hf, Wf, coarse_channels] and fine_out
  // [V, Hf, Wf, fine_channels] (either may be null); {Hf, Wf} = output_size(H, W).
  void forward(MapOps& ops, Workspace& workspace, int views, int height, int width,
               const float* images, const float* params, float* coarse_out, float* fine_out) const;
  // Gradients of the last forward through `workspace`, given those of its outputs (either may
  // be null for zero), accumulated (+=) into grads. The images get none.
  void backward(MapOps& ops, Workspace& workspace, const float* params, float* grads,
                const float* grad_coarse, const float* grad_fine) const;

  struct UnitOutput {
    std::string name;
    Activation activation;
    MapBatch output;
  };
  // Every output of the last forward's units, in registration order: for layer-by-layer checks.
  std::vector<UnitOutput> unit_outputs(const Workspace& workspace) const;

  // The feature maps' size {Hf, Wf} for H x W images: 4 ceil(H / 16) x 4 ceil(W / 16), or
  // shallow, layer1's ceil(H / 4) x ceil(W / 4). InvalidArgument below 17 pixels a side (reflect
  // padding needs layer3 to be 2 cells wide), or shallow 8.
  static std::pair<int, int> output_size(int height, int width, bool shallow = false);

 private:
  MapBatch unit_forward(MapOps& ops, Workspace& workspace, int unit, const MapBatch& input,
                        const float* residual, const float* params) const;
  // grad_out: the gradient of the unit's output (destroyed). grad_in and grad_residual (either
  // may be null) accumulate the gradients of its input and residual; grad_in_fresh: grad_in
  // holds nothing yet and is written instead (no zeroing first).
  void unit_backward(MapOps& ops, Workspace& workspace, int unit, const float* params, float* grads,
                     float* grad_out, float* grad_in, bool grad_in_fresh,
                     float* grad_residual) const;
  void block_backward(MapOps& ops, Workspace& workspace, const Block& block, const float* params,
                      float* grads, float* grad_out, float* grad_in, bool grad_in_fresh) const;
};

}  // namespace mvibr::nn
