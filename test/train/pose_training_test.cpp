// The pose model through the training loop: it learns (held-out MPJPE below the mean pose's after
// a short run; with bf16 convolutions too), a run stopped and resumed on AdamW's
// warm-up-then-cosine schedule reaches the uninterrupted run's parameters bit for bit (with
// cross-view fusion, and with bf16 convolutions, too), the fusion weights train at their own rate
// (lrate_fusion), micro-batches of B instants train as one batch of 2B (the trainer treats ranks
// and micro-steps alike; train_parallel_test runs 2 ranks), and a model with cross-view fusion
// scores itself with and without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "mvibr/core/relative_error.h"
#include "mvibr/data/shards.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/pose_evaluate.h"
#include "mvibr/train/pose_model.h"
#include "mvibr/train/run_directory.h"
#include "mvibr/train/trainer.h"
#include "support/bf16_operands.h"
#include "training_fixture.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

class PoseTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-pose-training-" + std::to_string(::getpid()));
    testing::prepare_small_pose_data(root_, 1, "pose_training_test");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static TrainConfig adamw_cosine(TrainConfig c) {
    c.optimizer = nn::OptimizerKind::kAdamW;
    c.weight_decay = 0.01;
    c.lr_schedule = nn::LrSchedule::kCosine;
    c.warmup_steps = 2;
    c.min_lr_ratio = 0.1;
    return c;
  }

  // Trains `straight` through and `stopped` (the same settings under another name) stopped at
  // step 3 and resumed; both must end on the same parameters, which are returned.
  static std::vector<float> resumed_exactly(const TrainConfig& straight, const TrainConfig& stopped,
                                            std::ostringstream& log) {
    const TrainSummary through = train(straight, log);
    EXPECT_EQ(through.last_step, 6u);
    write_stop_request((fs::path(stopped.basedir) / stopped.expname).string(), 3, /*create=*/true);
    EXPECT_EQ(train(stopped, log).last_step, 3u);
    const TrainSummary rest = train(stopped, log);
    EXPECT_EQ(rest.first_step, 3u);
    const std::vector<float> values = testing::checkpoint_values(stopped, through.last_checkpoint);
    EXPECT_EQ(values, testing::checkpoint_values(stopped, rest.last_checkpoint));
    return values;
  }

  static inline fs::path root_;
};

TEST_F(PoseTraining, StoppedAndResumedRunsReachTheSameParameters) {
  std::ostringstream log;
  const std::vector<float> values =
      resumed_exactly(adamw_cosine(testing::small_pose_config(root_, "straight", 6, 2)),
                      adamw_cosine(testing::small_pose_config(root_, "stopped", 6, 2)), log);
  EXPECT_NE(log.str().find("global batch 2 instants (pose_batch 2 x 1 micro-steps x 1 ranks)"),
            std::string::npos)
      << log.str();
  const TrainConfig other_config = testing::small_pose_config(root_, "plain_adam", 6, 2);
  EXPECT_NE(values,
            testing::checkpoint_values(other_config, train(other_config, log).last_checkpoint));
}

// With cross-view fusion too (the fusion weights in their own group, at lrate_fusion).
TEST_F(PoseTraining, StoppedAndResumedFusionRunsReachTheSameParameters) {
  std::ostringstream log;
  const auto fusion_config = [&](const std::string& name) {
    TrainConfig c = testing::small_pose_config(root_, name, 6, 2);
    c.cross_view_fusion = true;
    c.lrate_fusion = 1e-4;
    return c;
  };
  resumed_exactly(fusion_config("fusion_straight"), fusion_config("fusion_stopped"), log);
}

// With bf16 convolutions too: their kernels are deterministic, so a resumed run is still exact, and
// its parameters are not the fp32 run's.
TEST_F(PoseTraining, StoppedAndResumedBf16RunsReachTheSameParameters) {
  if (mvibr::testing::bf16_convolutions_refused_here()) return;
  std::ostringstream log;
  const auto bf16_config = [&](const std::string& name) {
    TrainConfig c = testing::small_pose_config(root_, name, 6, 2);
    c.precision = Precision::kBf16;
    return c;
  };
  const std::vector<float> values =
      resumed_exactly(bf16_config("bf16_straight"), bf16_config("bf16_stopped"), log);
  EXPECT_NE(log.str().find("CPU (bf16 convolutions); global batch 2 instants"), std::string::npos)
      << log.str();
  const TrainConfig fp32_config = testing::small_pose_config(root_, "bf16_as_fp32", 6, 2);
  EXPECT_NE(values,
            testing::checkpoint_values(fp32_config, train(fp32_config, log).last_checkpoint));
}

