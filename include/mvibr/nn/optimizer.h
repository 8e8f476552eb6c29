// Adam as IBRNet trains with it: torch.optim.Adam (no weight decay) with one learning rate per
// ParameterGroup, IBRNet's step decay (StepLR stepped once per iteration), and optional
// clip_grad_norm_. It sweeps the ParameterSet's flat buffers, so its moments are flat buffers of
// the same layout, which checkpoints store under each parameter's name.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mvibr/nn/adam_math.h"
#include "mvibr/nn/parameters.h"

namespace mvibr::nn {

struct AdamOptions {
  // IBRNet's defaults (config.py).
  double lrate_feature = 1e-3, lrate_mlp = 5e-4;
  double lrate_decay_factor = 0.5;
  uint64_t lrate_decay_steps = 50000;
  // torch.optim.Adam's defaults; eps is added to sqrt(v_hat).
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // Clip the global L2 norm of all gradients to this before the update; 0 = no clipping (IBRNet).
  double max_grad_norm = 0;
  // DynIBaR's groups: kStaticFeature at lrate_feature x static_rate_multiplier, kStaticMlp at
  // lrate_mlp x static_rate_multiplier, kTrajectoryBasis at lrate_mlp x basis_rate_multiplier.
  double static_rate_multiplier = 1, basis_rate_multiplier = 1;
  // When set, replaces the step decay: the rate of a group that starts at `initial`, for the
  // update after `completed` updates (DynIBaR's schedule, render/dynibar_schedule.h).
  std::function<double(double initial, uint64_t completed)> schedule;
};

// IBRNet calls scheduler.step() once after every optimizer.step(), so the update that follows
// `completed` updates uses initial * factor^floor(completed / decay_steps): the first decayed
// update is update number decay_steps + 1.
double step_decay_learning_rate(double initial, double factor, uint64_t decay_steps,
                                uint64_t completed);

// The L2 norm of a whole gradient buffer, accumulated in double over fixed chunks so that the
// result is the same bits for any number of threads.
double global_grad_norm(const float* grads, size_t count);

// torch.nn.utils.clip_grad_norm_: scales the gradients by max_norm / (norm + 1e-6) when that is
// below 1. Returns the norm before clipping (non-finite when a gradient is; then nothing scales).
double clip_grad_norm(float* grads, size_t count, double max_norm);
// The same given the norm, global_grad_norm(grads, count), that the caller has already taken.
void clip_grad_norm(float* grads, size_t count, double max_norm, double norm);

class Adam {
 public:
  // Moments start at zero, sized and grouped as `params`. Throws InvalidArgument naming a bad
  // option.
  Adam(const ParameterSet& params, const AdamOptions& options);

  // The groups an update trains, as bits 1 << group: a group left out keeps its values, moments
  // and update count, as torch's Adam skips a parameter without a gradient.
  static constexpr uint32_t kAllGroups = (1u << kParameterGroupCount) - 1;

  // One update of params' values from its gradients (clipped in place first when
  // max_grad_norm > 0). Returns the gradient norm before clipping. `params` must have the layout
  // Adam was built for.
  double step(ParameterSet* params);
  // The same given global_grad_norm of params' gradients, which the caller has taken already
  // (the training loop checks it first): a second sweep over them spared.
  double step(ParameterSet* params, double grad_norm, uint32_t groups = kAllGroups);

  // The learning rate of `group` for the next update.
  double learning_rate(ParameterGroup group) const;
  // Its rate before any decay.
  double initial_learning_rate(ParameterGroup group) const;
  uint64_t steps() const { return steps_; }  // updates taken
  // Updates each group took part in (its bias corrections count them).
  const std::array<uint64_t, kParameterGroupCount>& group_steps() const { return group_steps_; }
  const AdamOptions& options() const { return options_; }
  const std::vector<float>& exp_avg() const { return exp_avg_; }
  const std::vector<float>& exp_avg_sq() const { return exp_avg_sq_; }

  // Continues from a checkpoint: the step count, both moments (sizes must match) and each group's
  // count (InvalidArgument above `steps`).
  void restore(uint64_t steps, std::vector<float> exp_avg, std::vector<float> exp_avg_sq,
               const std::array<uint64_t, kParameterGroupCount>& group_steps);
  // The same for every group in every update (IBRNet's, and checkpoints from before the counts).
  void restore(uint64_t steps, std::vector<float> exp_avg, std::vector<float> exp_avg_sq);

  // A run of consecutive values that train with one learning rate.
  struct Span {
    size_t begin, end;
    ParameterGroup group;
  };
  const std::vector<Span>& spans() const { return spans_; }
  // The next update's scalars, counting the update as taken (by `groups`): for a backend that
  // keeps the moments where it runs and applies adam_update_value there (the CUDA step).
  AdamCoefficients begin_update(uint32_t groups = kAllGroups);

 private:
  AdamOptions options_;
  std::vector<Span> spans_;
  std::vector<float> exp_avg_, exp_avg_sq_;
  uint64_t steps_ = 0;
  std::array<uint64_t, kParameterGroupCount> group_steps_{};
};

}  // namespace mvibr::nn
