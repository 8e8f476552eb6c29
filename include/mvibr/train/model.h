// What the trainer trains: a model's training step on one backend (CPU or CUDA), which owns the
// parameters, their gradients and Adam's state where it runs.
// - The trainer knows no model: IBRNet, DynIBaR and the pose model implement this interface.
// - On a device the state stays there: parameters() and optimizer() are host copies fetched on
//   access (checkpoints, the cross-rank check), and the non-const overloads mark the host copy as
//   the one the next step starts from (initialisation, a checkpoint, rank 0's broadcast).
// - Per step only the batch and the loss cross the bus; the gradient all-reduce runs where the
//   gradients are (gradients(), device memory when on_device()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/train/config.h"

namespace mvibr::train {

// What a model reports PhaseTimes' slots as, in the members' order (named()): a name, or null for
// a slot it has no phase in. The ray models' are the members' names (IBRNet's without motion);
// the pose model's are its own.
constexpr size_t kPhaseSlots = 11;
using PhaseLabels = std::array<const char*, kPhaseSlots>;
extern const PhaseLabels kDynibarPhases, kIbrnetPhases, kPosePhases;

// Where one training step spends its time, in seconds of steady_clock, each phase summed over the
// model's passes. Together they cover the step but for bookkeeping; the optimizer is not part.
// The members are slots that a model's labels name.
struct PhaseTimes {
  double features_forward = 0;     // source images to floats, feature network forward
  double sampling = 0;             // target rays, stratified and importance depths
  double motion_forward = 0;       // DynIBaR: the motion MLP, the samples moved in time
  double gather_forward = 0;       // projection into the sources, bilinear gather
  double aggregator_forward = 0;   // aggregation network forward
  double composite_loss = 0;       // compositing, ray mask, loss
  double composite_backward = 0;   // loss and compositing backward
  double aggregator_backward = 0;  // aggregation network backward
  double gather_backward = 0;      // gather backward into the feature maps
  double motion_backward = 0;      // DynIBaR: into the motion MLP, the basis and the positions
  double features_backward = 0;    // feature network backward
  const PhaseLabels* labels = &kDynibarPhases;

  double total() const;
  // (name, seconds) in the order the step runs them, for each slot the labels name.
  std::vector<std::pair<const char*, double>> named() const;
};

// One monitored value: its TensorBoard tag and its metrics.jsonl key.
struct Scalar {
  const char* tag;
  const char* key;
  double value;
};

struct StepResult {
  double loss = 0;            // what the gradients are of
  double psnr = 0;            // of the model's final colour
  int valid_rays = 0;         // rays that count in the loss
  std::vector<Scalar> terms;  // the loss's parts, for the log
  PhaseTimes times;
  double term(const char* key) const;  // the value of terms' `key`; InvalidArgument if none
};

// A run of the flat parameter (and gradient) buffer.
struct ParameterRange {
  size_t offset = 0, count = 0;
};

// A rank's partial sums of the loss (before any division), all-reduced over ranks.
using LossSums = std::vector<double>;

// A dynamic model's composite taken apart, [R,3] each: DynIBaR's static and dynamic components
// (each network's colours under its own share of the composite's weights; they sum to the
// composite's colour).
struct RenderedParts {
  std::vector<float> static_rgb, dynamic_rgb;
};

// What a rank's step works through, for the rates in the log: the ray models' rays (N_rand x
// accumulation_steps), the pose model's instants.
struct StepWork {
  const char* unit;  // plural: "rays", "instants"
  uint64_t per_rank_step;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  virtual const nn::ParameterSet& parameters() const = 0;
  virtual nn::ParameterSet& parameters() = 0;
  virtual const nn::Adam& optimizer() const = 0;
  virtual nn::Adam& optimizer() = 0;
  // A fresh optimiser (zero moments, no updates) with these options.
  virtual void configure_optimizer(const nn::AdamOptions& options) = 0;
  virtual void initialize(uint64_t seed) = 0;  // the model's initialisation, from `seed`
  // optimizer().steps() and its learning rates, without fetching the moments.
  virtual uint64_t updates() const = 0;
  virtual double learning_rate(nn::ParameterGroup group) const = 0;
  virtual bool on_device() const = 0;

  // One update in parts, for data parallelism and gradient accumulation:
  // - begin_step zeroes the gradients and runs what depends on the sample alone;
  // - accumulate runs micro-batch `batch` of the global batch (numbered over ranks and
  //   micro-steps), forward and backward, and returns its loss sums (loss_sums_size of them);
  // - end_step takes the sums over every rank and micro-batch, finishes the gradients and hands
  //   `ready` each range of gradients() the moment it is final, in gradient_ready_order();
  // - then gradient_norm (non-finite when a gradient is) and update (clipping, Adam).
  virtual size_t loss_sums_size() const = 0;
  virtual std::vector<ParameterRange> gradient_ready_order() const = 0;
  virtual void set_loss_scale(double scale) = 0;  // fp16's; 1 elsewhere
  virtual void begin_step(const data::TrainingSample& sample) = 0;
  // The samples a rank's step reads: one for the ray models (a target view, whose rays make the
  // micro-batches); the pose model's micro-batches are whole samples.
  virtual size_t samples_per_step() const { return 1; }
  // begin_step with the step's samples_per_step() samples.
  virtual void begin_step(const std::vector<data::TrainingSample>& samples) {
    begin_step(samples.at(0));
  }
  virtual LossSums accumulate(RandomKey key, int batch) = 0;
  virtual StepResult end_step(const LossSums& global,
                              const std::function<void(ParameterRange)>& ready) = 0;
  virtual float* gradients() = 0;
  virtual double gradient_norm() = 0;
  virtual void update(double gradient_norm) = 0;
  virtual const PhaseTimes& phase_times() const = 0;  // of the step since begin_step
  virtual StepWork step_work() const = 0;
  // The figure the progress line shows beside the loss: the ray models' PSNR of the final colour.
  virtual Scalar quality(const StepResult& result) const {
    return {"train/psnr", "psnr", result.psnr};
  }

  // Renders pixels [R,2] of the sample's target without gradients: rgb [R,3], depth [R].
  // `on_chunk(rays done, rays)` after each chunk. With `parts`, also the model's parts apart,
  // where it has them (left empty where it has none).
  virtual void render(const data::TrainingSample& sample, const std::vector<float>& pixels,
                      RandomKey key, std::vector<float>* rgb, std::vector<float>* depth,
                      const std::function<void(int, int)>& on_chunk = {},
                      RenderedParts* parts = nullptr) = 0;
};

// Whether a model built from `config` runs its step on a CUDA device (the config's device =
// auto | cpu | cuda, and what this build and process have), its training state there and its
// gradients all-reduced there by NCCL; InvalidArgument for device = cuda without one.
bool runs_on_device(const TrainConfig& config);

// The model the config names, on the backend its `device` picks.
std::unique_ptr<TrainableModel> make_model(const TrainConfig& config);

}  // namespace mvibr::train
