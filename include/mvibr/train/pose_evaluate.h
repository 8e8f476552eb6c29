// Held-out evaluation of the pose model, the numbers multi-view pose papers report: MPJPE in mm
// (absolute, and root-relative: both skeletons moved so that the root joint is at the origin), 2D
// PCK per camera, with the learned confidences and with every view weighted alike, beside the mean
// training pose as a baseline; for a model with cross-view fusion, with it and without it (the raw
// heatmaps' 2D joints through the same confidences and triangulation). `mvibr eval` runs
// evaluate_pose_run; the training loop scores a few held-out instants with evaluate_pose every
// i_img steps.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/data/prefetch_reader.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/train/config.h"
#include "mvibr/train/pose_model.h"

namespace mvibr::train {

// The mean of the training split's targets: absolute joints [J,3] and joints relative to the root
// [J,3]; the baseline that knows no image.
struct MeanPose {
  std::vector<double> absolute, relative;
};
MeanPose mean_training_pose(const std::string& data_dir);

// A 2D joint counts as correct (PCK) within this fraction of the image width of its label.
constexpr double kPckFraction = 0.05;

struct PoseEvalReport {
  uint64_t step = 0;  // the checkpoint's (evaluate_pose_run)
  int instants = 0;
  int joints = 0;                              // triangulated, over all instants
  double mpjpe_mm = 0, mpjpe_relative_mm = 0;  // with the learned confidences
  double mpjpe_equal_weights_mm = 0, mpjpe_relative_equal_weights_mm = 0;
  double baseline_mpjpe_mm = 0, baseline_mpjpe_relative_mm = 0;  // the mean training pose
  double pck_threshold_px = 0;
  std::vector<double> pck_per_camera;  // fraction of each camera's visible joints within it
  double pck = 0;                      // over every camera
  // With cross-view fusion, the scores above are of the fused heatmaps, these of the raw ones
  // (NaN and empty without fusion); every MPJPE counts the joints both paths triangulated.
  bool cross_view_fusion = false;
  double mpjpe_without_fusion_mm = NAN, mpjpe_relative_without_fusion_mm = NAN;
  std::vector<double> pck_per_camera_without_fusion;
  double pck_without_fusion = NAN;
};

// Scores `model` on `samples` (every camera of each instant) against `baseline`; with `comm`,
// each rank passes its own share and every rank gets the totals of all.
PoseEvalReport evaluate_pose(PoseModel& model, const std::vector<data::TrainingSample>& samples,
                             const MeanPose& baseline, dist::Communicator* comm = nullptr);

// The instants of `split` in the shards' order, each with all its cameras (max_instants <= 0:
// all; else the first that many). With `stride` and `offset`, only those i with i % stride ==
// offset.
std::vector<data::TrainingSample> pose_instants(const std::string& data_dir, data::Split split,
                                                int max_instants, int stride = 1, int offset = 0);

// Loads `checkpoint` into a pose model of `config` and scores the first `max_instants` of
// `split` (all when <= 0); with `comm`, its ranks share the instants and all get the report.
PoseEvalReport evaluate_pose_run(const TrainConfig& config, const std::string& checkpoint,
                                 data::Split split, int max_instants,
                                 dist::Communicator* comm = nullptr);

}  // namespace mvibr::train
