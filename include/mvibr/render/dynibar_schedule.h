// DynIBaR's training schedule as published (google/dynibar train.py, and ibrnet/model.py's
// DynibarMono for the optimiser): which phase a step is in, each loss term's weight in its epoch,
// and every parameter group's learning rate. Pure functions of the step, so that a resumed run
// and N ranks see the schedule a fresh run on one rank sees.
// - An epoch is num_frames steps. A run starts with init_decay_epoch // 2 epochs of static
//   bootstrap (only the static-only render's colour on static pixels trains, the learning rates
//   do not decay), then the main loop, whose epoch counter starts again at 0: train.py's second
//   loop runs from start_epoch, which is 0 in a fresh run. (A published resume sets start_epoch
//   to global_step // num_frames, bootstrap epochs included, so its divisor jumps ahead; mvibr
//   follows the fresh run.)
// - Main epoch m, divisor = m // init_decay_epoch: w_disp and w_flow / decay_rate^divisor; the
//   dynamic-only colour terms / 10^divisor (a constant in train.py, not decay_rate); the
//   dynamic-region colour term only while m < init_decay_epoch; w_cycle = min(0.5, w_cycle +
//   divisor cycle_factor) when annealing; the dynamic-weight suppression (0.1) once divisor > 4.
// - Learning rates: StepLR(gamma = lrate_decay_factor, step_size = num_frames init_decay_epoch)
//   stepped after each main-loop update while the first group's rate is above 5e-7: the update
//   after k main updates has min(k // step_size, c) decays, c the first decay count that takes
//   the first group (the static network) to 5e-7 or below; each decay multiplies the group's
//   rate once, as StepLR's chained form does.
#pragma once

#include <cstdint>

namespace mvibr {

// The terms' hyperparameters (defaults: configs/train_kid-running.txt) and the run's length.
struct DynibarScheduleOptions {
  int num_frames = 1;
  int init_decay_epoch = 400;
  double decay_rate = 10;
  double w_disp = 0.1, w_flow = 0.01;
  double w_cycle = 0.1, cycle_factor = 0.1;
  bool anneal_cycle = true;
  double w_reg = 0.05, w_skew_entropy = 5e-4, w_distortion = 1e-3;
  double lrate_feature = 8e-4, lrate_mlp = 4e-4, lrate_decay_factor = 0.5;
};

enum class DynibarPhase { kStaticBootstrap, kMain };

// Updates in the static bootstrap (init_decay_epoch // 2 epochs), and between the main loop's
// decays (num_frames x init_decay_epoch: the cross-time anchor's reach grows a frame with each).
int64_t dynibar_bootstrap_steps(const DynibarScheduleOptions& options);
int64_t dynibar_decay_steps(const DynibarScheduleOptions& options);

// Every term's weight in one epoch (0: the term is off). Names as in dynibar_losses.h.
struct DynibarLossWeights {
  DynibarPhase phase = DynibarPhase::kMain;
  int64_t main_epoch = 0;  // the main loop's epoch; 0 during the bootstrap
  int64_t divisor = 0;
  double static_bootstrap = 0;
  double composite = 0, cross_time = 0, dynamic_region = 0, dynamic_only = 0,
         cross_time_dynamic_only = 0;
  double disparity = 0, flow = 0, cycle = 0, scene_flow = 0, skew_entropy = 0, distortion = 0;
  double static_region = 0, dynamic_weight_suppression = 0;
};

// The weights of the epoch that holds `step` (updates completed before it, bootstrap included).
// Throws InvalidArgument unless num_frames >= 1, init_decay_epoch >= 1 and step >= 0.
DynibarLossWeights dynibar_loss_weights(int64_t step, const DynibarScheduleOptions& options);

// DynibarMono's parameter groups, as multiples of lrate_mlp or lrate_feature. The static
// network and its feature net train at half rate (hard-coded there: lr_multipler is the
// forward-facing model's), the trajectory basis at a quarter of lrate_mlp.
constexpr double kDynibarStaticRateMultiplier = 0.5;
constexpr double kDynibarBasisRateMultiplier = 0.25;
// train.py steps the scheduler only while the first group's rate is above this.
constexpr double kDynibarLearningRateFloor = 5e-7;

// The rate of a group whose initial rate is `initial` (e.g. lrate_mlp *
// kDynibarStaticRateMultiplier) for the update after `step` updates (bootstrap included).
// Throws as dynibar_loss_weights.
double dynibar_learning_rate(double initial, int64_t step, const DynibarScheduleOptions& options);

}  // namespace mvibr
