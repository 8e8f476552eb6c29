// `mvibr render` of a pose run (train/pose_render.h) on a run trained for two steps: every camera
// of each held-out instant becomes a PNG, upscaled, with the true skeleton's colour on its bones
// and exactly the overlay draw_pose_overlay makes of the model's prediction; the list's MPJPE of
// each instant is evaluate_pose's of that instant, and an instant out of range is refused.
#include "mvibr/train/pose_render.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/geom/projection.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/pose_evaluate.h"
#include "mvibr/train/pose_model.h"
#include "mvibr/train/trainer.h"
#include "training_fixture.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

// The views' side in pixels, and the pictures': upscaled 4x (pose_overlay_scale).
constexpr int kSide = 48, kScale = 4, kPicture = kSide * kScale;

// Distance from (u, v) to the segment a-b.
double segment_distance(double u, double v, double au, double av, double bu, double bv) {
  const double du = bu - au, dv = bv - av, length2 = du * du + dv * dv;
  const double t =
      length2 > 0 ? std::clamp(((u - au) * du + (v - av) * dv) / length2, 0.0, 1.0) : 0.0;
  return std::hypot(u - (au + t * du), v - (av + t * dv));
}

class PoseRender : public ::testing::Test {
 protected:
  // 48x48 views, 4 cameras, 3 sequences of 2 instants, the last held out: 2 test instants.
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-pose-render-" + std::to_string(::getpid()));
    testing::write_pose_data(root_, kSide, 3, 2, 1, 5, 1, "pose_render_test");
    config_ = testing::small_pose_config(root_, "render", 2, 1);
    std::ostringstream log;
    checkpoint_ = train(config_, log).last_checkpoint;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static inline fs::path root_;
  static inline TrainConfig config_;
  static inline std::string checkpoint_;
};

TEST_F(PoseRender, DrawsEveryCameraWithBothSkeletonsAndListsEachInstantsMpjpe) {
  const PoseRenderReport report =
      render_pose_run(config_, checkpoint_, data::Split::kTest, 0, 0, (root_ / "renders").string());
  ASSERT_EQ(report.instants.size(), 2u);
  EXPECT_EQ(report.dir, (root_ / "renders" / "2").string());
  int pngs = 0;
  for (const auto& entry : fs::directory_iterator(report.dir)) {
    pngs += entry.path().extension() == ".png";
  }
  EXPECT_EQ(pngs, 8);  // 2 instants x 4 cameras

  std::ifstream json_file(report.json);
  const nlohmann::json list = nlohmann::json::parse(json_file);
  ASSERT_EQ(list["instants"].size(), 2u);
  EXPECT_EQ(list["step"], 2);

  PoseModel model(config_, data::kPoseJoints);
  load_weights(checkpoint_, &model.parameters());
  const std::vector<data::TrainingSample> samples =
      pose_instants(config_.datadir, data::Split::kTest, 0);
  ASSERT_EQ(samples.size(), 2u);
  const MeanPose baseline = mean_training_pose(config_.datadir);
  EXPECT_DOUBLE_EQ(list["instants"][0]["mpjpe_mm"].get<double>(),
                   evaluate_pose_run(config_, checkpoint_, data::Split::kTest, 1).mpjpe_mm);
  const data::Rgb green = kTrueSkeletonColour;
  const std::vector<int> skeleton(data::kPoseParents, data::kPoseParents + data::kPoseJoints);
  int bones_checked = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const nlohmann::json& entry = list["instants"][i];
    EXPECT_EQ(entry["instant"], int(i));
    EXPECT_DOUBLE_EQ(entry["mpjpe_mm"].get<double>(),
                     evaluate_pose(model, {samples[i]}, baseline).mpjpe_mm);
    const PosePrediction p = model.predict({samples[i]})[0];
    std::vector<data::View> views = {samples[i].target};
    views.insert(views.end(), samples[i].sources.begin(), samples[i].sources.end());
    ASSERT_EQ(entry["files"].size(), views.size());
    for (size_t c = 0; c < views.size(); ++c) {
      const data::View& view = views[c];
      EXPECT_EQ(entry["views"][c], view.name);
      const data::Image png =
          data::load_image((fs::path(report.dir) / entry["files"][c].get<std::string>()).string());
      ASSERT_EQ(png.width, kPicture);
      ASSERT_EQ(png.height, kPicture);
      ASSERT_EQ(png.channels, 3);
      EXPECT_EQ(png.pixels,
                draw_pose_overlay(view, skeleton, p.joints_world, p.triangulated).pixels);
      // The predicted bones in the picture's pixels.
      std::vector<double> predicted(2 * data::kPoseJoints);
      for (int j = 0; j < data::kPoseJoints; ++j) {
        const Projection<double> q = project_point(
            view.camera,
            {p.joints_world[3 * j], p.joints_world[3 * j + 1], p.joints_world[3 * j + 2]}, kSide,
            kSide);
        predicted[2 * j] = data::upscaled_coordinate(q.u, kScale);
        predicted[2 * j + 1] = data::upscaled_coordinate(q.v, kScale);
      }
      // Each true bone's midpoint that no predicted bone or joint covers is the true colour.
      for (int j = 1; j < data::kPoseJoints; ++j) {
        const int parent = skeleton[size_t(j)];
        const float* a = &view.pose.joints_image[2 * j];
        const float* b = &view.pose.joints_image[2 * parent];
        const double mu = data::upscaled_coordinate((a[0] + b[0]) / 2.0, kScale);
        const double mv = data::upscaled_coordinate((a[1] + b[1]) / 2.0, kScale);
        const int u = int(std::lround(mu)), v = int(std::lround(mv));
        if (u < 0 || v < 0 || u >= kPicture || v >= kPicture) continue;
        bool covered = false;
        for (int k = 1; k < data::kPoseJoints; ++k) {
          const int kp = skeleton[size_t(k)];
          covered |=
              segment_distance(u, v, predicted[2 * k], predicted[2 * k + 1], predicted[2 * kp],
                               predicted[2 * kp + 1]) <= kJointRadius + kOutline + 1;
        }
        if (covered) continue;
        const uint8_t* pixel = &png.pixels[(size_t(v) * kPicture + size_t(u)) * 3];
        EXPECT_EQ(pixel[0], green.r) << view.name << " bone " << j;
        EXPECT_EQ(pixel[1], green.g) << view.name << " bone " << j;
        EXPECT_EQ(pixel[2], green.b) << view.name << " bone " << j;
        ++bones_checked;
      }
    }
  }
  EXPECT_GE(bones_checked, 20);
}

TEST_F(PoseRender, OneInstantAloneAndAnInstantOutOfRange) {
  const PoseRenderReport one =
      render_pose_run(config_, checkpoint_, data::Split::kTest, 1, 1, (root_ / "one").string());
  ASSERT_EQ(one.instants.size(), 1u);
  EXPECT_EQ(one.instants[0].instant, 1);
  EXPECT_EQ(one.instants[0].png_files.size(), 4u);
  try {
    render_pose_run(config_, checkpoint_, data::Split::kTest, 2, 1, (root_ / "out").string());
    FAIL() << "instant 2 of 2 was drawn";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "instant 2 is not in the test split, which has instants 0 to 1");
  }
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

}  // namespace
}  // namespace mvibr::train
