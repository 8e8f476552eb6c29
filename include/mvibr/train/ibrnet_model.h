// The IBRNet model (a TrainableModel) on the CPU or a CUDA device.
// - The step: the feature network over the source views, then per pass (coarse, fine) samples
//   along the target rays, gathering from the sources, the aggregation network, compositing and
//   the masked MSE; the backward of it all into the parameters.
// - One backend a model (src/train/ibrnet_backend.h): the CPU's and the CUDA one are siblings.
// - Parameters are named as IBRNet's state_dict ("feature_net.conv1.weight", "net_fine.s", ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"
#include "mvibr/train/ray_batch.h"

namespace mvibr::train {

// The loss of a batch of rays before it is divided by the number of rays that count: a pass's
// masked MSE is squared_error / (3 valid + 1e-6). Data-parallel training sums these over ranks
// and micro-steps first, so the loss and its gradient are those of the whole global batch.
struct RaySums {
  double squared_error_coarse = 0, squared_error_fine = 0;
  double valid_coarse = 0, valid_fine = 0;  // rays that count (IBRNet's ray mask) in each pass
  // As the model's LossSums, in this order (summed over ranks and micro-steps by the trainer).
  LossSums values() const {
    return {squared_error_coarse, squared_error_fine, valid_coarse, valid_fine};
  }
};

// The feature network the config asks for (feature_net preset, feature dims, coarse_only).
nn::ResUNetOptions feature_net_options(const TrainConfig& config);

class IbrnetModel final : public TrainableModel {
 public:
  // Builds the networks the config describes (feature_net preset, feature dims, coarse_only,
  // anti_alias_pooling, N_samples + N_importance for the positional table) on the backend its
  // `device` picks, with Adam's default options (configure_optimizer sets others).
  explicit IbrnetModel(const TrainConfig& config);
  ~IbrnetModel() override;
  IbrnetModel(const IbrnetModel&) = delete;
  IbrnetModel& operator=(const IbrnetModel&) = delete;

  const nn::ParameterSet& parameters() const override;
  nn::ParameterSet& parameters() override;
  const nn::Adam& optimizer() const override;
  nn::Adam& optimizer() override;
  void configure_optimizer(const nn::AdamOptions& options) override;
  void initialize(uint64_t seed) override;  // IBRNet's initialisation
  uint64_t updates() const override;
  double learning_rate(nn::ParameterGroup group) const override;
  bool on_device() const override;

  // The loss sums are RaySums' four values; a micro-batch is N_rand rays of the target drawn by
  // select_rays from global ray batch x N_rand. The feature network's range is final last.
  size_t loss_sums_size() const override;
  std::vector<ParameterRange> gradient_ready_order() const override;
  void set_loss_scale(double scale) override;  // the CPU step takes 1 only
  void begin_step(const data::TrainingSample& sample) override;
  LossSums accumulate(RandomKey key, int batch) override;
  StepResult end_step(const LossSums& global,
                      const std::function<void(ParameterRange)>& ready) override;
  float* gradients() override;
  double gradient_norm() override;
  void update(double gradient_norm) override;
  const PhaseTimes& phase_times() const override;
  StepWork step_work() const override;
  void render(const data::TrainingSample& sample, const std::vector<float>& pixels, RandomKey key,
              std::vector<float>* rgb, std::vector<float>* depth,
              const std::function<void(int, int)>& on_chunk = {},
              RenderedParts* parts = nullptr) override;

  // The coarse and fine passes on these rays of the target, forward and backward (after
  // begin_step): `key` and `first_ray` key the stratified and importance samples as the rendering
  // core documents.
  RaySums accumulate_rays(const RayBatch& rays, RandomKey key, uint32_t first_ray);
  // begin_step, accumulate_rays and end_step with this batch's own sums: one whole step, its
  // gradients in parameters().grads().
  StepResult train_step(const data::TrainingSample& sample, const RayBatch& rays, RandomKey key,
                        uint32_t first_ray);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::train
