// DynIBaR's training step on the CPU (model = dynibar): every part of the model trains in the main
// loop and only the static branch in the bootstrap; micro-batches add up to the whole batch; bad
// samples and data are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>
#include <nlohmann/json.hpp>
#include "mvibr/core/error.h"
#include "mvibr/data/camera_path.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/neighbours.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/shards.h"
#include "mvibr/data/synthetic_scene.h"
#include "mvibr/synthetic/random_scene.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/trainer.h"
#include "support/bf16_operands.h"
#include "training_fixture.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

constexpr int kFrames = 12, kReach = 6;

// A 12-frame video of the built-in dynamic scene, its pools reaching 6 frames, prepared once.
class DynibarModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-dynibar-model-" + std::to_string(::getpid()));
    testing::prepare_small_video(root_, "dynibar_model_test", kFrames, kReach);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static TrainConfig config(int n_rand) {
    TrainConfig c = testing::small_dynibar_config(root_, "model", 1, n_rand, kReach);
    c.coarse_feat_dim = c.fine_feat_dim = 8;
    c.seed = 5;
    return with_video_frames(c);
  }

  // A sample whose target has every dynamic source (frames 3 .. 8).
  static data::TrainingSample sample(const TrainConfig& c) {
    return testing::video_sample(c, 3, kFrames - 4);
  }

  static StepResult step(DynibarModel* model, const data::TrainingSample& s, int micro_batches) {
    model->begin_step(s);
    LossSums sums(model->loss_sums_size(), 0.0);
    for (int m = 0; m < micro_batches; ++m) {
      const LossSums batch = model->accumulate(RandomKey{7, 3}, m);
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += batch[i];
    }
    return model->end_step(sums, {});
  }

  // The largest |gradient| of each parameter group.
  static std::map<nn::ParameterGroup, double> group_gradients(const nn::ParameterSet& p) {
    std::map<nn::ParameterGroup, double> out;
    for (const nn::ParameterInfo& info : p.infos()) {
      double& m = out[info.group];
      for (size_t i = info.offset; i < info.offset + info.size; ++i) {
        m = std::max(m, double(std::abs(p.grads()[i])));
      }
    }
    return out;
  }

  static inline fs::path root_;
};

TEST_F(DynibarModelTest, TheMainLoopTrainsEveryPartAndTheBootstrapOnlyTheStaticBranch) {
  const TrainConfig c = config(64);
  ASSERT_EQ(c.num_frames, kFrames);
  const data::TrainingSample s = sample(c);
  const auto main = testing::dynibar_model_at(c, 12);
  const StepResult r = step(main.get(), s, 1);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.term("composite"), 0.0);
  EXPECT_GT(r.term("dynamic_only"), 0.0);  // some rays see the moving object
  EXPECT_GT(r.term("cross_time"), 0.0);
  EXPECT_GT(r.term("flow"), 0.0);
  EXPECT_GT(r.term("disparity"), 0.0);
  EXPECT_GT(r.term("cycle"), 0.0);
  EXPECT_GT(r.term("scene_flow_magnitude"), 0.0);
  EXPECT_EQ(r.term("static_bootstrap"), 0.0);
  for (const auto& [group, largest] : group_gradients(main->parameters())) {
    EXPECT_GT(largest, 0.0) << "group " << int(group) << " untrained in the main loop";
  }
  const auto bootstrap = testing::dynibar_model_at(c, 11);
  const StepResult b = step(bootstrap.get(), s, 1);
  // Adam leaves out what the bootstrap does not train (torch skips a parameter without a
  // gradient): only the static groups count the update.
  const std::array<uint64_t, nn::kParameterGroupCount> counts =
      bootstrap->optimizer().group_steps();
  bootstrap->update(bootstrap->gradient_norm());
  for (int g = 0; g < nn::kParameterGroupCount; ++g) {
    const bool static_branch =
        g == int(nn::ParameterGroup::kStaticFeature) || g == int(nn::ParameterGroup::kStaticMlp);
    EXPECT_EQ(bootstrap->optimizer().group_steps()[size_t(g)], counts[size_t(g)] + static_branch)
        << "group " << g;
  }
  EXPECT_GT(b.term("static_bootstrap"), 0.0);
  EXPECT_EQ(b.loss, b.term("static_bootstrap"));
  for (const auto& [group, largest] : group_gradients(bootstrap->parameters())) {
    const bool static_branch =
        group == nn::ParameterGroup::kStaticFeature || group == nn::ParameterGroup::kStaticMlp;
    if (static_branch) {
      EXPECT_GT(largest, 0.0) << "group " << int(group);
    } else {
      EXPECT_EQ(largest, 0.0) << "group " << int(group) << " trained in the bootstrap";
    }
  }
}