// Each group trains at its own rate: Adam's first update moves a value by lr g / (|g| + eps),
// so the largest move in each group is its learning rate: the backbone's lrate_feature, the
// confidence head's lrate_mlp, the fusion weights' lrate_fusion (their sum over a map's 1024
// cells swamps the heatmaps at lrate_mlp; TrainConfig::lrate_fusion).
TEST_F(PoseTraining, FusionWeightsTrainAtLrateFusion) {
  const std::string data_dir = (root_ / "data").string();
  TrainConfig config = testing::small_pose_config(root_, "fusion_rates", 1, 2);
  config.cross_view_fusion = true;
  config.lrate_feature = 1e-3;
  config.lrate_mlp = 1e-4;
  config.lrate_fusion = 1e-5;
  PoseModel model(config, data::kPoseJoints, pose_rig(data::read_scene_index(data_dir).scene));
  model.configure_optimizer(adam_options(config, 1));
  model.initialize(5);
  EXPECT_EQ(model.learning_rate(nn::ParameterGroup::kFusion), 1e-5);
  const std::vector<float> before = model.parameters().values();
  model.train_step(pose_instants(data_dir, data::Split::kTrain, 2));
  model.update(model.gradient_norm());
  const std::vector<float>& after = model.parameters().values();
  std::map<nn::ParameterGroup, double> largest;
  for (const nn::ParameterInfo& info : model.parameters().infos()) {
    double& move = largest[info.group];
    for (size_t i = info.offset; i < info.offset + info.size; ++i) {
      move = std::max(move, std::abs(double(after[i]) - double(before[i])));
    }
  }
  const std::map<nn::ParameterGroup, double> expected = {{nn::ParameterGroup::kFeature, 1e-3},
                                                         {nn::ParameterGroup::kMlp, 1e-4},
                                                         {nn::ParameterGroup::kFusion, 1e-5}};
  ASSERT_EQ(largest.size(), expected.size());
  for (const auto& [group, rate] : expected) {
    SCOPED_TRACE(int(group));
    EXPECT_NEAR(largest[group], rate, 0.02 * rate);
  }
}

// fusion_init_scale scales the published U(0, 0.1) fusion weights (0: zeros) and leaves the
// other parameters' initialisation as it was.
TEST_F(PoseTraining, FusionInitScaleScalesOnlyTheFusionWeights) {
  const std::string data_dir = (root_ / "data").string();
  TrainConfig config = testing::small_pose_config(root_, "fusion_init", 1, 2);
  config.cross_view_fusion = true;
  config.fusion_init_scale = 1;
  const PoseRig rig = pose_rig(data::read_scene_index(data_dir).scene);
  PoseModel published(config, data::kPoseJoints, rig);
  config.fusion_init_scale = 0.25;
  PoseModel quarter(config, data::kPoseJoints, rig);
  config.fusion_init_scale = 0;
  PoseModel zero(config, data::kPoseJoints, rig);
  published.initialize(6);
  quarter.initialize(6);
  zero.initialize(6);
  for (const nn::ParameterInfo& info : published.parameters().infos()) {
    SCOPED_TRACE(info.name);
    const bool fusion = info.group == nn::ParameterGroup::kFusion;
    EXPECT_EQ(fusion, info.name.rfind("fusion.", 0) == 0);
    const std::vector<float>& p = published.parameters().values();
    for (size_t i = info.offset; i < info.offset + info.size; ++i) {
      EXPECT_EQ(quarter.parameters().values()[i], fusion ? 0.25f * p[i] : p[i]);
      EXPECT_EQ(zero.parameters().values()[i], fusion ? 0.0f : p[i]);
      if (fusion) {
        ASSERT_TRUE(p[i] >= 0.0f && p[i] < 0.1f) << p[i];
      }
    }
  }
}

