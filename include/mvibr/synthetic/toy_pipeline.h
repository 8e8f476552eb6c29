// The whole rendering core chained end to end on the CPU, with a fixed toy "network" between
// gathering and compositing (sigma = (mean over visible views of features . a)^2, colour =
// mean over visible views of the gathered colour). Forward gives the loss; backward gives the
// gradient of the loss in the feature maps. Finite differences of this chain check every
// backward together; `mvibr selfcheck` and the tests run it.
#pragma once

#include <cstdint>
#include <vector>

#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::synthetic {

struct ToyPipelineOptions {
  int n_samples = 16;
  int n_importance = 8;
  bool inv_uniform = false;
  bool deterministic = false;
  CompositeOptions composite;
  RandomKey key{1234, 7};
};

template <typename T>
struct ToyPipelineResult {
  T loss = 0;
  std::vector<T> grad_features;  // d loss / d feature maps, [V,Hf,Wf,C]
  std::vector<T> rgb_map;        // fine pass colours, [R,3]
  std::vector<T> fine_depths;    // [R, n_samples + n_importance]
};

// Runs coarse pass, importance sampling, fine pass (both through the toy network), the masked
// MSE of coarse + fine against `target_rgb` [R,3], and the backward into the feature maps.
// Fine depths are a stop-gradient: a finite-difference check passes the depths of the
// unperturbed run as `frozen_fine_depths` so that it differentiates the same function.
template <typename T>
ToyPipelineResult<T> run_toy_pipeline(const RandomScene& scene, const std::vector<T>& features,
                                      const std::vector<T>& target_rgb,
                                      const ToyPipelineOptions& options, bool with_backward,
                                      const std::vector<T>* frozen_fine_depths = nullptr);

}  // namespace mvibr::synthetic
