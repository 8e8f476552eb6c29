// DynIBaR's schedule (see dynibar_schedule.h), with train.py's arithmetic in the same operations
// and order so that every weight is its double to the bit: w / r**d is a division by pow(r, d),
// w_cycle + d * cycle_factor a multiply then an add.
#include "mvibr/render/dynibar_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr {
namespace {

// The kid-running value of train.py's dynamic_rgb_decay_rate, fixed there.
constexpr double kDynamicColourDecayRate = 10;
// The suppression term's factor and the divisor it starts after.
constexpr double kSuppressionWeight = 0.1;
constexpr int64_t kSuppressionAfterDivisor = 4;

void validate(int64_t step, const DynibarScheduleOptions& o) {
  if (o.num_frames < 1 || o.init_decay_epoch < 1 || step < 0) {
    throw InvalidArgument("DynIBaR schedule: needs num_frames (" + std::to_string(o.num_frames) +
                          ") >= 1, init_decay_epoch (" + std::to_string(o.init_decay_epoch) +
                          ") >= 1 and step (" + std::to_string(step) + ") >= 0");
  }
}

}  // namespace

int64_t dynibar_bootstrap_steps(const DynibarScheduleOptions& o) {
  return int64_t(o.init_decay_epoch / 2) * o.num_frames;
}

int64_t dynibar_decay_steps(const DynibarScheduleOptions& o) {
  return int64_t(o.num_frames) * o.init_decay_epoch;
}

DynibarLossWeights dynibar_loss_weights(int64_t step, const DynibarScheduleOptions& o) {
  validate(step, o);
  DynibarLossWeights w;
  if (step < dynibar_bootstrap_steps(o)) {
    w.phase = DynibarPhase::kStaticBootstrap;
    w.static_bootstrap = 1;
    return w;
  }
  w.phase = DynibarPhase::kMain;
  w.main_epoch = (step - dynibar_bootstrap_steps(o)) / o.num_frames;
  w.divisor = w.main_epoch / o.init_decay_epoch;
  const double d = double(w.divisor);
  w.composite = 1;
  w.cross_time = 1;
  w.dynamic_region = w.main_epoch < o.init_decay_epoch ? 1 : 0;
  w.dynamic_only = 1 / std::pow(kDynamicColourDecayRate, d);
  w.cross_time_dynamic_only = w.dynamic_only;
  w.disparity = o.w_disp / std::pow(o.decay_rate, d);
  w.flow = o.w_flow / std::pow(o.decay_rate, d);
  w.cycle = o.anneal_cycle ? std::min(0.5, o.w_cycle + d * o.cycle_factor) : o.w_cycle;
  w.scene_flow = o.w_reg;
  w.skew_entropy = o.w_skew_entropy;
  w.distortion = o.w_distortion;
  w.static_region = 1;
  w.dynamic_weight_suppression = w.divisor > kSuppressionAfterDivisor ? kSuppressionWeight : 0;
  return w;
}

double dynibar_learning_rate(double initial, int64_t step, const DynibarScheduleOptions& o) {
  validate(step, o);
  if (step < dynibar_bootstrap_steps(o)) return initial;
  const int64_t due = (step - dynibar_bootstrap_steps(o)) / dynibar_decay_steps(o);
  double first = o.lrate_mlp * kDynibarStaticRateMultiplier, rate = initial;
  for (int64_t i = 0; i < due && first > kDynibarLearningRateFloor; ++i) {
    first *= o.lrate_decay_factor;
    rate *= o.lrate_decay_factor;
  }
  return rate;
}

}  // namespace mvibr
