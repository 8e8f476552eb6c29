// The Human3.6M importer (data/human36m.h) on a tiny processed folder written here: subjects S1
// (two actions, one without camera 54138969's rows, and a MySegmentsMat folder) and S9, four
// cameras in a ring with H36M's sizes in small (one a row taller, one two) and one with a real
// lens's distortion, 32 random joints a frame, annot.h5 in h36m-fetch's form and cameras.h5 in
// una-dinosauria's, PNG images with a dot at each of the 17 joints' distorted projections. The
// import must give the calibration's cameras in metres, the cropped intrinsics, labels that are
// the pinhole projections of the world joints, undistorted images whose dots lie on their labels,
// the split by subject and the pose skeleton; bad input must give one line naming its file.
#include "mvibr/data/human36m.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "human36m_fixture.h"
#include "joint_dots.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/shards.h"
#include "mvibr/hdf5/hdf5_file.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

using namespace h36m_fixture;

// The import with every view's pixels read (the import leaves them to Scene::read_rgb).
Scene import_with_pixels(const std::string& source, const Human36mOptions& options) {
  Scene scene = import_human36m(source, options);
  for (size_t i = 0; i < scene.views.size(); ++i) scene.views[i].rgb = scene.read_rgb(i);
  return scene;
}

TEST(Human36m, CamerasInMetresCroppedLabelsArePinholeProjectionsAndDotsLieOnThem) {
  const Processed processed;
  const Scene scene = import_with_pixels(processed.root.string(), with_calibration(processed));
  // S1/Directions-1 and S9/Eating-1, 3 frames x 4 cameras each; Directions-2 lacks a camera.
  ASSERT_EQ(scene.views.size(), size_t(2 * 3 * 4));
  EXPECT_EQ(scene.source_format, "human36m");
  ASSERT_EQ(scene.warnings.size(), 1u);
  EXPECT_EQ(scene.warnings[0],
            "human36m: S1/Directions-2 skipped: no rows of camera 54138969 in annot.h5");
  EXPECT_EQ(scene.skeleton, std::vector<int>(kPoseParents, kPoseParents + kPoseJoints));
  EXPECT_EQ(scene.joint_names[0], "pelvis");
  EXPECT_EQ(scene.joint_names[16], "right_wrist");
  DotTally tally;
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View& view = scene.views[i];
    const int c = int(i % 4);
    const FixtureAction& action = processed.actions[i < 12 ? 0 : 2];
    const long frame = action.frames[(i / 4) % 3];
    const FixtureCamera& fc = processed.cameras[size_t(c)];
    char number[16];
    std::snprintf(number, sizeof number, "%06ld", frame);
    EXPECT_EQ(view.name, action.subject + "/" + action.name + "/" + number + "/" + kCameraIds[c]);
    EXPECT_EQ(view.split, action.subject == "S9" ? Split::kTest : Split::kTrain) << view.name;
    EXPECT_EQ(view.target, c == 0) << view.name;
    EXPECT_DOUBLE_EQ(view.time, double(frame) / 50);
    if (c == 0) {
      EXPECT_EQ(scene.neighbours[i], (std::vector<int>{int(i) + 1, int(i) + 2, int(i) + 3}));
    }
    // The calibration's intrinsics, cropped to 160x160 about the centre (a row off the top of
    // 162, none off 161); R^T and -R^T T / 1000 as the world-to-camera pose.
    const PinholeCamera<double>& camera = view.camera;
    const int crop = (fc.height - 160) / 2;
    EXPECT_EQ(camera.width, kWidth);
    EXPECT_EQ(camera.height, 160);
    EXPECT_DOUBLE_EQ(camera.fx, kFocal[0]);
    EXPECT_DOUBLE_EQ(camera.fy, kFocal[1]);
    EXPECT_DOUBLE_EQ(camera.cx, kCentre[0]);
    EXPECT_DOUBLE_EQ(camera.cy, kCentre[1] - crop) << view.name;
    for (int r = 0; r < 3; ++r) {
      double t = 0;
      for (int k = 0; k < 3; ++k) {
        EXPECT_NEAR(camera.w2c[4 * r + k], fc.r[3 * k + r], 1e-12);
        t -= fc.r[3 * k + r] * fc.t[k] / 1000;
      }
      EXPECT_NEAR(camera.w2c[4 * r + 3], t, 1e-12) << view.name;
    }
    const std::vector<double>& body = processed.joints.at(Processed::key(action, frame));
    for (int j = 0; j < kPoseJoints; ++j) {
      const double* x = &body[size_t(3 * kHuman36mJointIndex[j])];
      for (int k = 0; k < 3; ++k) {
        EXPECT_NEAR(view.pose.joints_world[size_t(3 * j + k)], x[k] / 1000, 1e-9);
      }
      double u, v, du, dv;
      project_pinhole(fc, x, &u, &v);
      project_distorted(fc, x, &du, &dv);
      v -= crop, dv -= crop;
      const double lu = view.pose.joints_image[size_t(2 * j)];
      const double lv = view.pose.joints_image[size_t(2 * j + 1)];
      tally.add_label(std::hypot(lu - u, lv - v));
      const bool inside = u > -0.5 && u < kWidth - 0.5 && v > -0.5 && v < 160 - 0.5;
      EXPECT_EQ(view.pose.visible[size_t(j)], inside) << view.name << " " << j;
      // The dot of joint j in the undistorted, cropped image, where no other dot is near.
      bool alone = true;
      for (int o = 0; o < kPoseJoints; ++o) {
        double ou, ov;
        project_pinhole(fc, &body[size_t(3 * kHuman36mJointIndex[o])], &ou, &ov);
        if (o != j && std::hypot(ou - u, ov - crop - v) < 12) alone = false;
      }
      double cu, cv;
      if (!alone || !dot_centroid(view, lu, lv, &cu, &cv)) continue;
      tally.add_dot(std::hypot(cu - lu, cv - lv), c == kDistortedCamera,
                    std::hypot(du - u, dv - v));
    }
  }
  tally.expect(61, 16);
}

