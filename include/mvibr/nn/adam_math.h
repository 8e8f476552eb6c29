// Adam's arithmetic on one value and the gradient norm's chunking, shared by the CPU optimiser
// (nn/optimizer.h) and its CUDA kernels (nn/cuda_optimizer.h).
// - torch.optim.Adam's (weight decay included) and AdamW's single-tensor paths, operation by
//   operation, in float.
// - No fused multiply-adds on either side (-ffp-contract=off, -fmad=false): the same bits.
#pragma once

#include <cmath>
#include <cstddef>

#include "mvibr/core/hd.h"

namespace mvibr::nn {

// The norm sums squares in double per chunk of this many values, then adds the chunks in order.
constexpr size_t kGradNormChunk = size_t(1) << 14;

// One update's scalars, computed in double on the host as Python computes them, then rounded.
// Per ParameterGroup, from the group's own update count (torch counts per parameter, and skips
// one whose gradient is None: DynIBaR's dynamic parts during its static bootstrap).
struct AdamCoefficients {
  // One per ParameterGroup (kParameterGroupCount; Adam checks the count).
  float step_size[6] = {0, 0, 0, 0, 0, 0};  // learning rate / bias correction 1
  float bias_correction2_sqrt[6] = {1, 1, 1, 1, 1, 1};
  float decay_factor[6] = {1, 1, 1, 1, 1, 1};  // AdamW: 1 - learning rate * weight decay
  float l2_penalty = 0;                        // Adam: weight decay, added to the gradient
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 1, one_minus_beta2 = 1, eps = 0;
};

// `decays`: the value takes its weight decay first: Adam's L2 penalty (torch.optim.Adam's
// grad + weight_decay * param) or AdamW's decoupled shrinking; the other is a no-op (0, 1).
MVIBR_HD void adam_update_value(const AdamCoefficients& c, int group, bool decays, float grad,
                                float* value, float* exp_avg, float* exp_avg_sq) {
  if (decays) {
    grad = grad + c.l2_penalty * *value;
    *value *= c.decay_factor[group];
  }
  *exp_avg = *exp_avg * c.beta1 + c.one_minus_beta1 * grad;
  *exp_avg_sq = *exp_avg_sq * c.beta2 + c.one_minus_beta2 * grad * grad;
  const float denom = sqrtf(*exp_avg_sq) / c.bias_correction2_sqrt[group] + c.eps;
  *value += -c.step_size[group] * (*exp_avg / denom);
}

}  // namespace mvibr::nn