// The trainer adds every rank's and micro-step's loss sums, then each backward divides by the
// global counts: two micro-batches of one instant give the gradients of one batch of two, with
// cross-view fusion (both paths' sums) too.
void check_micro_batches(const fs::path& root, bool fusion) {
  SCOPED_TRACE(fusion ? "with fusion" : "without fusion");
  const std::string data_dir = (root / "data").string();
  const std::vector<data::TrainingSample> samples = pose_instants(data_dir, data::Split::kTrain, 2);
  ASSERT_EQ(samples.size(), 2u);
  TrainConfig split_config = testing::small_pose_config(root, "split", 1, 1);
  split_config.accumulation_steps = 2;
  split_config.cross_view_fusion = fusion;
  const PoseRig rig = pose_rig(data::read_scene_index(data_dir).scene);
  PoseModel split(split_config, data::kPoseJoints, rig),
      whole(split_config, data::kPoseJoints, rig);
  split.initialize(3);
  whole.initialize(3);
  split.begin_step(samples);
  LossSums sums = split.accumulate({}, 0);
  const LossSums second = split.accumulate({}, 1);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] += second[i];
  const StepResult a = split.end_step(sums, {});
  const StepResult b = whole.train_step(samples);
  EXPECT_LE(std::abs(a.loss - b.loss), 1e-12 * std::abs(b.loss));
  const double error =
      normwise_relative_error(split.parameters().grads(), whole.parameters().grads());
  EXPECT_LE(error, 1e-5) << "summation order alone";
  EXPECT_GT(*std::max_element(whole.parameters().grads().begin(), whole.parameters().grads().end()),
            0.0f);
}

TEST_F(PoseTraining, MicroBatchesOfBTrainAsOneBatchOfTwoB) {
  check_micro_batches(root_, false);
  check_micro_batches(root_, true);
}

// A model with cross-view fusion scores itself with and without it, and the scores without it are
// those of the same backbone and heads in a model with fusion off.
TEST_F(PoseTraining, FusionModelsScoreWithAndWithoutFusion) {
  const std::string data_dir = (root_ / "data").string();
  TrainConfig config = testing::small_pose_config(root_, "fusion", 1, 2);
  config.cross_view_fusion = true;
  PoseModel fused(config, data::kPoseJoints, pose_rig(data::read_scene_index(data_dir).scene));
  fused.initialize(4);
  TrainConfig plain_config = config;
  plain_config.cross_view_fusion = false;
  PoseModel plain(plain_config, data::kPoseJoints);
  for (const nn::ParameterInfo& info : plain.parameters().infos()) {
    const float* values = fused.parameters().value(fused.parameters().find(info.name));
    std::copy(values, values + info.size,
              plain.parameters().value(plain.parameters().find(info.name)));
  }
  EXPECT_GT(fused.parameters().size(), plain.parameters().size());
  const std::vector<data::TrainingSample> instants = pose_instants(data_dir, data::Split::kTest, 2);
  const MeanPose baseline = mean_training_pose(data_dir);
  const PoseEvalReport with = evaluate_pose(fused, instants, baseline);
  const PoseEvalReport without = evaluate_pose(plain, instants, baseline);
  ASSERT_TRUE(with.cross_view_fusion);
  EXPECT_FALSE(without.cross_view_fusion);
  EXPECT_TRUE(std::isnan(without.mpjpe_without_fusion_mm));
  EXPECT_EQ(with.joints, without.joints);
  EXPECT_EQ(with.mpjpe_without_fusion_mm, without.mpjpe_mm);
  EXPECT_EQ(with.mpjpe_relative_without_fusion_mm, without.mpjpe_relative_mm);
  EXPECT_EQ(with.pck_without_fusion, without.pck);
  EXPECT_EQ(with.pck_per_camera_without_fusion, without.pck_per_camera);
  EXPECT_NE(with.mpjpe_mm, with.mpjpe_without_fusion_mm);
  std::printf("  initialised: mpjpe %.1f mm with fusion, %.1f without\n", with.mpjpe_mm,
              with.mpjpe_without_fusion_mm);
}

