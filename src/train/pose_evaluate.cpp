// Held-out scores of the pose model (see pose_evaluate.h): sums over instants that ranks add, then
// the means.
#include "mvibr/train/pose_evaluate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/train/checkpoint.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

// |a - b|_2 of joint j, both [J,3]; relative: each minus its own root (joint 0) first.
double joint_distance(const double* a, const double* b, size_t j, bool relative) {
  double squared = 0;
  for (size_t k = 0; k < 3; ++k) {
    const double d =
        (a[3 * j + k] - (relative ? a[k] : 0)) - (b[3 * j + k] - (relative ? b[k] : 0));
    squared += d * d;
  }
  return std::sqrt(squared);
}

// The sums the ranks add: instants, joints, eight error sums, then per camera visible joints and
// those within the PCK threshold, with and without fusion.
enum Sum {
  kInstants,
  kJoints,
  kError,
  kErrorRelative,
  kErrorEqual,
  kErrorRelativeEqual,
  kBaseline,
  kBaselineRelative,
  kErrorRaw,
  kErrorRelativeRaw,
  kCameraSums
};
constexpr size_t kSumsPerCamera = 3;  // visible, within, within without fusion

// Counts the visible joints of `joints_image` [V,J,2] within `threshold` of the labels into each
// camera's sum number `slot` (1: the model's joints, 2: without fusion).
void add_pck(const std::vector<const data::View*>& views, const std::vector<float>& joints_image,
             double threshold, size_t slot, std::vector<double>* sums) {
  const size_t J = views[0]->pose.visible.size();
  for (size_t c = 0; c < views.size(); ++c) {
    const data::PoseLabels& labels = views[c]->pose;
    for (size_t j = 0; j < J; ++j) {
      if (!labels.visible[j]) continue;
      const double du = double(joints_image[(c * J + j) * 2]) - labels.joints_image[2 * j];
      const double dv = double(joints_image[(c * J + j) * 2 + 1]) - labels.joints_image[2 * j + 1];
      if (std::hypot(du, dv) <= threshold) (*sums)[kCameraSums + kSumsPerCamera * c + slot] += 1;
    }
  }
}

}  // namespace

MeanPose mean_training_pose(const std::string& data_dir) {
  const data::SceneIndex index = data::read_scene_index(data_dir);
  const size_t J = index.scene.skeleton.size();
  if (J == 0) throw InvalidArgument(data_dir + ": not a pose data set (no skeleton)");
  MeanPose mean{std::vector<double>(3 * J, 0.0), std::vector<double>(3 * J, 0.0)};
  double count = 0;
  for (int s = 0; s < index.n_shards; ++s) {
    const data::ShardReader shard(
        (fs::path(data_dir) / data::shard_file_name(s, index.n_shards)).string());
    for (int t = 0; t < shard.n_targets(); ++t) {
      const data::View& target = shard.frame(shard.target_frame(t));
      if (target.split != data::Split::kTrain) continue;
      const std::vector<double>& x = target.pose.joints_world;
      for (size_t i = 0; i < 3 * J; ++i) {
        mean.absolute[i] += x[i];
        mean.relative[i] += x[i] - x[i % 3];
      }
      count += 1;
    }
  }
  if (count == 0) throw InvalidArgument(data_dir + ": has no training instants");
  for (size_t i = 0; i < 3 * J; ++i) {
    mean.absolute[i] /= count;
    mean.relative[i] /= count;
  }
  return mean;
}

