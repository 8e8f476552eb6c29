// IBRNet's feature network (ResUNet in ibrnet/feature_network.py) on the CPU, with a hand-written
// backward pass. It turns the V source images into the coarse and fine feature maps that the
// rendering core samples (render_ops.h: channels last [V, Hf, Wf, C]):
//
//   conv1 7x7/2 → IN → ReLU → layer1..layer3 (BasicBlock stages, each starting with stride 2)
//   → upconv3 (bilinear x2, conv3x3, IN, ELU) → cat with layer2's output → iconv3
//   → upconv2 → cat with layer1's output → iconv2 → out_conv 1x1 → coarse | fine channels.
//
// Every convolution pads by reflection; every norm is InstanceNorm2d(affine). The output is at a
// quarter of the image resolution, rounded up to whole cells of layer3 (output_size). Parameters
// are registered under PyTorch's state_dict names ("conv1.weight", "layer1.0.bn1.bias",
// "upconv3.conv.conv.weight", ...) behind a caller-given prefix, in ParameterGroup::kFeature.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/core/enum_names.h"
#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/parameters.h"

namespace mvibr::nn {

// kIbrnet: the published network. kSmall: widths 16, 32, 64, one block per stage, decoder 32,
// 16, 16 + 16 outputs, for training on a few CPU cores (10 views of 400x300 forward and backward
// in about 0.4 s on 2 cores, against about 3 s).
enum class ResUNetPreset { kIbrnet, kSmall };

struct ResUNetOptions {
  std::array<int, 3> widths{64, 128, 256};     // layer1..layer3 channels; conv1 has widths[0]
  std::array<int, 3> blocks{3, 4, 6};          // BasicBlocks per stage
  std::array<int, 2> decoder_widths{128, 64};  // upconv3 and iconv3, upconv2
  int coarse_out_ch = 32, fine_out_ch = 32;
  bool coarse_only = false;  // one output of coarse_out_ch channels; fine_out_ch is ignored

  // kIbrnet is the defaults above.
  static ResUNetOptions preset(ResUNetPreset preset);
  int out_channels() const { return coarse_only ? coarse_out_ch : coarse_out_ch + fine_out_ch; }
};

class ResUNet {
 public:
  class Workspace;

  // Registers every parameter (values zero until initialize) as prefix + its PyTorch name.
  // `parameters` must outlive the network; it may grow afterwards.
  ResUNet(const ResUNetOptions& options, ParameterSet* parameters, const std::string& prefix);

  // PyTorch's defaults: conv weights and biases U(±1/sqrt(fan_in)), norm weight 1 and bias 0.
  void initialize(Initializer& initializer);

  // The feature maps' size {Hf, Wf} for H x W images: 4 ceil(H / 16) x 4 ceil(W / 16).
  // InvalidArgument below 17 pixels a side (reflect padding needs layer3 to be 2 cells wide).
  static std::pair<int, int> output_size(int height, int width);

  // images: [V, H, W, 3] channels last, in [0, 1]. coarse_out: [V, Hf, Wf, coarse_out_ch];
  // fine_out: [V, Hf, Wf, fine_out_ch] (unused when coarse_only); either may be null. Keeps what
  // backward needs in `workspace`.
  void forward(int views, int height, int width, const float* images, Workspace* workspace,
               float* coarse_out, float* fine_out) const;

  // Gradients of the last forward through `workspace`, given those of its outputs (channels
  // last; either may be null for zero), accumulated (+=) into the parameters' gradients. The
  // images get none.
  void backward(Workspace* workspace, const float* grad_coarse, const float* grad_fine) const;

  // Every conv unit's output of the last forward through `workspace` (after its norm, residual
  // and activation), named by its convolution's PyTorch module path without the prefix
  // ("layer1.0.conv2"), in registration order: for comparing with PyTorch layer by layer.
  struct UnitOutput {
    std::string name;
    Activation activation;
    MapBatch output;
  };
  std::vector<UnitOutput> unit_outputs(const Workspace& workspace) const;

  const ResUNetOptions& options() const { return options_; }

  // Conv2d (reflect padding (k - 1) / 2) → InstanceNorm2d(affine) → activation: every
  // convolution but out_conv. The decoder's have a bias (nn.Conv2d's default); the norm right
  // after cancels it exactly, so its gradient is exactly zero and backward leaves it alone.
  struct ConvUnit {
    std::string name;                     // the convolution's module path
    Parameter weight, bias, gamma, beta;  // bias.index == SIZE_MAX: none
    int in_channels = 0, out_channels = 0, kernel = 1, stride = 1;
    Activation activation = Activation::kNone;
  };
  // out = ReLU(IN(conv2(ReLU(IN(conv1(x))))) + identity), identity = downsample(x) or x.
  struct Block {
    int conv1 = -1, conv2 = -1, downsample = -1;  // indices into units; -1: identity
  };
  // The network's wiring, read-only, so that another implementation of it (the GPU one,
  // cuda_feature_net.h) runs the same units on the same parameters. Valid while this network
  // and its ParameterSet live.
  struct Wiring {
    const ParameterSet& parameters;
    const std::vector<ConvUnit>& units;               // in registration order
    const std::array<std::vector<Block>, 3>& stages;  // layer1..layer3
    int stem, upconv3, iconv3, upconv2, iconv2;       // indices into units
    Parameter out_weight, out_bias;                   // out_conv, 1x1 with bias
  };
  Wiring wiring() const {
    return {*parameters_, units_,   stages_, stem_,       upconv3_,
            iconv3_,      upconv2_, iconv2_, out_weight_, out_bias_};
  }

 private:
  int add_unit(const std::string& conv_name, int in_channels, int out_channels, int kernel,
               int stride, bool bias, Activation activation, const std::string& norm_name);
  // One unit's forward, recorded in the workspace; residual (may be null) goes before the
  // activation.
  MapBatch unit_forward(int unit, const MapBatch& input, const float* residual,
                        Workspace& workspace) const;
  // grad_out: the gradient of the unit's output (destroyed). grad_in and grad_residual (either
  // may be null) accumulate the gradients of its input and residual.
  void unit_backward(int unit, float* grad_out, float* grad_in, float* grad_residual,
                     Workspace& workspace) const;
  void block_backward(const Block& block, float* grad_out, float* grad_in,
                      Workspace& workspace) const;
  const float* value(Parameter p) const { return parameters_->value(p); }
  float* grad(Parameter p) const { return parameters_->grad(p); }

  ResUNetOptions options_;
  ParameterSet* parameters_;
  std::string prefix_;
  std::vector<ConvUnit> units_;
  std::array<std::vector<Block>, 3> stages_;
  int stem_ = -1, upconv3_ = -1, iconv3_ = -1, upconv2_ = -1, iconv2_ = -1;
  Parameter out_weight_, out_bias_;
};

// What forward keeps for backward (every unit's input, convolution output and output) plus
// backward's scratch: 1.4 GB for 10 views of 400x300 with the ibrnet preset, 0.3 GB with the
// small one. Sized on first use, reused while the size stays the same. One per forward/backward
// in flight.
class ResUNet::Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  size_t bytes() const;

 private:
  friend class ResUNet;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::nn

namespace mvibr {
template <>
struct EnumNames<nn::ResUNetPreset> {
  static constexpr std::pair<nn::ResUNetPreset, const char*> values[] = {
      {nn::ResUNetPreset::kIbrnet, "ibrnet"}, {nn::ResUNetPreset::kSmall, "small"}};
};
}  // namespace mvibr
