// Adam as IBRNet trains with it: torch.optim.Adam (no weight decay) with one learning rate per
// ParameterGroup, IBRNet's step decay (StepLR stepped once per iteration), and optional
// clip_grad_norm_. It sweeps the ParameterSet's flat buffers, so its moments are flat buffers of
// the same layout, which checkpoints store under each parameter's name.
// - Two descendants on the same moments (so checkpoints are alike): AdamW (torch.optim.AdamW's
//   decoupled weight decay) and LAMB (apex FusedLAMB's per-tensor trust ratio); OptimizerKind.
// - A warm-up then cosine schedule in place of the step decay (LrSchedule).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mvibr/nn/adam_math.h"
#include "mvibr/nn/parameters.h"

namespace mvibr::nn {

// The update rule. kAdam: torch.optim.Adam without weight decay. kAdamW: torch.optim.AdamW
// (1.13's single-tensor path): p *= 1 - lr * weight_decay with the group's own lr, then Adam's
// update. kLamb: You et al. 2020, "Large Batch Optimization for Deep Learning", Algorithm 2, as
// NVIDIA apex's FusedLAMB computes it with use_nvlamb = True: r = m_hat / (sqrt(v_hat) + eps)
// with bias correction on, u = r + weight_decay * p, and p -= lr * (||p|| / ||u||) * u with the
// norms per parameter tensor, the ratio 1 where either norm is 0 and never clamped (the
// cybertronai/timm variants that clamp it, or that skip it where weight_decay is 0, differ).
enum class OptimizerKind { kAdam, kAdamW, kLamb };

// kStep: IBRNet's step decay. kCosine: warm-up then cosine, cosine_learning_rate.
enum class LrSchedule { kStep, kCosine };

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
  // kFusion (the pose model's cross-view fusion weights) at its own rate: TrainConfig's
  // lrate_fusion says why.
  double lrate_fusion = 1e-5;
  // When set, replaces the step decay: the rate of a group that starts at `initial`, for the
  // update after `completed` updates (DynIBaR's schedule, render/dynibar_schedule.h).
  std::function<double(double initial, uint64_t completed)> schedule;
  OptimizerKind kind = OptimizerKind::kAdam;
  // AdamW's and LAMB's decoupled weight decay (kAdam: must be 0). By default it spares 1-D
  // tensors (biases, norm scales), as BERT's and timm's recipes exclude them from decay, which
  // torch does with a parameter group of weight_decay 0; weight_decay_1d decays them too.
  double weight_decay = 0;
  bool weight_decay_1d = false;
  // kCosine's shape (the step decay's options then go unused): cosine_learning_rate.
  LrSchedule lr_schedule = LrSchedule::kStep;
  uint64_t warmup_steps = 0, total_steps = 0;
  double min_lr_ratio = 0;
};

// IBRNet calls scheduler.step() once after every optimizer.step(), so the update that follows
// `completed` updates uses initial * factor^floor(completed / decay_steps): the first decayed
// update is update number decay_steps + 1.
double step_decay_learning_rate(double initial, double factor, uint64_t decay_steps,
                                uint64_t completed);

// transformers' get_cosine_with_min_lr_schedule_with_warmup (num_cycles 0.5) under LambdaLR
// stepped once per update: the update after `completed` updates uses initial times
//   completed / max(1, warmup)                                    while completed < warmup,
//   else f * (1 - min_lr_ratio) + min_lr_ratio,   f = 0.5 * (1 + cos(pi * 0.5 * 2 * progress)),
//        progress = (completed - warmup) / max(1, total - warmup),
// in double, operation by operation as Python computes it (so the first update of a warm-up
// has rate 0, as there). A pure function of `completed`: a restart continues the same curve.
// Past `total` it stays at min_lr_ratio (transformers' cosine would rise again).
double cosine_learning_rate(double initial, uint64_t warmup, uint64_t total, double min_lr_ratio,
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

  // A run of consecutive values that train with one learning rate and take (`decays`) or skip
  // the weight decay alike.
  struct Span {
    size_t begin, end;
    ParameterGroup group;
    bool decays;
  };
  const std::vector<Span>& spans() const { return spans_; }
  // The next update's scalars, counting the update as taken (by `groups`): for a backend that
  // keeps the moments where it runs and applies adam_update_value there (the CUDA step; Adam
  // and AdamW only: InvalidArgument for LAMB, whose update needs per-tensor norms).
  AdamCoefficients begin_update(uint32_t groups = kAllGroups);

 private:
  using GroupRates = std::array<double, kParameterGroupCount>;
  // Counts the next update as taken by `groups`; returns every group's rate for it.
  GroupRates advance(uint32_t groups);
  // Adam's and AdamW's scalars for the update just counted.
  AdamCoefficients coefficients(const GroupRates& lr, uint32_t groups) const;
  void lamb_update(const GroupRates& lr, uint32_t groups, ParameterSet* params);

  AdamOptions options_;
  std::vector<Span> spans_;
  std::vector<Span> tensors_;  // one per parameter: LAMB's trust ratio is per tensor
  std::vector<float> exp_avg_, exp_avg_sq_;
  uint64_t steps_ = 0;
  std::array<uint64_t, kParameterGroupCount> group_steps_{};
};

}  // namespace mvibr::nn