TEST(Human36m, BodyCropsAreSquaresAboutTheJointsAndDotsLieOnTheirLabels) {
  Processed processed;
  Human36mOptions o = with_calibration(processed);
  o.body_crop = 0.25;
  CropTally tally;
  // Every box is larger than 96 pixels and smaller than 320: shrunk, then grown.
  for (const int side : {96, 320}) {
    o.width = side;
    const Scene scene = import_with_pixels(processed.root.string(), o);
    ASSERT_EQ(scene.views.size(), size_t(2 * 3 * 4));
    for (const View& view : scene.views) {
      // "S1/Directions-1/000001/54138969"
      const std::string action_name = view.name.substr(0, view.name.find('/', 3));
      const long frame = std::stol(view.name.substr(action_name.size() + 1, 6));
      const int c =
          int(std::find(kCameraIds, kCameraIds + 4, view.name.substr(view.name.size() - 8)) -
              kCameraIds);
      const std::vector<double>& body =
          processed.joints.at(action_name + "/" + std::to_string(frame));
      const PinholeCamera<double>& camera = view.camera;
      EXPECT_EQ(camera.width, side);
      for (int k = 0; k < 9; ++k) {
        EXPECT_NEAR(camera.w2c[4 * (k / 3) + k % 3],
                    processed.cameras[size_t(c)].r[3 * (k % 3) + k / 3], 1e-12);
      }
      EXPECT_NEAR(camera.fx / camera.fy, kFocal[0] / kFocal[1], 1e-12) << "scaled alike";
      std::vector<Vec3<double>> joints;
      std::vector<bool> whole;
      for (int j = 0; j < kPoseJoints; ++j) {
        const double* x = &body[size_t(3 * kHuman36mJointIndex[j])];
        joints.push_back({x[0] / 1000, x[1] / 1000, x[2] / 1000});
        // A dot the photograph's edge cuts (the box may reach past it) has its centroid moved.
        double du, dv;
        project_distorted(processed.cameras[size_t(c)], x, &du, &dv);
        whole.push_back(du > 7 && dv > 7 && du < kWidth - 8 && dv < kHeights[c] - 8);
      }
      tally.add_view(view, joints, std::vector<bool>(joints.size(), true), whole, o.body_crop,
                     kFocal[0]);
    }
  }
  tally.expect(80, 24);

  // A joint 5 cm in front of camera 0 and a metre aside (labels gone wrong) would make a box of
  // many photographs.
  const FixtureCamera& first = processed.cameras[0];
  double* wrist = &processed.joints.at("S1/Directions-1/2")[3 * 27];
  for (int i = 0; i < 3; ++i)
    wrist[i] = first.t[i] + 1000 * first.r[3 * i] + 50 * first.r[3 * i + 2];
  processed.write_annotations(processed.actions[0], nullptr);
  o.width = 96;
  const std::string huge = error_of([&] { import_with_pixels(processed.root.string(), o); });
  EXPECT_NE(huge.find("S1/Directions-1/000002/"), std::string::npos) << huge;
  EXPECT_NE(huge.find("the joints' box is "), std::string::npos) << huge;
  EXPECT_NE(huge.find(" pixels a side, over 4 times the photograph's (--body_crop)"),
            std::string::npos)
      << huge;

  o.height = 96;
  const std::string error = error_of([&] { import_with_pixels(processed.root.string(), o); });
  EXPECT_EQ(error,
            "human36m: --body_crop needs --width (the side of the square views) and no "
            "--height");
}