// DynibarMono's groups: the static network and its feature net at half rate, the basis at a
// quarter of lrate_mlp, all on the schedule (no decay in the bootstrap, StepLR after it).
TEST_F(DynibarModelTest, EachGroupTrainsAtItsPublishedRateOnTheSchedule) {
  const TrainConfig c = config(8);
  const DynibarScheduleOptions schedule = dynibar_schedule_options(c);
  const std::pair<nn::ParameterGroup, double> groups[] = {
      {nn::ParameterGroup::kFeature, c.lrate_feature},
      {nn::ParameterGroup::kStaticFeature, 0.5 * c.lrate_feature},
      {nn::ParameterGroup::kMlp, c.lrate_mlp},
      {nn::ParameterGroup::kStaticMlp, 0.5 * c.lrate_mlp},
      {nn::ParameterGroup::kTrajectoryBasis, 0.25 * c.lrate_mlp}};
  for (uint64_t step : {0u, 11u, 12u, 35u, 36u, 37u, 200u}) {
    const auto model = testing::dynibar_model_at(c, step);
    for (const auto& [group, initial] : groups) {
      EXPECT_EQ(model->learning_rate(group),
                dynibar_learning_rate(initial, int64_t(step), schedule))
          << "group " << int(group) << " at step " << step;
    }
  }
  EXPECT_LT(testing::dynibar_model_at(c, 36)->learning_rate(nn::ParameterGroup::kMlp),
            c.lrate_mlp);  // decayed
}

// Two micro-batches of B rays are the global batch of 2B: the same loss and gradients up to the
// order of float sums (every term divides by the whole batch's sums, not each half's).
TEST_F(DynibarModelTest, TwoMicroBatchesOfBTrainAsOneOfTwoB) {
  for (uint64_t at : {12u, 11u}) {
    const TrainConfig half = config(12), whole = config(24);
    const data::TrainingSample s = sample(whole);
    const auto a = testing::dynibar_model_at(half, at), b = testing::dynibar_model_at(whole, at);
    const StepResult ra = step(a.get(), s, 2), rb = step(b.get(), s, 1);
    EXPECT_NEAR(ra.loss, rb.loss, 1e-6 * rb.loss) << "step " << at;
    for (size_t i = 0; i < rb.terms.size(); ++i) {
      EXPECT_NEAR(ra.terms[i].value, rb.terms[i].value, 1e-6 * std::abs(rb.terms[i].value) + 1e-12)
          << ra.terms[i].key;
    }
    const std::vector<float>& ga = a->parameters().grads();
    const std::vector<float>& gb = b->parameters().grads();
    double difference = 0, norm = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      difference += double(ga[i] - gb[i]) * double(ga[i] - gb[i]);
      norm += double(gb[i]) * double(gb[i]);
    }
    EXPECT_GT(norm, 0.0);
    EXPECT_LE(std::sqrt(difference / norm), 1e-4) << "step " << at;
  }
}

