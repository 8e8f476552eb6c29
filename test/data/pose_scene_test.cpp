// The built-in pose data set (data/pose_scene.h) and its shards: labels are the skeleton's joints
// projected through each camera, bodies keep their bone lengths through a sequence, pillars only
// ever hide joints, splits go by sequence, and a training sample is one instant seen by every
// camera in order; labels that disagree with the skeleton are clear errors.
#include "mvibr/data/pose_scene.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "mvibr/core/error.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

PoseSceneOptions small_options() {
  PoseSceneOptions o;
  o.width = 40;
  o.height = 32;
  o.n_cameras = 3;
  o.n_sequences = 3;
  o.n_frames = 6;
  o.n_test_sequences = 1;
  o.samples_per_side = 1;
  o.seed = 11;
  return o;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("mvibr-pose-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  static inline int counter = 0;
};

Vec3<double> joint(const View& v, int j) {
  const double* x = &v.pose.joints_world[size_t(3 * j)];
  return {x[0], x[1], x[2]};
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(PoseScene, LabelsAreTheSkeletonSeenThroughEachCamera) {
  const PoseSceneOptions o = small_options();
  const Scene scene = make_pose_scene(o);
  ASSERT_EQ(scene.views.size(), size_t(o.n_sequences * o.n_frames * o.n_cameras));
  ASSERT_EQ(scene.skeleton.size(), size_t(kPoseJoints));
  EXPECT_EQ(scene.joint_names[10], "head");
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View& v = scene.views[i];
    const int camera = int(i) % o.n_cameras;
    const int first = int(i) - camera;  // the instant's camera 0
    const int sequence = int(i) / (o.n_frames * o.n_cameras);
    EXPECT_EQ(v.target, camera == 0) << v.name;
    EXPECT_EQ(v.split, sequence == o.n_sequences - 1 ? Split::kTest : Split::kTrain) << v.name;
    if (camera == 0) {
      EXPECT_EQ(scene.neighbours[i], (std::vector<int>{first + 1, first + 2})) << v.name;
    }
    EXPECT_EQ(v.pose.joints_world, scene.views[size_t(first)].pose.joints_world) << v.name;
    for (int j = 0; j < kPoseJoints; ++j) {
      const Vec3<double> c = transform_point(v.camera.w2c, joint(v, j));
      ASSERT_GT(c.z, 0);
      const double u = v.camera.fx * c.x / c.z + v.camera.cx;
      const double w = v.camera.fy * c.y / c.z + v.camera.cy;
      EXPECT_NEAR(v.pose.joints_image[size_t(2 * j)], u, 1e-4 * (1 + std::abs(u)));
      EXPECT_NEAR(v.pose.joints_image[size_t(2 * j + 1)], w, 1e-4 * (1 + std::abs(w)));
      const bool inside = u > -0.5 && u < o.width - 0.5 && w > -0.5 && w < o.height - 0.5;
      if (!inside) {
        EXPECT_EQ(v.pose.visible[size_t(j)], 0) << v.name << " joint " << j;
      }
    }
  }
  // Every bone keeps its length through a sequence; bodies differ between sequences.
  const auto bone = [&](const View& v, int j) {
    return norm(joint(v, j) - joint(v, kPoseParents[j]));
  };
  for (int s = 0; s < o.n_sequences; ++s) {
    const View& start = scene.views[size_t(s * o.n_frames * o.n_cameras)];
    for (int f = 1; f < o.n_frames; ++f) {
      const View& v = scene.views[size_t((s * o.n_frames + f) * o.n_cameras)];
      EXPECT_NE(v.pose.joints_world, start.pose.joints_world) << "the body moves";
      for (int j = 1; j < kPoseJoints; ++j) EXPECT_NEAR(bone(v, j), bone(start, j), 1e-12);
    }
  }
  const View& other = scene.views[size_t(o.n_frames * o.n_cameras)];
  EXPECT_GT(std::abs(bone(other, 2) - bone(scene.views[0], 2)), 1e-4);
}

TEST(PoseScene, PillarsOnlyHideJointsAndTheSeedDecidesEverything) {
  PoseSceneOptions o = small_options();
  o.n_pillars = 0;
  const Scene open = make_pose_scene(o);
  o.n_pillars = 6;
  const Scene occluded = make_pose_scene(o);
  const Scene again = make_pose_scene(o);
  size_t seen_open = 0, seen_occluded = 0, joints = 0;
  for (size_t i = 0; i < open.views.size(); ++i) {
    const PoseLabels &a = open.views[i].pose, &b = occluded.views[i].pose;
    ASSERT_EQ(a.joints_world, b.joints_world) << "pillars do not change the motion";
    for (int j = 0; j < kPoseJoints; ++j) {
      EXPECT_LE(b.visible[size_t(j)], a.visible[size_t(j)]) << open.views[i].name << " " << j;
      seen_open += a.visible[size_t(j)];
      seen_occluded += b.visible[size_t(j)];
      ++joints;
    }
    EXPECT_EQ(occluded.views[i].rgb, again.views[i].rgb);
    EXPECT_EQ(occluded.views[i].pose.visible, again.views[i].pose.visible);
  }
  // Bodies hide some of their own joints; pillars hide more.
  EXPECT_LT(seen_open, joints);
  EXPECT_GT(seen_open, joints / 2);
  EXPECT_LT(seen_occluded, seen_open);
  o.seed = 12;
  EXPECT_NE(make_pose_scene(o).views[0].rgb, occluded.views[0].rgb);
}

TEST(PoseScene, ShardsCarryTheLabelsAndASampleIsOneInstantFromEveryCamera) {
  const PoseSceneOptions o = small_options();
  const Scene scene = make_pose_scene(o);
  TempDir dir;
  const PrepReport report = write_prepared_scene(scene, dir.path.string(), {2, 0, "test"});
  EXPECT_DOUBLE_EQ(report.duplication_factor, 1.0) << "every camera's frame is stored once";
  const SceneIndex index = read_scene_index(dir.path.string());
  EXPECT_EQ(index.scene.skeleton, scene.skeleton);
  EXPECT_EQ(index.scene.joint_names, scene.joint_names);
  for (size_t i = 0; i < scene.views.size(); ++i) {
    EXPECT_EQ(index.scene.views[i].target, scene.views[i].target);
  }
  int targets = 0;
  for (int s = 0; s < 2; ++s) {
    const ShardReader shard((dir.path / shard_file_name(s, 2)).string());
    EXPECT_EQ(shard.skeleton(), scene.skeleton);
    targets += shard.n_targets();
    for (int f = 0; f < shard.n_frames(); ++f) {
      const View& stored = shard.frame(f);
      const View& original = scene.views[size_t(shard.frame_view(f))];
      EXPECT_EQ(stored.pose.joints_world, original.pose.joints_world);
      EXPECT_EQ(stored.pose.joints_image, original.pose.joints_image);
      EXPECT_EQ(stored.pose.visible, original.pose.visible);
    }
  }
  EXPECT_EQ(targets, o.n_sequences * o.n_frames);

  ReaderOptions options;
  options.data_dir = dir.path.string();
  options.num_source_views = o.n_cameras - 1;
  options.world_size = 2;
  for (options.rank = 0; options.rank < 2; ++options.rank) {
    PrefetchReader reader(options);
    EXPECT_EQ(reader.samples_per_epoch(), size_t((o.n_sequences - 1) * o.n_frames / 2));
    for (size_t k = 0; k < reader.samples_per_epoch(); ++k) {
      const TrainingSample sample = reader.next();
      EXPECT_EQ(sample.target_view % o.n_cameras, 0);
      EXPECT_EQ(sample.source_views,
                (std::vector<int>{sample.target_view + 1, sample.target_view + 2}));
      EXPECT_EQ(sample.sources[1].pose.joints_world, sample.target.pose.joints_world);
      EXPECT_EQ(sample.sources[1].rgb, scene.views[size_t(sample.target_view + 2)].rgb);
    }
  }
}

TEST(PoseScene, LabelsThatDisagreeWithTheSkeletonAreClearErrors) {
  PoseSceneOptions o = small_options();
  o.n_sequences = 2;
  o.n_frames = 1;
  const Scene good = make_pose_scene(o);
  Scene scene = good;
  scene.views[4].pose.joints_world.resize(3 * 16);
  EXPECT_NE(error_of([&] { validate_scene(scene); })
                .find("view 4 (synthetic_pose/s01/f000/c1): "
                      "has pose labels of 16 3D, 17 2D"),
            std::string::npos)
      << error_of([&] { validate_scene(scene); });
  scene = good;
  scene.views[2].pose.joints_image[5] = NAN;
  EXPECT_NE(error_of([&] { validate_scene(scene); }).find("non-finite 2D joint"),
            std::string::npos);
  scene = good;
  scene.skeleton[3] = 5;
  EXPECT_NE(error_of([&] { validate_scene(scene); }).find("skeleton joint 3 has parent 5"),
            std::string::npos);
  scene = good;
  scene.neighbours[0] = {1};  // camera 2 of the first instant is now nobody's source
  EXPECT_NE(error_of([&] { validate_scene(scene); })
                .find("view 2 (synthetic_pose/s00/f000/c2): "
                      "is no target and no target's source"),
            std::string::npos);
  o.n_cameras = 1;
  EXPECT_NE(error_of([&] { make_pose_scene(o); }).find("cameras must be in [2, 64], got 1"),
            std::string::npos);

  // A shard whose labels are gone, or cut short, fails naming the file.
  TempDir dir;
  write_prepared_scene(good, dir.path.string(), {1, 0, ""});
  const fs::path shard = dir.path / shard_file_name(0, 1);
  {
    const hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(file, "pose/visible", H5P_DEFAULT);
    const hsize_t shape[2] = {6, 16};
    const hid_t space = H5Screate_simple(2, shape, nullptr);
    const hid_t dataset = H5Dcreate2(file, "pose/visible", H5T_NATIVE_SCHAR, space, H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(file);
  }
  const std::string short_labels = error_of([&] { ShardReader{shard.string()}; });
  EXPECT_NE(short_labels.find(shard.string()), std::string::npos) << short_labels;
  EXPECT_NE(short_labels.find("pose/visible"), std::string::npos) << short_labels;
  {
    const hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(file, "pose", H5P_DEFAULT);
    H5Fclose(file);
  }
  EXPECT_NE(
      error_of([&] { ShardReader{shard.string()}; }).find("has a skeleton but no pose labels"),
      std::string::npos);
}

}  // namespace
}  // namespace mvibr::data