PoseEvalReport evaluate_pose(PoseModel& model, const std::vector<data::TrainingSample>& samples,
                             const MeanPose& baseline, dist::Communicator* comm) {
  const size_t J = baseline.absolute.size() / 3;
  size_t cameras = samples.empty() ? 0 : samples[0].sources.size() + 1;
  if (comm != nullptr && comm->size() > 1) {
    double most = double(cameras);
    comm->all_reduce(&most, 1, dist::ReduceOp::kMax);
    cameras = size_t(most);
  }
  const bool fusion = model.cross_view_fusion();
  std::vector<double> sums(kCameraSums + kSumsPerCamera * cameras, 0.0);
  const std::vector<PosePrediction> predictions = model.predict(samples);
  double width = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const data::TrainingSample& sample = samples[i];
    const PosePrediction& p = predictions[i];
    std::vector<const data::View*> views = {&sample.target};
    for (const data::View& v : sample.sources) views.push_back(&v);
    if (views.size() != cameras) {
      throw InvalidArgument("pose evaluation: instant of " + sample.target.name + " has " +
                            std::to_string(views.size()) + " cameras, others " +
                            std::to_string(cameras));
    }
    width = sample.target.camera.width;
    // The same 2D joints triangulated with every view alike.
    std::vector<float> projections, points(p.joints_image.begin(), p.joints_image.end());
    for (const data::View* v : views) {
      float m[12];
      projection_matrix(camera_cast<float>(v->camera), m);
      projections.insert(projections.end(), m, m + 12);
    }
    std::vector<float> ones(cameras * J, 1.0f), equal(3 * J);
    std::vector<uint8_t> equal_ok(J);
    cpu::triangulate_joints(1, int(cameras), int(J), projections.data(), points.data(), ones.data(),
                            equal.data(), equal_ok.data());
    const std::vector<double> equal_joints(equal.begin(), equal.end());
    const double* truth = sample.target.pose.joints_world.data();
    sums[kInstants] += 1;
    const auto counted = [&](size_t j) {
      return p.triangulated[j] && equal_ok[j] && (!fusion || p.raw_triangulated[j]);
    };
    for (size_t j = 0; j < J; ++j) {
      if (!counted(j) || !counted(0)) continue;
      sums[kJoints] += 1;
      sums[kError] += joint_distance(p.joints_world.data(), truth, j, false);
      sums[kErrorRelative] += joint_distance(p.joints_world.data(), truth, j, true);
      sums[kErrorEqual] += joint_distance(equal_joints.data(), truth, j, false);
      sums[kErrorRelativeEqual] += joint_distance(equal_joints.data(), truth, j, true);
      sums[kBaseline] += joint_distance(baseline.absolute.data(), truth, j, false);
      // The mean relative pose placed at the true root: the relative distance of that.
      sums[kBaselineRelative] += joint_distance(baseline.relative.data(), truth, j, true);
      if (fusion) {
        sums[kErrorRaw] += joint_distance(p.raw_joints_world.data(), truth, j, false);
        sums[kErrorRelativeRaw] += joint_distance(p.raw_joints_world.data(), truth, j, true);
      }
    }
    for (size_t c = 0; c < cameras; ++c) {
      const std::vector<uint8_t>& visible = views[c]->pose.visible;
      sums[kCameraSums + kSumsPerCamera * c] +=
          double(std::count_if(visible.begin(), visible.end(), [](uint8_t v) { return v != 0; }));
    }
    add_pck(views, p.joints_image, kPckFraction * width, 1, &sums);
    if (fusion) add_pck(views, p.raw_joints_image, kPckFraction * width, 2, &sums);
  }
  if (comm != nullptr && comm->size() > 1) {
    comm->all_reduce(sums.data(), sums.size(), dist::ReduceOp::kSum);
    comm->all_reduce(&width, 1, dist::ReduceOp::kMax);
  }
  PoseEvalReport r;
  r.instants = int(sums[kInstants]);
  r.joints = int(sums[kJoints]);
  const double per_joint = sums[kJoints] > 0 ? 1000.0 / sums[kJoints] : NAN;  // metres to mm
  r.mpjpe_mm = sums[kError] * per_joint;
  r.mpjpe_relative_mm = sums[kErrorRelative] * per_joint;
  r.mpjpe_equal_weights_mm = sums[kErrorEqual] * per_joint;
  r.mpjpe_relative_equal_weights_mm = sums[kErrorRelativeEqual] * per_joint;
  r.baseline_mpjpe_mm = sums[kBaseline] * per_joint;
  r.baseline_mpjpe_relative_mm = sums[kBaselineRelative] * per_joint;
  r.pck_threshold_px = kPckFraction * width;
  double visible = 0, within = 0, within_raw = 0;
  for (size_t c = 0; c < cameras; ++c) {
    const double* camera = &sums[kCameraSums + kSumsPerCamera * c];
    r.pck_per_camera.push_back(camera[0] > 0 ? camera[1] / camera[0] : NAN);
    if (fusion) {
      r.pck_per_camera_without_fusion.push_back(camera[0] > 0 ? camera[2] / camera[0] : NAN);
    }
    visible += camera[0];
    within += camera[1];
    within_raw += camera[2];
  }
  r.pck = visible > 0 ? within / visible : NAN;
  if (fusion) {
    r.cross_view_fusion = true;
    r.mpjpe_without_fusion_mm = sums[kErrorRaw] * per_joint;
    r.mpjpe_relative_without_fusion_mm = sums[kErrorRelativeRaw] * per_joint;
    r.pck_without_fusion = visible > 0 ? within_raw / visible : NAN;
  }
  return r;
}

std::vector<data::TrainingSample> pose_instants(const std::string& data_dir, data::Split split,
                                                int max_instants, int stride, int offset) {
  const data::SceneIndex index = data::read_scene_index(data_dir);
  const size_t total =
      size_t(std::count_if(index.scene.views.begin(), index.scene.views.end(),
                           [&](const data::View& v) { return v.target && v.split == split; }));
  const size_t n = max_instants > 0 ? std::min(total, size_t(max_instants)) : total;
  if (size_t(offset) >= n) return {};
  data::ReaderOptions o;
  o.data_dir = data_dir;
  o.split = split;
  o.shuffle = false;
  o.num_source_views = int(data::kMaxNeighbours);  // every camera, in order
  o.queue_depth = 2;
  o.stride = stride;
  data::PrefetchReader reader(o, {0, uint64_t(offset)});
  std::vector<data::TrainingSample> samples;
  for (size_t i = size_t(offset); i < n; i += size_t(stride)) samples.push_back(reader.next());
  return samples;
}

PoseEvalReport evaluate_pose_run(const TrainConfig& config, const std::string& checkpoint,
                                 data::Split split, int max_instants, dist::Communicator* comm) {
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  if (index.scene.skeleton.empty()) {
    throw InvalidArgument(config.datadir + ": not a pose data set (no skeleton)");
  }
  PoseModel model(config, int(index.scene.skeleton.size()), pose_rig(index.scene));
  const uint64_t step = load_weights(checkpoint, &model.parameters());
  const int rank = comm != nullptr ? comm->rank() : 0, ranks = comm != nullptr ? comm->size() : 1;
  const std::vector<data::TrainingSample> mine =
      pose_instants(config.datadir, split, max_instants, ranks, rank);
  PoseEvalReport report = evaluate_pose(model, mine, mean_training_pose(config.datadir), comm);
  if (report.instants == 0) {
    throw InvalidArgument(config.datadir + ": has no " + data::split_name(split) + " instants");
  }
  report.step = step;
  return report;
}

}  // namespace mvibr::train