TEST_F(DynibarModelTest, SamplesWithoutSourceSetsOrFramesBeyondTheVideoAreRefused) {
  const TrainConfig c = config(8);
  data::TrainingSample s = sample(c);
  DynibarModel model(c);
  data::TrainingSample plain = s;
  plain.dynibar.reset();
  EXPECT_THROW(model.begin_step(plain), InvalidArgument);
  data::TrainingSample late = s;
  late.target.time_index = kFrames;
  EXPECT_THROW(model.begin_step(late), InvalidArgument);
  TrainConfig wrong = c;
  wrong.num_frames = kFrames + 1;
  EXPECT_THROW(with_video_frames(wrong), InvalidArgument);
  TrainConfig fine = c;
  fine.N_importance = 8;  // DynIBaR's monocular model has no fine pass
  EXPECT_THROW(DynibarModel{fine}, InvalidArgument);
}

// Training through the loop (train()): the static bootstrap, then the main loop.
class DynibarTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-dynibar-training-" + std::to_string(::getpid()));
    testing::prepare_small_video(root_, "dynibar_model_test");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static inline fs::path root_;
};

// Stopped in the bootstrap and resumed, a run crosses into the main loop exactly as one that ran
// straight through: the trajectory basis, every group's update count, the phase and the anchor's
// reach all come back (the published code swaps in a basis its optimiser does not know).
// With bf16 operands too (precision = bf16): each product is the same bits for the same call.
TEST_F(DynibarTraining, ResumingAcrossTheBootstrapReachesBitIdenticalParameters) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    if (precision == Precision::kBf16 && mvibr::testing::bf16_linear_refused_here()) continue;
    const std::string tag = name_of(precision);
    const auto config = [&](const std::string& name, int steps) {
      TrainConfig c = testing::small_dynibar_config(root_, name + "-" + tag, steps, 32);
      c.precision = precision;
      return c;
    };
    std::ostringstream log;
    const TrainSummary straight = train(config("straight", 13), log);
    const TrainSummary half = train(config("resumed", 7), log);
    EXPECT_EQ(half.last_step, 7u);
    const TrainSummary rest = train(config("resumed", 13), log);
    EXPECT_EQ(rest.first_step, 7u);
    const std::vector<float> a =
        testing::checkpoint_values(config("straight", 13), straight.last_checkpoint);
    EXPECT_EQ(a, testing::checkpoint_values(config("straight", 13), rest.last_checkpoint)) << tag;
    const std::unique_ptr<TrainableModel> initial =
        make_model(with_video_frames(config("straight", 13)));
    initial->initialize(config("straight", 13).seed);
    EXPECT_NE(a, initial->parameters().values()) << tag << ": the runs must have trained";
    EXPECT_TRUE(std::isfinite(straight.last_loss)) << tag;
  }
}

// Held-out views rendered by a trained DynIBaR at their own time, scored over the full frame and
// over the moving and the still pixels; IBRNet on the same video gets the same regional scores.
TEST_F(DynibarTraining, EvaluationScoresTheFrameItsMovingAndItsStillPixels) {
  std::ostringstream log;
  for (ModelKind model : {ModelKind::kDynibar, ModelKind::kIbrnet}) {
    TrainConfig c =
        testing::small_dynibar_config(root_, std::string("eval-") + name_of(model), 12, 32);
    c.model = model;
    if (model == ModelKind::kIbrnet) c.anti_alias_pooling = true;
    const TrainSummary run = train(c, log);
    const TrainConfig resolved = with_video_frames(c);
    const EvalReport report =
        evaluate_run(resolved, run.last_checkpoint, data::Split::kTest, 0, "");
    ASSERT_EQ(report.views.size(), 2u);  // frames 0 and 8
    for (const ViewMetrics& v : report.views) {
      EXPECT_TRUE(std::isfinite(v.psnr)) << v.name;
      EXPECT_TRUE(std::isfinite(v.psnr_static)) << v.name;
      EXPECT_TRUE(std::isfinite(v.ssim_static)) << v.name;
      EXPECT_FALSE(std::isnan(v.psnr_dynamic)) << v.name << ": no moving pixels";
      // The frame's squared error is the regions' together.
      const double moving = v.psnr_dynamic, still = v.psnr_static;
      EXPECT_GT(v.psnr, std::min(moving, still) - 1e-9) << v.name;
      EXPECT_LT(v.psnr, std::max(moving, still) + 1e-9) << v.name;
    }
    EXPECT_TRUE(std::isfinite(report.mean_psnr_dynamic));
  }
}