// recompute_backbone: the backward runs each instant's backbone forward again instead of keeping
// the micro-batch's activations. The same loss and gradients, to summation order (each instant's
// weight gradients are summed apart), with one instant's activations kept instead of two.
TEST_F(PoseTraining, RecomputingTheBackboneGivesTheStoredGradients) {
  const std::vector<data::TrainingSample> samples =
      pose_instants((root_ / "data").string(), data::Split::kTrain, 2);
  ASSERT_EQ(samples.size(), 2u);
  const TrainConfig stored_config = testing::small_pose_config(root_, "stored", 1, 2);
  TrainConfig recompute_config = stored_config;
  recompute_config.recompute_backbone = true;
  PoseModel stored(stored_config, data::kPoseJoints);
  PoseModel recomputed(recompute_config, data::kPoseJoints);
  stored.initialize(3);
  recomputed.initialize(3);
  const StepResult a = stored.train_step(samples), b = recomputed.train_step(samples);
  EXPECT_LE(std::abs(a.loss - b.loss), 1e-6 * std::abs(a.loss));
  EXPECT_LE(normwise_relative_error(recomputed.parameters().grads(), stored.parameters().grads()),
            1e-5);
  EXPECT_LT(double(recomputed.activation_bytes()), 0.6 * double(stored.activation_bytes()));
  std::printf("  backbone activations: %.2f MB stored, %.2f MB recomputing\n",
              double(stored.activation_bytes()) / 1e6, double(recomputed.activation_bytes()) / 1e6);
}

// A short run on the built-in pose set (1000 steps of 4 instants, 30 s on 2 cores) with its own
// data: 32 bodies of 2 instants each at 96x96, 8 of them held out. The held-out MPJPE falls below
// 3/4 of the mean training pose's, which knows no image: here 150 (fp32) and 135 mm (bf16)
// against 278. (On the fixture's 8 training bodies the margin was a few mm to 70, by the seed
// and the build: a run this small learns the bodies it saw.)
// configs/pose_synthetic.txt, with 6x the data at 128x128, goes further (115 against 325 mm on
// all 80 held-out instants in 1000 steps).
void check_short_run_beats_the_mean_pose(const fs::path& fixture_root, Precision precision) {
  constexpr int kSequences = 32, kFrames = 2, kHeldOut = 8;
  const fs::path root = fixture_root / "learning";
  if (!fs::exists(root / "data")) {
    testing::write_pose_data(root, 96, kSequences, kFrames, kHeldOut, 2, 1, "pose_training_test");
  }
  std::ostringstream log;
  TrainConfig config = testing::small_pose_config(root, name_of(precision), 1000, 4);
  config.heatmap_multiplier = 100;
  config.confidence_channels = 16;
  config.i_img = 1000;
  config.lrate_feature = config.lrate_mlp = 1e-3;
  config.conv_algorithm = nn::ConvAlgorithm::kWinograd;  // as configs/pose_synthetic.txt
  config.precision = precision;
  const TrainSummary summary = train(config, log);
  const PoseEvalReport trained =
      evaluate_pose_run(config, summary.last_checkpoint, data::Split::kTest, 0);
  EXPECT_EQ(trained.instants, kHeldOut * kFrames);
  EXPECT_LT(trained.mpjpe_mm, 0.75 * trained.baseline_mpjpe_mm) << log.str();  // well below
  EXPECT_NEAR(summary.heldout_mpjpe_mm, trained.mpjpe_mm, 1e-3);
  std::printf(
      "  %s, after 1000 steps: held-out mpjpe %.1f mm (root-relative %.1f), mean pose %.1f "
      "(%.1f), pck %.2f\n",
      name_of(precision), trained.mpjpe_mm, trained.mpjpe_relative_mm, trained.baseline_mpjpe_mm,
      trained.baseline_mpjpe_relative_mm, trained.pck);
}

TEST_F(PoseTraining, AShortRunBeatsTheMeanPose) {
  check_short_run_beats_the_mean_pose(root_, Precision::kFp32);
}

// precision = bf16: the backbone's convolutions on bf16 operands learn too.
TEST_F(PoseTraining, AShortRunWithBf16ConvolutionsBeatsTheMeanPose) {
  if (mvibr::testing::bf16_convolutions_refused_here()) return;
  check_short_run_beats_the_mean_pose(root_, Precision::kBf16);
}

}  // namespace
}  // namespace mvibr::train
