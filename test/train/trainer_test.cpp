// The training loop end to end on the built-in scene: the loss falls, a run stopped and resumed
// from its checkpoint reaches bit-identical parameters to an uninterrupted one, and the run
// directory holds what it should.
#include "mvibr/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/run_directory.h"
#include "training_fixture.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;
using testing::checkpoint_values;

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-trainer-" + std::to_string(::getpid()));
    testing::prepare_small_scene(root_, 12, "trainer_test");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static TrainConfig small_config(const std::string& name, int n_iters) {
    TrainConfig c = testing::small_config(root_, name, n_iters, 64);
    c.i_print = 1;
    c.i_weights = 4;
    return c;
  }

  static inline fs::path root_;
};

TEST_F(TrainerTest, LossFallsAndTheRunDirectoryHoldsItsFiles) {
  std::ostringstream log;
  const TrainSummary summary = train(small_config("falls", 40), log);
  EXPECT_EQ(summary.last_step, 40u);
  std::ifstream metrics(fs::path(summary.run_dir) / "metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("heldout_psnr") != std::string::npos) continue;  // validation, not a step
    const size_t at = line.find("\"loss\": ");
    ASSERT_NE(at, std::string::npos) << line;
    losses.push_back(std::stod(line.substr(at + 8)));
  }
  ASSERT_EQ(losses.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 8; ++i) {
    first += losses[size_t(i)];
    last += losses[losses.size() - 1 - size_t(i)];
  }
  EXPECT_LT(last, 0.8 * first) << log.str();
  EXPECT_TRUE(fs::exists(fs::path(summary.run_dir) / "config.txt"));
  EXPECT_EQ(summary.last_checkpoint, train::checkpoint_path(summary.run_dir, 40));
  EXPECT_TRUE(fs::exists(summary.last_checkpoint));
}

TEST_F(TrainerTest, ResumingReachesBitIdenticalParameters) {
  std::ostringstream log;
  const TrainSummary straight = train(small_config("straight", 8), log);
  const TrainSummary half = train(small_config("resumed", 4), log);
  EXPECT_EQ(half.last_step, 4u);
  const TrainSummary rest = train(small_config("resumed", 8), log);
  EXPECT_EQ(rest.first_step, 4u);
  EXPECT_NE(log.str().find("resuming from"), std::string::npos);
  const TrainConfig config = small_config("straight", 8);
  EXPECT_EQ(checkpoint_values(config, straight.last_checkpoint),
            checkpoint_values(config, rest.last_checkpoint));
  // And a different seed really trains differently.
  TrainConfig other = small_config("other", 8);
  other.seed = 4;
  const TrainSummary different = train(other, log);
  EXPECT_NE(checkpoint_values(config, straight.last_checkpoint),
            checkpoint_values(config, different.last_checkpoint));
}

// AdamW and LAMB with the warm-up-then-cosine schedule, stopped and resumed (n_iters unchanged,
// as a requeued job has it), reach the uninterrupted run's parameters: the schedule is a function
// of the checkpoint's update count and the moments are the checkpoint's.
TEST_F(TrainerTest, AdamWAndLambOnTheCosineScheduleResumeExactly) {
  std::ostringstream log;
  const TrainConfig adam = small_config("cosine-adam", 6);
  const std::vector<float> adam_values = checkpoint_values(adam, train(adam, log).last_checkpoint);
  for (nn::OptimizerKind kind : {nn::OptimizerKind::kAdamW, nn::OptimizerKind::kLamb}) {
    const std::string name = kind == nn::OptimizerKind::kAdamW ? "adamw" : "lamb";
    SCOPED_TRACE(name);
    const auto configure = [kind](TrainConfig c) {
      c.optimizer = kind;
      c.weight_decay = 0.1;
      c.lr_schedule = nn::LrSchedule::kCosine;
      c.warmup_steps = 2;
      c.min_lr_ratio = 0.1;
      return c;
    };
    const TrainSummary straight = train(configure(small_config(name + "-straight", 6)), log);
    const TrainConfig config = configure(small_config(name + "-stopped", 6));
    write_stop_request(straight.run_dir + "/../" + name + "-stopped", 3, /*create=*/true);
    EXPECT_EQ(train(config, log).last_step, 3u);
    const TrainSummary rest = train(config, log);
    EXPECT_EQ(rest.first_step, 3u);
    const std::vector<float> values = checkpoint_values(config, straight.last_checkpoint);
    EXPECT_EQ(values, checkpoint_values(config, rest.last_checkpoint));
    EXPECT_NE(values, adam_values);  // the keys reached the optimiser
  }
}

