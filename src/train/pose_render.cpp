// The pose model's held-out instants drawn (pose_render.h): each rank draws its share and scores
// each instant alone with evaluate_pose; a table of the instants' MPJPE and cameras, summed over
// the ranks, gives every rank the whole report.
#include "mvibr/train/pose_render.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/geom/projection.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/pose_evaluate.h"
#include "mvibr/train/pose_model.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

// Draws a skeleton given each joint's picture coordinates [J,2] and which joints to draw: first
// its outline (every shape kOutline wider on each side, dark), then the shapes in `colour`.
void draw_skeleton(data::Image* image, const std::vector<int>& skeleton,
                   const std::vector<double>& points, const std::vector<uint8_t>& drawn,
                   const std::vector<uint8_t>& visible, data::Rgb colour) {
  for (const double grow : {kOutline, 0.0}) {
    const data::Rgb paint = grow > 0 ? kOutlineColour : colour;
    for (size_t j = 0; j < skeleton.size(); ++j) {
      const int parent = skeleton[j];
      if (parent < 0 || !drawn[j] || !drawn[size_t(parent)]) continue;
      data::draw_line(image, points[2 * j], points[2 * j + 1], points[2 * size_t(parent)],
                      points[2 * size_t(parent) + 1], kBoneWidth + 2 * grow, paint);
    }
    for (size_t j = 0; j < skeleton.size(); ++j) {
      if (!drawn[j]) continue;
      if (visible[j]) {
        data::draw_disc(image, points[2 * j], points[2 * j + 1], kJointRadius + grow, paint);
      } else {
        data::draw_ring(image, points[2 * j], points[2 * j + 1], kJointRadius,
                        kHiddenJointRing + 2 * grow, paint);
      }
    }
  }
}

nlohmann::json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

int pose_overlay_scale(int width, int height) {
  const int longer = std::max(width, height);
  return std::clamp((384 + longer - 1) / std::max(longer, 1), 1, 4);
}

data::Image draw_pose_overlay(const data::View& view, const std::vector<int>& skeleton,
                              const std::vector<double>& joints_world,
                              const std::vector<uint8_t>& triangulated) {
  const size_t J = skeleton.size();
  if (view.pose.joints_image.size() != 2 * J || joints_world.size() != 3 * J ||
      triangulated.size() != J) {
    throw InvalidArgument(view.name + ": pose labels or prediction not of the skeleton's " +
                          std::to_string(J) + " joints");
  }
  const int scale = pose_overlay_scale(view.camera.width, view.camera.height);
  data::Image image =
      data::upscale_nearest({view.camera.width, view.camera.height, 3, view.rgb}, scale);
  std::vector<double> truth(2 * J), predicted(2 * J);
  std::vector<uint8_t> in_front(J);
  for (size_t j = 0; j < J; ++j) {
    truth[2 * j] = data::upscaled_coordinate(view.pose.joints_image[2 * j], scale);
    truth[2 * j + 1] = data::upscaled_coordinate(view.pose.joints_image[2 * j + 1], scale);
    const Vec3<double> joint{joints_world[3 * j], joints_world[3 * j + 1], joints_world[3 * j + 2]};
    const Projection<double> p =
        project_point(view.camera, joint, view.camera.width, view.camera.height);
    predicted[2 * j] = data::upscaled_coordinate(p.u, scale);
    predicted[2 * j + 1] = data::upscaled_coordinate(p.v, scale);
    in_front[j] = triangulated[j] && transform_point(view.camera.w2c, joint).z > 0;
  }
  const std::vector<uint8_t> all(J, 1);
  draw_skeleton(&image, skeleton, truth, all, view.pose.visible, kTrueSkeletonColour);
  draw_skeleton(&image, skeleton, predicted, in_front, all, kPredictedSkeletonColour);
  return image;
}

