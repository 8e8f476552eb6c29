// DynIBaR's schedule against values worked out by hand from google/dynibar's train.py and
// ibrnet/model.py, at configs/train_kid-running.txt's settings with 60 frames: 200 bootstrap
// epochs (12000 steps), then the main loop's epochs from 0, the learning rates decaying every
// 60 * 400 = 24000 main-loop updates until the static network's rate reaches 5e-7. (The
// reference test checks the same functions bit for bit against the published arithmetic and
// torch's own StepLR.)
#include "mvibr/render/dynibar_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "mvibr/core/error.h"

namespace mvibr {
namespace {

DynibarScheduleOptions kid_running() {
  DynibarScheduleOptions o;
  o.num_frames = 60;
  return o;
}

constexpr int64_t kBootstrapSteps = 200 * 60;

int64_t main_epoch_start(int64_t epoch) {
  return kBootstrapSteps + epoch * 60;
}

TEST(DynibarSchedule, BootstrapTrainsOnlyTheStaticRenderForHalfTheDecayEpochs) {
  for (int64_t step : {int64_t(0), int64_t(59), kBootstrapSteps - 1}) {
    const DynibarLossWeights w = dynibar_loss_weights(step, kid_running());
    EXPECT_EQ(w.phase, DynibarPhase::kStaticBootstrap) << step;
    EXPECT_EQ(w.static_bootstrap, 1.0);
    EXPECT_EQ(w.composite + w.cross_time + w.dynamic_region + w.dynamic_only +
                  w.cross_time_dynamic_only + w.disparity + w.flow + w.cycle + w.scene_flow +
                  w.skew_entropy + w.distortion + w.static_region + w.dynamic_weight_suppression,
              0.0);
  }
  // An odd init_decay_epoch: range(0, 5 // 2) is two epochs.
  DynibarScheduleOptions odd = kid_running();
  odd.init_decay_epoch = 5;
  EXPECT_EQ(dynibar_loss_weights(2 * 60 - 1, odd).phase, DynibarPhase::kStaticBootstrap);
  EXPECT_EQ(dynibar_loss_weights(2 * 60, odd).phase, DynibarPhase::kMain);
  // init_decay_epoch 1: no bootstrap.
  odd.init_decay_epoch = 1;
  EXPECT_EQ(dynibar_loss_weights(0, odd).phase, DynibarPhase::kMain);
}

TEST(DynibarSchedule, MainLoopWeightsByEpochAsTrainPyComputesThem) {
  const DynibarScheduleOptions o = kid_running();
  // The first main epoch: the main loop's epoch counter starts again at 0.
  DynibarLossWeights w = dynibar_loss_weights(kBootstrapSteps, o);
  EXPECT_EQ(w.phase, DynibarPhase::kMain);
  EXPECT_EQ(w.main_epoch, 0);
  EXPECT_EQ(w.divisor, 0);
  EXPECT_EQ(w.static_bootstrap, 0.0);
  EXPECT_EQ(w.composite, 1.0);
  EXPECT_EQ(w.cross_time, 1.0);
  EXPECT_EQ(w.dynamic_region, 1.0);
  EXPECT_EQ(w.dynamic_only, 1.0);
  EXPECT_EQ(w.cross_time_dynamic_only, 1.0);
  EXPECT_EQ(w.disparity, 0.1);
  EXPECT_EQ(w.flow, 0.01);
  EXPECT_EQ(w.cycle, 0.1);
  EXPECT_EQ(w.scene_flow, 0.05);
  EXPECT_EQ(w.skew_entropy, 5e-4);
  EXPECT_EQ(w.distortion, 1e-3);
  EXPECT_EQ(w.static_region, 1.0);
  EXPECT_EQ(w.dynamic_weight_suppression, 0.0);
  // The last step of main epoch 399 still trains the dynamic region.
  w = dynibar_loss_weights(main_epoch_start(400) - 1, o);
  EXPECT_EQ(w.main_epoch, 399);
  EXPECT_EQ(w.dynamic_region, 1.0);
  // Epoch 400: divisor 1.
  w = dynibar_loss_weights(main_epoch_start(400), o);
  EXPECT_EQ(w.divisor, 1);
  EXPECT_EQ(w.dynamic_region, 0.0);
  EXPECT_DOUBLE_EQ(w.dynamic_only, 0.1);
  EXPECT_DOUBLE_EQ(w.cross_time_dynamic_only, 0.1);
  EXPECT_DOUBLE_EQ(w.disparity, 0.01);
  EXPECT_DOUBLE_EQ(w.flow, 0.001);
  EXPECT_DOUBLE_EQ(w.cycle, 0.2);
  EXPECT_EQ(w.composite, 1.0);
  EXPECT_EQ(w.scene_flow, 0.05);  // w_reg, w_skew_entropy, w_distortion never decay
  EXPECT_EQ(w.skew_entropy, 5e-4);
  EXPECT_EQ(w.distortion, 1e-3);
  // Divisor 4: the cycle weight reaches its cap, no suppression yet.
  w = dynibar_loss_weights(main_epoch_start(4 * 400 + 17), o);
  EXPECT_EQ(w.divisor, 4);
  EXPECT_DOUBLE_EQ(w.cycle, 0.5);
  EXPECT_DOUBLE_EQ(w.disparity, 1e-5);
  EXPECT_DOUBLE_EQ(w.dynamic_only, 1e-4);
  EXPECT_EQ(w.dynamic_weight_suppression, 0.0);
  // Divisor 5: the dynamic-weight suppression begins; the cycle weight stays at 0.5.
  w = dynibar_loss_weights(main_epoch_start(5 * 400), o);
  EXPECT_EQ(w.divisor, 5);
  EXPECT_EQ(w.cycle, 0.5);
  EXPECT_EQ(w.dynamic_weight_suppression, 0.1);
  EXPECT_DOUBLE_EQ(w.disparity, 1e-6);
  EXPECT_DOUBLE_EQ(w.flow, 1e-7);
  EXPECT_DOUBLE_EQ(w.dynamic_only, 1e-5);
  EXPECT_EQ(w.static_region, 1.0);
}

TEST(DynibarSchedule, DecayRateAndCycleAnnealingAreOptions) {
  DynibarScheduleOptions o = kid_running();
  o.decay_rate = 2;  // decays w_disp and w_flow, not the dynamic-only colour terms (10)
  o.anneal_cycle = false;
  const DynibarLossWeights w = dynibar_loss_weights(main_epoch_start(3 * 400), o);
  EXPECT_EQ(w.divisor, 3);
  EXPECT_DOUBLE_EQ(w.disparity, 0.1 / 8);
  EXPECT_DOUBLE_EQ(w.flow, 0.01 / 8);
  EXPECT_DOUBLE_EQ(w.dynamic_only, 1e-3);
  EXPECT_EQ(w.cycle, 0.1);
}

TEST(DynibarSchedule, LearningRatesDecayEveryDecayEpochsUntilTheStaticRateReachesTheFloor) {
  const DynibarScheduleOptions o = kid_running();
  const double static_net = 4e-4 * kDynibarStaticRateMultiplier;  // the first group
  const double basis = 4e-4 * kDynibarBasisRateMultiplier;
  const int64_t decay = 60 * 400;
  // The bootstrap does not step the scheduler, nor does the first main epoch.
  EXPECT_EQ(dynibar_learning_rate(static_net, 0, o), 2e-4);
  EXPECT_EQ(dynibar_learning_rate(static_net, kBootstrapSteps + decay - 1, o), 2e-4);
  EXPECT_EQ(dynibar_learning_rate(static_net, kBootstrapSteps + decay, o), 1e-4);
  EXPECT_EQ(dynibar_learning_rate(8e-4, kBootstrapSteps + 3 * decay + 5, o), 1e-4);
  // 2e-4 / 2^8 = 7.8e-7 is above 5e-7, 2e-4 / 2^9 = 3.9e-7 is not: nine decays, then none.
  EXPECT_EQ(dynibar_learning_rate(static_net, kBootstrapSteps + 9 * decay - 1, o), 2e-4 / 256);
  EXPECT_EQ(dynibar_learning_rate(static_net, kBootstrapSteps + 9 * decay, o), 2e-4 / 512);
  EXPECT_EQ(dynibar_learning_rate(static_net, kBootstrapSteps + 30 * decay, o), 2e-4 / 512);
  EXPECT_EQ(dynibar_learning_rate(basis, kBootstrapSteps + 30 * decay, o), 1e-4 / 512);
  EXPECT_EQ(dynibar_learning_rate(8e-4, kBootstrapSteps + 30 * decay, o), 8e-4 / 512);
}

TEST(DynibarSchedule, RejectsWhatItCannotSchedule) {
  DynibarScheduleOptions o = kid_running();
  EXPECT_THROW(dynibar_loss_weights(-1, o), InvalidArgument);
  EXPECT_THROW(dynibar_learning_rate(1e-3, -1, o), InvalidArgument);
  o.num_frames = 0;
  EXPECT_THROW(dynibar_loss_weights(0, o), InvalidArgument);
  o = kid_running();
  o.init_decay_epoch = 0;
  EXPECT_THROW(dynibar_learning_rate(1e-3, 0, o), InvalidArgument);
}

}  // namespace
}  // namespace mvibr
