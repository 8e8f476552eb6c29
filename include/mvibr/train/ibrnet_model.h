// The IBRNet model and its training step, on the CPU or a CUDA device: the feature network over the
// source views, then for the coarse and the fine pass: samples along the target rays, projection
// and gathering into the source views, the aggregation network, compositing and the masked MSE; and
// the backward of all of it into the parameters. Parameters are named as IBRNet's state_dict
// ("feature_net.conv1.weight", "net_coarse.base_fc.0.weight", "net_fine.s", ...).
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
#include "mvibr/train/ray_batch.h"

namespace mvibr::train {

// Where one training step spends its time, in seconds of steady_clock, each phase summed over the
// coarse and the fine pass. Together they cover train_step but for bookkeeping (a few
// microseconds); the optimizer's step is not part of it.
struct PhaseTimes {
  double features_forward = 0;     // source images to floats, feature network forward
  double sampling = 0;             // target rays, stratified and importance depths
  double gather_forward = 0;       // projection into the sources, bilinear gather
  double aggregator_forward = 0;   // aggregation network forward
  double composite_loss = 0;       // compositing, ray mask, masked MSE
  double composite_backward = 0;   // masked MSE and compositing backward
  double aggregator_backward = 0;  // aggregation network backward
  double gather_backward = 0;      // gather backward into the feature maps
  double features_backward = 0;    // feature network backward

  double total() const;
  // (name, seconds) in the order the step runs them, named as the members: for reports
  // (benchmarks, metrics) that list every phase without naming each one again.
  std::vector<std::pair<const char*, double>> named() const;
};

struct StepResult {
  double loss = 0;  // coarse + fine masked MSE (IBRNet's training loss)
  double mse_coarse = 0, mse_fine = 0;
  double psnr = 0;     // of the fine pass (the coarse one when coarse_only)
  int valid_rays = 0;  // rays that count in the loss (IBRNet's ray mask)
  PhaseTimes times;
};

// The loss of a batch of rays before it is divided by the number of rays that count: a pass's
// masked MSE is squared_error / (3 valid + 1e-6). Data-parallel training sums these over ranks
// and micro-steps first, so the loss and its gradient are those of the whole global batch.
struct RaySums {
  double squared_error_coarse = 0, squared_error_fine = 0;
  double valid_coarse = 0, valid_fine = 0;  // rays that count (IBRNet's ray mask) in each pass
  RaySums& operator+=(const RaySums& o);
};

// A run of the flat parameter (and gradient) buffer.
struct ParameterRange {
  size_t offset = 0, count = 0;
};

// Whether a model built from `config` runs its step on a CUDA device (the config's device =
// auto | cpu | cuda, and what this build and process have); InvalidArgument for device = cuda
// without one.
bool runs_on_device(const TrainConfig& config);

// The feature network the config asks for (feature_net preset, feature dims, coarse_only).
nn::ResUNetOptions feature_net_options(const TrainConfig& config);

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
  // stratified and importance samples as the rendering core documents. The same as begin_step,
  // accumulate and end_step with this batch's own denominators.
  StepResult train_step(const data::TrainingSample& sample, const RayBatch& rays, RandomKey key,
                        uint32_t first_ray);

  // A training step in three parts, for data parallelism and gradient accumulation. begin_step
  // runs the feature network on the sample's sources. accumulate runs the coarse and fine passes
  // on a batch of the target's rays, forward and backward, and may be called any number of times:
  // it accumulates the gradients of the squared errors (not yet divided) into the aggregation
  // networks' gradients and the feature maps' gradients. end_step divides by the denominators of
  // the whole batch (3 x valid rays + 1e-6 of each pass, summed over ranks and micro-steps) and
  // runs the feature network's backward. It calls `ready` with each range of parameter gradients
  // the moment it is final, in the order of gradient_ready_order(), so an all-reduce of that
  // range can start while the rest of the backward pass runs. parameters().grads() must be zero
  // at begin_step: the CPU step divides what they hold.
  void begin_step(const data::TrainingSample& sample);
  RaySums accumulate(const RayBatch& rays, RandomKey key, uint32_t first_ray);
  void end_step(double coarse_denominator, double fine_denominator,
                const std::function<void(ParameterRange)>& ready);
  // On a device only: end_step, but each range is handed to `ready` final in
  // device_gradients() (for an NCCL all-reduce there); gradients_to_host then adds the device
  // gradients into parameters().grads().
  void end_step_on_device(double coarse_denominator, double fine_denominator,
                          const std::function<void(ParameterRange)>& ready);
  float* device_gradients();  // null on the CPU
  void gradients_to_host();
  std::vector<ParameterRange> gradient_ready_order() const;
  // Of the step since the last begin_step.
  const PhaseTimes& phase_times() const;
  // Whether the step runs on a CUDA device (the config's `device`; parameters, their gradients
  // and the optimiser stay on the host either way).
  bool on_device() const;
  // The GPU step's fp16 loss scale for the next accumulate calls (train/loss_scale.h); end_step
  // divides it out again. The CPU step takes 1 only.
  void set_loss_scale(double scale);

  // Renders rays without gradients, chunk_size rays at a time: rgb [R,3] and depth [R] of the
  // fine pass (coarse when coarse_only). `on_chunk(rays done, rays)` after each chunk.
  void render(const data::TrainingSample& sample, const std::vector<float>& pixels, RandomKey key,
              std::vector<float>* rgb, std::vector<float>* depth,
              const std::function<void(int, int)>& on_chunk = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::train