PoseRenderReport render_pose_run(const TrainConfig& config, const std::string& checkpoint,
                                 data::Split split, int first, int count,
                                 const std::string& png_root,
                                 const std::function<void(const PoseInstantRender&)>& on_instant,
                                 dist::Communicator* comm) {
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  const std::vector<int>& skeleton = index.scene.skeleton;
  if (skeleton.empty()) {
    throw InvalidArgument(config.datadir + ": not a pose data set (no skeleton)");
  }
  const int total =
      int(std::count_if(index.scene.views.begin(), index.scene.views.end(),
                        [&](const data::View& v) { return v.target && v.split == split; }));
  const std::string split_name = data::split_name(split);
  if (total == 0) throw InvalidArgument(config.datadir + ": has no " + split_name + " instants");
  if (first < 0 || first >= total) {
    throw InvalidArgument("instant " + std::to_string(first) + " is not in the " + split_name +
                          " split, which has instants 0 to " + std::to_string(total - 1));
  }
  const int end = count > 0 ? std::min(total, first + count) : total;
  PoseModel model(config, int(skeleton.size()));
  PoseRenderReport report;
  report.step = load_weights(checkpoint, &model.parameters());
  report.dir = (fs::path(png_root) / std::to_string(report.step)).string();
  report.json = (fs::path(report.dir) / ("pose_" + split_name + ".json")).string();
  fs::create_directories(report.dir);

  const int rank = comm != nullptr ? comm->rank() : 0, ranks = comm != nullptr ? comm->size() : 1;
  const std::vector<data::TrainingSample> mine =
      pose_instants(config.datadir, split, end, ranks, first + rank);
  double cameras = mine.empty() ? 0 : double(mine[0].sources.size() + 1);
  if (ranks > 1) comm->all_reduce(&cameras, 1, dist::ReduceOp::kMax);
  // Per instant: its MPJPE, then its cameras' global view indices; 0 where another rank's.
  const size_t row = 1 + size_t(cameras);
  std::vector<double> table(size_t(end - first) * row, 0.0);
  // evaluate_pose's baseline numbers are not reported here: any mean pose will do.
  const MeanPose no_baseline{std::vector<double>(3 * skeleton.size(), 0.0),
                             std::vector<double>(3 * skeleton.size(), 0.0)};
  for (size_t k = 0; k < mine.size(); ++k) {
    const std::vector<data::TrainingSample> instant = {mine[k]};
    const PosePrediction prediction = model.predict(instant)[0];
    PoseInstantRender r;
    r.instant = first + rank + int(k) * ranks;
    r.mpjpe_mm = evaluate_pose(model, instant, no_baseline).mpjpe_mm;
    double* slot = &table[size_t(r.instant - first) * row];
    slot[0] = r.mpjpe_mm;
    std::vector<const data::View*> views = {&mine[k].target};
    for (const data::View& v : mine[k].sources) views.push_back(&v);
    if (views.size() + 1 != row) {
      throw InvalidArgument("pose render: instant of " + mine[k].target.name + " has " +
                            std::to_string(views.size()) + " cameras, others " +
                            std::to_string(row - 1));
    }
    for (size_t c = 0; c < views.size(); ++c) {
      const data::View& view = *views[c];
      const data::Image picture =
          draw_pose_overlay(view, skeleton, prediction.joints_world, prediction.triangulated);
      r.view_names.push_back(view.name);
      r.png_files.push_back(file_safe(view.name) + ".png");
      data::write_png((fs::path(report.dir) / r.png_files.back()).string(), picture.width,
                      picture.height, 3, picture.pixels.data());
      slot[1 + c] = c == 0 ? mine[k].target_view : mine[k].source_views[c - 1];
    }
    if (on_instant) on_instant(r);
  }
  // Also the barrier: the list is written once every picture it names is.
  if (ranks > 1) comm->all_reduce(table.data(), table.size(), dist::ReduceOp::kSum);

  nlohmann::json instants = nlohmann::json::array();
  for (int i = first; i < end; ++i) {
    const double* slot = &table[size_t(i - first) * row];
    PoseInstantRender r;
    r.instant = i;
    r.mpjpe_mm = slot[0];
    for (size_t c = 0; c + 1 < row; ++c) {
      r.view_names.push_back(index.scene.views[size_t(slot[1 + c])].name);
      r.png_files.push_back(file_safe(r.view_names.back()) + ".png");
    }
    instants.push_back({{"instant", r.instant},
                        {"mpjpe_mm", finite_or_null(r.mpjpe_mm)},
                        {"views", r.view_names},
                        {"files", r.png_files}});
    report.instants.push_back(std::move(r));
  }
  if (rank == 0) {
    const nlohmann::json list = {
        {"step", report.step},
        {"split", split_name},
        {"checkpoint", checkpoint},
        {"upscale",
         pose_overlay_scale(index.scene.views[0].camera.width, index.scene.views[0].camera.height)},
        {"true_colour", {kTrueSkeletonColour.r, kTrueSkeletonColour.g, kTrueSkeletonColour.b}},
        {"predicted_colour",
         {kPredictedSkeletonColour.r, kPredictedSkeletonColour.g, kPredictedSkeletonColour.b}},
        {"instants", instants}};
    write_file_atomically(report.json, list.dump(1) + "\n");
  }
  return report;
}

}  // namespace mvibr::train
