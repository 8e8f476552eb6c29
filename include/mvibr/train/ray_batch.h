// The rays of one training step: N_rand pixels of the target view and their colours. Pixel g of
// a step (g = first_ray + r, the ray's index in the global batch) is drawn from Philox keyed by
// (seed, step, g), with replacement, so 1 rank drawing 2B rays and 2 ranks drawing B each train
// on the same pixels. IBRNet draws without replacement; at N_rand << H*W the difference is a
// few repeated pixels per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/core/enum_names.h"
#include "mvibr/core/philox.h"
#include "mvibr/data/scene.h"

namespace mvibr::train {

struct RayBatch {
  std::vector<float> pixels;      // [R,2] integer pixel coordinates (u, v), as floats
  std::vector<float> target_rgb;  // [R,3] in [0,1]
};

// kUniform: any pixel; kCenter: IBRNet's center sampling, pixels at least (1 - center_ratio) / 2
// of the size away from every border.
enum class SampleMode { kUniform, kCenter };

RayBatch select_rays(const data::View& target, int n_rays, SampleMode sample_mode,
                     double center_ratio, RandomKey key, uint32_t first_ray);

}  // namespace mvibr::train

namespace mvibr {
template <>
struct EnumNames<train::SampleMode> {
  static constexpr std::pair<train::SampleMode, const char*> values[] = {
      {train::SampleMode::kUniform, "uniform"}, {train::SampleMode::kCenter, "center"}};
};
}  // namespace mvibr
