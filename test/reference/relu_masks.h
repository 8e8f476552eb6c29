// The ReLU masks of a ResUNet's last forward, for a float64 reference to follow our side of every
// ReLU's kink (model_parity_test and feature_net_test say why).
// - One per ReLU unit, named by its convolution ("layer1.0.conv2"): 1 where our output is > 0.
// - NCHW [views, channels, height, width], the reference's layout, whatever the maps' layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mvibr/nn/feature_net.h"
#include "npy.h"
#include "planar_order.h"

namespace mvibr::test {

inline std::vector<std::pair<std::string, NpyArray>> relu_masks(
    const nn::ResUNet& net, const nn::ResUNet::Workspace& workspace) {
  std::vector<std::pair<std::string, NpyArray>> masks;
  for (const nn::ResUNet::UnitOutput& unit : net.unit_outputs(workspace)) {
    if (unit.activation != nn::Activation::kRelu) continue;
    const nn::MapBatch& m = unit.output;
    NpyArray mask{{size_t(m.batch), size_t(m.channels), size_t(m.height), size_t(m.width)},
                  std::vector<double>(m.size())};
    for_each_value(m, [&](size_t i, size_t j) { mask.data[i] = m.data[j] > 0.0f ? 1.0 : 0.0; });
    masks.emplace_back(unit.name, std::move(mask));
  }
  return masks;
}

}  // namespace mvibr::test
