// The IBRNet model and its training step on the CPU: the feature network over the source
// views, then for the coarse and the fine pass: samples along the target rays, projection and
// gathering into the source views, the aggregation network, compositing and the masked MSE; and
// the backward of all of it into the parameters. Parameters are named as IBRNet's state_dict
// ("feature_net.conv1.weight", "net_coarse.base_fc.0.weight", "net_fine.s", ...).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/config.h"
#include "mvibr/train/ray_batch.h"

namespace mvibr::train {

struct StepResult {
  double loss = 0;  // coarse + fine masked MSE (IBRNet's training loss)
  double mse_coarse = 0, mse_fine = 0;
  double psnr = 0;     // of the fine pass (the coarse one when coarse_only)
  int valid_rays = 0;  // rays that count in the loss (IBRNet's ray mask)
};

class IbrnetModel {
 public:
  // Builds the networks the config describes (feature_net preset, feature dims, coarse_only,
  // anti_alias_pooling, N_samples + N_importance for the positional table).
  explicit IbrnetModel(const TrainConfig& config);
  ~IbrnetModel();
  IbrnetModel(const IbrnetModel&) = delete;
  IbrnetModel& operator=(const IbrnetModel&) = delete;

  nn::ParameterSet& parameters();
  const nn::ParameterSet& parameters() const;
  // IBRNet's initialisation, from `seed`.
  void initialize(uint64_t seed);

  // Forward and backward of one training step on `rays` of the sample's target view; the
  // gradients accumulate (+=) into parameters().grads(). `key` and `first_ray` key the
  // stratified and importance samples as the rendering core documents.
  StepResult train_step(const data::TrainingSample& sample, const RayBatch& rays, RandomKey key,
                        uint32_t first_ray);

  // Renders rays without gradients, chunk_size rays at a time: rgb [R,3] and depth [R] of the
  // fine pass (coarse when coarse_only).
  void render(const data::TrainingSample& sample, const std::vector<float>& pixels, RandomKey key,
              std::vector<float>* rgb, std::vector<float>* depth);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::train