// A stop request in the run directory stops the run after its step with a checkpoint and is
// removed; a signal does the same; the stopped run resumes to the uninterrupted one's parameters.
TEST_F(TrainerTest, StopRequestsAndSignalsStopAtAStepBoundaryAndResumeExactly) {
  std::ostringstream log;
  const TrainSummary straight = train(small_config("stop-straight", 9), log);
  const TrainConfig config = small_config("stopped", 9);
  write_stop_request(straight.run_dir + "/../stopped", 3, /*create=*/true);
  const TrainSummary first = train(config, log);
  EXPECT_EQ(first.last_step, 3u);
  EXPECT_EQ(first.stopped_by, "the stop request " + stop_request_path(first.run_dir));
  EXPECT_EQ(first.last_checkpoint, train::checkpoint_path(first.run_dir, 3));
  EXPECT_FALSE(fs::exists(stop_request_path(first.run_dir))) << "the request was not removed";

  write_stop_request(first.run_dir, std::nullopt, false);  // after the step in progress
  const TrainSummary second = train(config, log);
  EXPECT_EQ(second.first_step, 3u);
  EXPECT_EQ(second.last_step, 4u);
  EXPECT_EQ(second.last_checkpoint, train::checkpoint_path(first.run_dir, 4));

  const std::atomic<int> usr1{SIGUSR1};
  RankContext signalled;
  signalled.stop_signal = &usr1;
  const TrainSummary third = train(config, log, signalled);
  EXPECT_EQ(third.last_step, 5u);
  EXPECT_EQ(third.stopped_by, "signal 10 (SIGUSR1)");

  std::ofstream(stop_request_path(first.run_dir)) << "soon, please\n";  // not a step: at once
  std::ostringstream garbled_log;
  const TrainSummary garbled = train(config, garbled_log);
  EXPECT_EQ(garbled.last_step, 6u);
  EXPECT_NE(garbled_log.str().find("holds 'soon, please', not a step number: stopping after this "
                                   "step"),
            std::string::npos)
      << garbled_log.str();

  write_stop_request(first.run_dir, 100, false);  // beyond n_iters: waits for a longer run
  const TrainSummary rest = train(config, log);
  EXPECT_EQ(rest.last_step, 9u);
  EXPECT_TRUE(rest.stopped_by.empty());
  EXPECT_TRUE(fs::exists(stop_request_path(first.run_dir)));
  EXPECT_EQ(checkpoint_values(config, straight.last_checkpoint),
            checkpoint_values(config, rest.last_checkpoint));
}

