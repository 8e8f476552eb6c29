// IBRNet's feature network (ResUNet in ibrnet/feature_network.py) on the CPU, with a hand-written
// backward pass (the graph in resunet_graph.h, which the GPU network runs too). It turns the V
// source images into the coarse and fine feature maps that the rendering core samples
// (render_ops.h: channels last [V, Hf, Wf, C]):
//
//   conv1 7x7/2 → IN → ReLU → layer1..layer3 (BasicBlock stages, each starting with stride 2)
//   → upconv3 (bilinear x2, conv3x3, IN, ELU) → cat with layer2's output → iconv3
//   → upconv2 → cat with layer1's output → iconv2 → out_conv 1x1 → coarse | fine channels.
//
// Every convolution pads by reflection; every norm is InstanceNorm2d(affine). The output is at a
// quarter of the image resolution, rounded up to whole cells of layer3 (output_size). Parameters
// are registered under PyTorch's state_dict names ("conv1.weight", "layer1.0.bn1.bias",
// "upconv3.conv.conv.weight", ...) behind a caller-given prefix, in options.group (kFeature unless
// set).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/core/enum_names.h"
#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/map_ops.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/nn/resunet_graph.h"

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
  // DynIBaR's forward (ResUNetGraph::shallow): conv1 → layer1 → out_conv at a quarter of the
  // image size; layer1's width must equal out_channels() (out_conv maps it 1x1).
  bool shallow = false;
  ConvAlgorithm conv_algorithm = ConvAlgorithm::kDirect;  // the CPU's 3x3 stride-1 convolutions
  Operands conv_operands = Operands::kFp32;               // the CPU's convolutions above 1x1
  MapLayout map_layout = MapLayout::kPlanar;              // the CPU's maps (the GPU's are planar)
  ParameterGroup group = ParameterGroup::kFeature;  // the learning rate its parameters train at

  // kIbrnet is the defaults above.
  static ResUNetOptions preset(ResUNetPreset preset);
  int out_channels() const { return coarse_only ? coarse_out_ch : coarse_out_ch + fine_out_ch; }
};

class ResUNet {
 public:
  // What forward keeps for backward plus backward's scratch, in host memory: 1.4 GB for 10 views
  // of 400x300 with the ibrnet preset, 0.3 GB with the small one. One per forward/backward in
  // flight.
  class Workspace : public ResUNetGraph::Workspace {
   public:
    Workspace() : ResUNetGraph::Workspace(cpu_map_ops()) {}
  };
  using UnitOutput = ResUNetGraph::UnitOutput;

  // Registers every parameter (values zero until initialize) as prefix + its PyTorch name.
  // `parameters` must outlive the network; it may grow afterwards.
  ResUNet(const ResUNetOptions& options, ParameterSet* parameters, const std::string& prefix);

  // PyTorch's defaults: conv weights and biases U(±1/sqrt(fan_in)), norm weight 1 and bias 0.
  void initialize(Initializer& initializer);

  // The feature maps' size {Hf, Wf} for H x W images (ResUNetGraph::output_size).
  static std::pair<int, int> output_size(int height, int width, bool shallow = false) {
    return ResUNetGraph::output_size(height, width, shallow);
  }

  // images: [V, H, W, 3] channels last, in [0, 1]. coarse_out: [V, Hf, Wf, coarse_out_ch];
  // fine_out: [V, Hf, Wf, fine_out_ch] (unused when coarse_only); either may be null. Keeps what
  // backward needs in `workspace`.
  void forward(int views, int height, int width, const float* images, Workspace* workspace,
               float* coarse_out, float* fine_out) const;

  // Gradients of the last forward through `workspace`, given those of its outputs (channels
  // last; either may be null for zero), accumulated (+=) into the parameters' gradients. The
  // images get none.
  void backward(Workspace* workspace, const float* grad_coarse, const float* grad_fine) const;

  // Every conv unit's output of the last forward through `workspace`, named by its convolution's
  // PyTorch module path without the prefix ("layer1.0.conv2"), in registration order.
  std::vector<UnitOutput> unit_outputs(const Workspace& workspace) const {
    return graph_.unit_outputs(workspace);
  }

  const ResUNetOptions& options() const { return options_; }
  // The network as a graph over the flat parameter buffers, for another backend to run (the GPU
  // one, cuda_feature_net.h). Its offsets are this network's in its ParameterSet.
  const ResUNetGraph& graph() const { return graph_; }

 private:
  int add_unit(const std::string& conv_name, int in_channels, int out_channels, int kernel,
               int stride, bool bias, Activation activation, const std::string& norm_name);

  ResUNetOptions options_;
  ParameterSet* parameters_;
  std::string prefix_;
  ResUNetGraph graph_;
};

}  // namespace mvibr::nn

namespace mvibr {
template <>
struct EnumNames<nn::ResUNetPreset> {
  static constexpr std::pair<nn::ResUNetPreset, const char*> values[] = {
      {nn::ResUNetPreset::kIbrnet, "ibrnet"}, {nn::ResUNetPreset::kSmall, "small"}};
};
}  // namespace mvibr