TEST(Human36m, PixelsAreReadAsTheShardsAreWrittenAndGiveTheSameShards) {
  const Processed processed;
  Human36mOptions o = with_calibration(processed);
  size_t reads = 0, total = 0;
  o.on_image_read = [&](size_t read, size_t of) { reads = std::max(reads, read), total = of; };
  const Scene lazy = import_human36m(processed.root.string(), o);
  ASSERT_TRUE(lazy.read_rgb);
  for (const View& view : lazy.views) EXPECT_TRUE(view.rgb.empty()) << view.name;
  EXPECT_EQ(reads, 0u) << "nothing is read at import";
  const Scene held = import_with_pixels(processed.root.string(), with_calibration(processed));
  const fs::path lazy_dir = processed.root / "lazy", held_dir = processed.root / "held";
  write_prepared_scene(lazy, lazy_dir.string(), {2, 0, "test"});
  EXPECT_EQ(reads, lazy.views.size()) << "each view read once, as its shard is written";
  EXPECT_EQ(total, lazy.views.size());
  Scene held_only = held;
  held_only.read_rgb = nullptr;
  write_prepared_scene(held_only, held_dir.string(), {2, 0, "test"});
  for (int s = 0; s < 2; ++s) {
    const ShardReader a((lazy_dir / shard_file_name(s, 2)).string());
    const ShardReader b((held_dir / shard_file_name(s, 2)).string());
    ASSERT_EQ(a.n_frames(), b.n_frames());
    std::vector<uint8_t> pixels_a(size_t(a.width()) * size_t(a.height()) * 3), pixels_b = pixels_a;
    for (int f = 0; f < a.n_frames(); ++f) {
      a.read_frame(f, pixels_a.data());
      b.read_frame(f, pixels_b.data());
      EXPECT_EQ(pixels_a, pixels_b) << "shard " << s << " frame " << f;
    }
  }
  // An image that changed size after the import fails as its shard is written, naming it.
  const fs::path image = processed.image(processed.actions[2], 1, 65);
  const std::vector<uint8_t> small(size_t(100) * 80 * 3, 9);
  write_png(image.string(), 100, 80, 3, small.data());
  const std::string error = error_of([&] {
    write_prepared_scene(lazy, (processed.root / "bad").string(), {2, 0, ""});
  });
  EXPECT_NE(error.find("img_000065.jpg: 100x80 pixels, but the first image of camera 55011271 is "
                       "160x160"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(processed.root / "bad" / shard_file_name(0, 2)))
      << "no shard is left half-written";
}

TEST(Human36m, MetadataXmlGivesTheCamerasOfCamerasH5) {
  const Processed processed;
  const Scene from_h5 = import_with_pixels(processed.root.string(), with_calibration(processed));
  Human36mOptions o;
  o.calibration = (processed.root / "metadata.xml").string();
  processed.write_metadata_xml(o.calibration);
  const Scene from_xml = import_with_pixels(processed.root.string(), o);
  ASSERT_EQ(from_xml.views.size(), from_h5.views.size());
  for (size_t i = 0; i < from_h5.views.size(); ++i) {
    const View &a = from_h5.views[i], &b = from_xml.views[i];
    EXPECT_EQ(a.name, b.name);
    for (int k = 0; k < 12; ++k) EXPECT_NEAR(a.camera.w2c[k], b.camera.w2c[k], 1e-12) << a.name;
    EXPECT_DOUBLE_EQ(a.camera.cy, b.camera.cy);
    for (size_t k = 0; k < a.pose.joints_image.size(); ++k) {
      EXPECT_NEAR(a.pose.joints_image[k], b.pose.joints_image[k], 1e-4) << a.name;
    }
    EXPECT_EQ(a.rgb, b.rgb) << a.name;
  }
  processed.write_metadata_xml(o.calibration, 299);
  const std::string error = error_of([&] { import_with_pixels(processed.root.string(), o); });
  EXPECT_NE(error.find("metadata.xml: <w0> must hold 300 numbers and <dbcameras><index2id> 4 "
                       "ids; they hold 299 and 4"),
            std::string::npos)
      << error;
}

TEST(Human36m, OptionsChooseCamerasFramesSubjectsAndSize) {
  const Processed processed;
  Human36mOptions o = with_calibration(processed);
  o.cameras = {"58860488", "55011271"};
  o.frame_step = 2;  // frames 1 and 3; 1 and 129
  o.test_subjects = std::vector<std::string>{};
  o.width = 80;
  Scene scene = import_with_pixels(processed.root.string(), o);
  // Directions-2 has both cameras now: frames 1 of its 1 and 2.
  ASSERT_EQ(scene.views.size(), size_t(2 * 2 + 1 * 2 + 2 * 2));
  EXPECT_TRUE(scene.warnings.empty());
  EXPECT_EQ(scene.views[0].name, "S1/Directions-1/000001/58860488");
  EXPECT_EQ(scene.views[3].name, "S1/Directions-1/000003/55011271");
  EXPECT_EQ(scene.views[4].name, "S1/Directions-2/000001/58860488");
  EXPECT_EQ(scene.views[9].name, "S9/Eating-1/000129/55011271");
  EXPECT_EQ(scene.views[9].split, Split::kTrain);
  const PinholeCamera<double>& half = scene.views[0].camera;
  EXPECT_EQ(half.height, 80);
  EXPECT_DOUBLE_EQ(half.fx, kFocal[0] / 2);
  EXPECT_DOUBLE_EQ(half.cx, (kCentre[0] + 0.5) / 2 - 0.5);
  double u, v;
  project_pinhole(processed.cameras[2], &processed.joints.at("S1/Directions-1/1")[3 * 15], &u, &v);
  EXPECT_NEAR(scene.views[0].pose.joints_image[2 * 10], (u + 0.5) / 2 - 0.5, 1e-3) << "head";

  o = with_calibration(processed);
  o.max_frames = 1;
  scene = import_with_pixels((processed.root / "S9").string(), o);
  ASSERT_EQ(scene.views.size(), size_t(4)) << "one subject folder, one frame";
  EXPECT_EQ(scene.views[0].name, "S9/Eating-1/000001/54138969");
  EXPECT_EQ(scene.views[0].split, Split::kTrain) << "S9 alone: nothing held out";

  // S9's damaged actions are imported unless asked not to be.
  fs::copy(processed.root / "S9" / "Eating-1", processed.root / "S9" / "Waiting-1",
           fs::copy_options::recursive);
  scene = import_with_pixels((processed.root / "S9").string(), o);
  ASSERT_EQ(scene.views.size(), size_t(8));
  EXPECT_EQ(scene.views[4].name, "S9/Waiting-1/000001/54138969");
  EXPECT_TRUE(scene.warnings.empty());
  o.skip_damaged_actions = true;
  scene = import_with_pixels((processed.root / "S9").string(), o);
  ASSERT_EQ(scene.views.size(), size_t(4));
  ASSERT_EQ(scene.warnings.size(), 1u);
  EXPECT_EQ(scene.warnings[0],
            "human36m: S9/Waiting-1 skipped: its 3D labels are damaged (--skip_damaged_actions)");
  fs::remove_all(processed.root / "S9" / "Waiting-1");
  o.skip_damaged_actions = false;

  // pose/2d that the calibration does not explain is reported; the labels stay the calibration's.
  const std::vector<float> labels = scene.views[0].pose.joints_image;
  processed.write_annotations(processed.actions[2], [](Annotations* rows) {
    rows->pose_2d[2 * 3 + 1] += 3;  // row 0, joint 3 (right_ankle), v
  });
  scene = import_with_pixels((processed.root / "S9").string(), o);
  ASSERT_EQ(scene.warnings.size(), 1u);
  EXPECT_EQ(scene.warnings[0],
            "human36m: annot.h5's pose/2d lies up to 3.0 px from the calibration's projection of "
            "the joints; the labels are the calibration's");
  EXPECT_EQ(scene.views[0].pose.joints_image, labels);
}

TEST(Human36m, BadInputIsOneLineNamingTheFile) {
  const Processed processed;
  const std::string root = processed.root.string();
  const auto expect = [&](const Human36mOptions& o, const std::string& needle) {
    const std::string error = error_of([&] { import_with_pixels(root, o); });
    EXPECT_NE(error.find(needle), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  };
  const Human36mOptions good = with_calibration(processed);
  Human36mOptions o;
  expect(o, "human36m: needs --calibration (metadata.xml or cameras.h5)");
  o = good;
  o.cameras = {"54138969", "12345678"};
  expect(o, "cameras.h5: S1 has no camera 12345678 (--cameras)");
  o.cameras = {"54138969"};
  expect(o, "--cameras names 1 camera; a pose sample needs 2");
  o.cameras = {"54138969", "55011271", "54138969"};
  expect(o, "--cameras names 54138969 twice");
  o = good;
  o.test_subjects = std::vector<std::string>{"S1", "S9"};
  expect(o, "every subject is a test subject (--test_subjects); none is left to train on");
  o = good;
  o.width = 100, o.height = 90;
  expect(o, "--width 100 --height 90: not the aspect of the 160x160 images (100x100 keeps it)");

  // Each damage below is undone by the next, in order.
  const FixtureAction& eating = processed.actions[2];
  processed.write_annotations(eating, [](Annotations* rows) {
    rows->joints = 31;
    rows->pose_3d.resize(rows->pose_3d.size() / 32 * 31);
  });
  expect(good,
         "S9/Eating-1/annot.h5: 'pose/3d' must be 12 x 32 x 3 (H36M's 32 joints), it has "
         "31 joints");
  processed.write_annotations(eating, [](Annotations* rows) { rows->pose_3d[40] = NAN; });
  expect(good,
         "S9/Eating-1/annot.h5: row 0: pose/3d joint 13 is not finite or over a kilometre "
         "away");
  processed.write_annotations(eating, [](Annotations* rows) { rows->frames[5] = 0; });
  expect(good, "S9/Eating-1/annot.h5: row 5: 'frame' must be a whole number from 1");
  processed.write_annotations(eating, nullptr);

  std::vector<FixtureCamera> moved = processed.cameras;
  moved[1].t[2] += 40;  // 4 cm: its poses no longer meet the others'
  Processed::write_calibration(processed.calibration, {{"S1", processed.cameras}, {"S9", moved}});
  expect(good,
         "S9/Eating-1/annot.h5: frame 000001: camera 55011271's pose/3d, taken to the world "
         "by " +
             processed.calibration.string() + ", lies ");
  std::vector<FixtureCamera> three(processed.cameras.begin(), processed.cameras.begin() + 3);
  Processed::write_calibration(processed.calibration, {{"S1", processed.cameras}, {"S9", three}});
  expect(good, "cameras.h5: S9 has 3 cameras, S1 4; choose the same ones with --cameras");
  Processed::write_calibration(processed.calibration, {{"S1", processed.cameras}});
  expect(good, "cameras.h5: no group 'subject9' (the cameras of S9)");
  Processed::write_calibration(processed.calibration,
                               {{"S1", processed.cameras}, {"S9", processed.cameras}});

  const fs::path image = processed.image(eating, 3, 65);
  fs::rename(image, image.string() + ".away");
  expect(good,
         "S9/Eating-1/imageSequence/60457274/img_000065.jpg: missing (annot.h5 has this "
         "frame)");
  const std::vector<uint8_t> small(size_t(100) * 80 * 3, 9);
  write_png(image.string(), 100, 80, 3, small.data());
  expect(good, "img_000065.jpg: 100x80 pixels, but the first image of camera 60457274 is 160x161");
  fs::rename(image.string() + ".away", image);

  EXPECT_NO_THROW(import_with_pixels(root, good)) << "every damage was undone";
  const fs::path empty = processed.root / "empty";
  fs::create_directories(empty);
  const std::string error = error_of([&] { import_with_pixels(empty.string(), good); });
  EXPECT_NE(error.find("empty: not a Human3.6M processed folder (no subject folders S1, S5, ...)"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace mvibr::data