// A second trainer of the same run directory is refused while the first holds it; checkpoint
// temporaries are removed once nobody does, and nothing else in the folder is touched.
TEST_F(TrainerTest, TheRunDirectoryHasOneTrainerAndLosesStaleTemporaries) {
  std::ostringstream log;
  const TrainConfig config = small_config("locked", 4);
  const TrainSummary done = train(config, log);
  const fs::path checkpoints = fs::path(done.run_dir) / "checkpoints";
  const fs::path stale = checkpoints / "ckpt-00000005.h5.tmp-4194305";
  const fs::path others[] = {checkpoints / "notes.tmp-1", checkpoints / "ckpt-5.h5.tmp-x",
                             fs::path(done.run_dir) / "renders.png.tmp-7"};
  for (const fs::path& p : others) std::ofstream(p) << "not a checkpoint temporary";
  fs::copy_file(done.last_checkpoint, stale);
  fs::resize_file(stale, fs::file_size(stale) / 2);  // as a writer killed mid-write leaves it
  {
    RunDirectoryLock holder(done.run_dir, log);
    EXPECT_FALSE(fs::exists(stale));
    std::ofstream(stale) << "written by the holder";
    try {
      train(small_config("locked", 8), log);
      ADD_FAILURE() << "a second trainer of a held run directory trained";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(done.run_dir +
                                           " is being trained by another mvibr "
                                           "train (pid " +
                                           std::to_string(::getpid())),
                std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(fs::exists(stale)) << "a held run's temporary was removed";
  }
  std::ostringstream resumed;
  const TrainSummary rest = train(small_config("locked", 6), resumed);
  EXPECT_EQ(rest.first_step, 4u);
  EXPECT_EQ(rest.last_step, 6u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_NE(resumed.str().find("removed 1 checkpoint temporary"), std::string::npos)
      << resumed.str();
  for (const fs::path& p : others) EXPECT_TRUE(fs::exists(p)) << p;
}

// init_ckpt gives a new run another checkpoint's weights with a fresh optimiser at step 0, and
// is ignored once the run has checkpoints of its own (a requeued job continues).
TEST_F(TrainerTest, InitCheckpointStartsANewRunAndOnlyANewOne) {
  std::ostringstream log;
  const TrainSummary source = train(small_config("init-source", 4), log);
  // Zero learning rates: the one step leaves the weights as they were loaded.
  TrainConfig tuned = small_config("init-tuned", 1);
  tuned.init_ckpt = source.last_checkpoint;
  tuned.lrate_feature = tuned.lrate_mlp = 0;
  tuned.i_weights = 1;
  std::ostringstream tuned_log;
  const TrainSummary first = train(tuned, tuned_log);
  EXPECT_EQ(first.first_step, 0u);
  EXPECT_EQ(first.last_step, 1u);
  EXPECT_NE(tuned_log.str().find("starting from the weights of " + source.last_checkpoint),
            std::string::npos)
      << tuned_log.str();
  EXPECT_EQ(checkpoint_values(tuned, first.last_checkpoint),
            checkpoint_values(tuned, source.last_checkpoint));
  // Its Adam moments start from zero: one step of them, not the source's four.
  nn::ParameterSet loaded = IbrnetModel(tuned).parameters();
  nn::Adam adam(loaded, nn::AdamOptions{});
  train::TrainingState state;
  train::load_checkpoint(first.last_checkpoint, &loaded, &adam, &state);
  EXPECT_EQ(adam.steps(), 1u);

  // Run again to step 2: the run's own checkpoint wins over init_ckpt.
  tuned.n_iters = 2;
  std::ostringstream again_log;
  const TrainSummary again = train(tuned, again_log);
  EXPECT_EQ(again.first_step, 1u);
  EXPECT_EQ(again_log.str().find("starting from the weights of"), std::string::npos);
  EXPECT_NE(again_log.str().find("resuming from"), std::string::npos);

  TrainConfig missing = small_config("init-missing", 1);
  missing.init_ckpt = (root_ / "nothing.h5").string();
  EXPECT_THROW(train(missing, log), InvalidArgument);
}

// Gradient accumulation: k micro-steps of B rays train as one step of kB rays (the same rays,
// the loss of the whole batch), to float rounding.
TEST_F(TrainerTest, MicroStepsOfBTrainAsOneStepOfTwoB) {
  std::ostringstream log;
  TrainConfig micro = small_config("micro", 5);
  micro.N_rand = 32;
  micro.accumulation_steps = 2;
  TrainConfig whole = small_config("whole", 5);
  whole.N_rand = 64;
  testing::keep_rounding_from_compounding(&micro);
  testing::keep_rounding_from_compounding(&whole);
  const TrainSummary a = train(micro, log);
  const TrainSummary b = train(whole, log);
  const testing::Closeness c =
      testing::closeness(whole, checkpoint_values(micro, a.last_checkpoint),
                         checkpoint_values(whole, b.last_checkpoint));
  EXPECT_LE(c.relative, 1e-5);
  // Not trivially equal: the steps moved the parameters far more than the difference.
  EXPECT_GT(c.moved, 100.0);
}

// Absurd learning rates blow the parameters up after the first update, so step 2's loss is NaN.
TEST_F(TrainerTest, NonFiniteLossesFollowTheNanPolicy) {
  TrainConfig c = small_config("nan-stop", 6);
  c.lrate_feature = c.lrate_mlp = 1e30;
  c.nan_policy = NanPolicy::kStop;
  std::ostringstream log;
  try {
    train(c, log);
    FAIL() << "the loss went non-finite and training went on";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("step 2: the loss is not finite"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("ckpt-00000001.h5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train::latest_checkpoint((fs::path(c.basedir) / c.expname).string()),
            train::checkpoint_path((fs::path(c.basedir) / c.expname).string(), 1));

  c.expname = "nan-skip";
  c.nan_policy = NanPolicy::kSkip;
  try {
    train(c, log);
    FAIL() << "every update was skipped and training went on";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("10 updates in a row skipped"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(log.str().find("warning: step 2: the loss is not finite"), std::string::npos);
}

}  // namespace
}  // namespace mvibr::train