// A video's render modes: one camera held over time (frames 3 steps apart), and bullet time
// (the camera moving between two views, time frozen). Each frame reads DynIBaR's sets at its
// own time: the frames at t +- 1..3 and the video's frame at t. The composite's static and
// dynamic parts, written beside it, add up to it.
TEST_F(DynibarTraining, VideosRenderAtAnyTimeWithTheirStaticAndDynamicParts) {
  std::ostringstream log;
  const TrainConfig config = testing::small_dynibar_config(root_, "paths", 12, 32);
  const TrainSummary run = train(config, log);
  const TrainConfig resolved = with_video_frames(config);
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  std::vector<data::PathFrame> fixed = data::fixed_path(index.scene, 5, 4);
  data::set_path_time(index.scene, data::kSweepTime, &fixed);  // steps 0, 3, 6, 9
  const PathReport report =
      render_path(resolved, run.last_checkpoint, fixed, (root_ / "renders").string(), "fixed");
  ASSERT_EQ(report.frames.size(), 4u);
  std::vector<std::vector<uint8_t>> images;
  for (size_t f = 0; f < 4; ++f) {
    const int t = fixed[f].time_index;
    EXPECT_EQ(t, int(3 * f));
    const std::vector<int>& sources = report.frames[f].source_views;
    for (int offset : {0, 1, 2, 3, -1, -2, -3}) {
      const int frame = t + offset;  // the monocular video's view index is its time step
      if (frame < 0 || frame >= 10 || frame % 8 == 0) continue;  // past the ends, or held out
      EXPECT_NE(std::find(sources.begin(), sources.end(), frame), sources.end())
          << "frame " << f << " lacks the video's frame at t" << std::showpos << offset;
    }
    const std::string& rgb_png = report.frames[f].rgb_png;
    const std::string stem = rgb_png.substr(0, rgb_png.size() - 4);
    const data::Image rgb = data::load_image(rgb_png);
    const data::Image st = data::load_image(stem + "_static.png");
    const data::Image dy = data::load_image(stem + "_dynamic.png");
    ASSERT_EQ(st.pixels.size(), rgb.pixels.size());
    ASSERT_EQ(dy.pixels.size(), rgb.pixels.size());
    int worst = 0;
    for (size_t i = 0; i < rgb.pixels.size(); ++i) {
      if (rgb.pixels[i] == 255) continue;  // clipped
      worst = std::max(worst, std::abs(int(st.pixels[i]) + int(dy.pixels[i]) - int(rgb.pixels[i])));
    }
    EXPECT_LE(worst, 1) << "frame " << f << ": the parts do not add up to the composite";
    images.push_back(rgb.pixels);
  }
  EXPECT_NE(images[0], images[3]) << "the moving objects must move";

  std::vector<data::PathFrame> bullet = data::interpolated_path(index.scene, {1, 5}, 3);
  data::set_path_time(index.scene, 4, &bullet);
  const PathReport frozen =
      render_path(resolved, run.last_checkpoint, bullet, (root_ / "renders").string(), "bullet");
  const nlohmann::json cameras =
      nlohmann::json::parse(std::ifstream(fs::path(frozen.dir) / "cameras.json"));
  ASSERT_EQ(cameras.size(), 3u);
  for (const auto& frame : cameras) EXPECT_EQ(frame["time_index"].get<int>(), 4);
  EXPECT_NE(data::load_image(frozen.frames[0].rgb_png).pixels,
            data::load_image(frozen.frames[2].rgb_png).pixels);
}

}  // namespace
}  // namespace mvibr::train
