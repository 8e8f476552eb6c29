// The CMU Panoptic importer (data/panoptic.h) on a tiny capture written here: two sequences,
// four hd cameras in a ring (one with a real lens's distortion) and a vga camera, a random
// 19-joint body a frame, PNG images with a dot at each joint's distorted projection (the
// toolbox's projectPoints, written out below). The import must give the calibration's cameras in
// metres, labels that are the pinhole projections of the joints, undistorted images whose dots lie
// on their labels, the split by sequence and coco19's skeleton; bad input must give one line
// naming its file.
#include "mvibr/data/panoptic.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "joint_dots.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/geom/camera.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kWidth = 320, kHeight = 240;
constexpr double kFx = 230, kFy = 231.5, kCx = 161.3, kCy = 118.2;
const char* const kSequenceNames[2] = {"160422_a", "160906_b"};
const long kFrames[4] = {100, 101, 102, 103};  // 101 has no body
constexpr int kCameras = 4, kDistortedCamera = 2;

struct FixtureCamera {
  std::string name;
  double r[9], t[3];    // x_camera = R x_world + t, centimetres
  double dist_coef[5];  // k1, k2, p1, p2, k3
};

// The toolbox's projectPoints (panutils.py) of one point in centimetres.
void project_distorted(const FixtureCamera& c, const double x[3], double* u, double* v) {
  double p[3];
  for (int i = 0; i < 3; ++i)
    p[i] = c.r[3 * i] * x[0] + c.r[3 * i + 1] * x[1] + c.r[3 * i + 2] * x[2] + c.t[i];
  const double a = p[0] / p[2], b = p[1] / p[2], r = a * a + b * b;
  const double* k = c.dist_coef;
  const double radial = 1 + k[0] * r + k[1] * r * r + k[4] * r * r * r;
  const double ad = a * radial + 2 * k[2] * a * b + k[3] * (r + 2 * a * a);
  const double bd = b * radial + 2 * k[3] * a * b + k[2] * (r + 2 * b * b);
  *u = kFx * ad + kCx;
  *v = kFy * bd + kCy;
}

void project_pinhole(const FixtureCamera& c, const double x[3], double* u, double* v) {
  FixtureCamera ideal = c;
  for (double& k : ideal.dist_coef) k = 0;
  project_distorted(ideal, x, u, v);
}

std::vector<FixtureCamera> ring_cameras() {
  std::vector<FixtureCamera> cameras;
  for (int c = 0; c < kCameras; ++c) {
    const double a = 2 * M_PI * c / kCameras + 0.3;
    const PinholeCamera<double> look =
        look_at_camera<double>({2.6 * std::cos(a), 2.6 * std::sin(a), 0.8 + 0.5 * (c % 2)},
                               {0.1 * c - 0.15, 0.05, 1.0}, {0, 0, 1}, kFx, kWidth, kHeight);
    FixtureCamera f{"00_0" + std::to_string(c), {}, {}, {0, 0, 0, 0, 0}};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) f.r[3 * i + j] = look.w2c[4 * i + j];
      f.t[i] = 100 * look.w2c[4 * i + 3];
    }
    if (c == kDistortedCamera) {
      // A Panoptic hd lens's order of magnitude: barrel distortion, a little tangential.
      const double real[5] = {-0.28, 0.12, 0.0012, -0.0008, -0.02};
      std::copy(real, real + 5, f.dist_coef);
    }
    cameras.push_back(f);
  }
  return cameras;
}

json camera_json(const FixtureCamera& c) {
  return {{"name", c.name},
          {"type", "hd"},
          {"resolution", {kWidth, kHeight}},
          {"K", {{kFx, 0, kCx}, {0, kFy, kCy}, {0, 0, 1}}},
          {"distCoef", std::vector<double>(c.dist_coef, c.dist_coef + 5)},
          {"R", {{c.r[0], c.r[1], c.r[2]}, {c.r[3], c.r[4], c.r[5]}, {c.r[6], c.r[7], c.r[8]}}},
          {"t", {json::array({c.t[0]}), json::array({c.t[1]}), json::array({c.t[2]})}}};
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string numbered(long frame) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%08ld", frame);
  return digits;
}

// The capture on disk, and what was written into it.
struct Capture {
  fs::path root =
      fs::temp_directory_path() / ("mvibr-panoptic-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::vector<FixtureCamera> cameras = ring_cameras();
  std::map<std::string, std::vector<double>> joints19;  // "<sequence>/<frame>": centimetres

  Capture() {
    fs::remove_all(root);
    std::mt19937_64 random(7);
    std::uniform_real_distribution<double> unit(0, 1);
    for (const char* sequence : kSequenceNames) {
      const fs::path folder = root / sequence;
      json calibration = {{"calibDataSource", "mvibr test"}, {"cameras", json::array()}};
      for (const FixtureCamera& c : cameras) calibration["cameras"].push_back(camera_json(c));
      calibration["cameras"].push_back({{"name", "01_01"}, {"type", "vga"}, {"panel", 1}});
      write_text(folder / ("calibration_" + std::string(sequence) + ".json"), calibration.dump());
      for (const long frame : kFrames) {
        json bodies = json::array();
        std::vector<double> body;
        if (frame != 101) {
          for (int j = 0; j < kPanopticJoints; ++j) {
            body.push_back(110 * unit(random) - 55);
            body.push_back(110 * unit(random) - 55);
            body.push_back(10 + 180 * unit(random));
            body.push_back(frame == 100 && j == 5 ? 0.05 : 0.3 + 0.6 * unit(random));
          }
          joints19[std::string(sequence) + "/" + std::to_string(frame)] = body;
          bodies.push_back({{"id", 0}, {"joints19", body}});
        }
        write_text(folder / "hdPose3d_stage1_coco19" / ("body3DScene_" + numbered(frame) + ".json"),
                   json{{"version", 0.7}, {"univTime", 1.0}, {"bodies", bodies}}.dump());
        for (const FixtureCamera& c : cameras) {
          write_image(folder / "hdImgs" / c.name / (c.name + "_" + numbered(frame) + ".png"), c,
                      body);
        }
      }
    }
  }
  ~Capture() { fs::remove_all(root); }

  fs::path body_file(int sequence, long frame) const {
    return root / kSequenceNames[sequence] / "hdPose3d_stage1_coco19" /
           ("body3DScene_" + numbered(frame) + ".json");
  }
  fs::path image_file(int sequence, int camera, long frame) const {
    const std::string& name = cameras[size_t(camera)].name;
    return root / kSequenceNames[sequence] / "hdImgs" / name /
           (name + "_" + numbered(frame) + ".png");
  }

  // Dots at the distorted projections of the joints.
  static void write_image(const fs::path& path, const FixtureCamera& c,
                          const std::vector<double>& body) {
    std::vector<double> points;
    for (size_t j = 0; 4 * j < body.size(); ++j) {
      double u, v;
      project_distorted(c, &body[4 * j], &u, &v);
      points.insert(points.end(), {u, v});
    }
    fs::create_directories(path.parent_path());
    write_png(path.string(), kWidth, kHeight, 3, draw_dots(kWidth, kHeight, points).data());
  }
};

// The import with every view's pixels read (the import leaves them to Scene::read_rgb).
Scene import_with_pixels(const std::string& source, const PanopticOptions& options) {
  Scene scene = import_panoptic(source, options);
  for (size_t i = 0; i < scene.views.size(); ++i) scene.views[i].rgb = scene.read_rgb(i);
  return scene;
}

TEST(Panoptic, CamerasInMetresLabelsArePinholeProjectionsAndDotsLieOnThem) {
  const Capture capture;
  const Scene lazy = import_panoptic(capture.root.string(), {});
  ASSERT_TRUE(lazy.read_rgb) << "the frames are read as the shards are written";
  for (const View& view : lazy.views) EXPECT_TRUE(view.rgb.empty()) << view.name;
  const Scene scene = import_with_pixels(capture.root.string(), {});
  // 2 sequences x 3 frames with a body x 4 hd cameras; the vga camera is not imported.
  ASSERT_EQ(scene.views.size(), size_t(2 * 3 * kCameras));
  EXPECT_EQ(scene.source_format, "panoptic");
  ASSERT_EQ(scene.warnings.size(), 1u);
  EXPECT_EQ(scene.warnings[0], "panoptic: 2 of 8 frames read had no body and were skipped");
  // coco19, BodyCenter first; the rest in Panoptic's order.
  ASSERT_EQ(scene.skeleton,
            (std::vector<int>{-1, 0, 1, 1, 3, 4, 0, 6, 7, 1, 9, 10, 0, 12, 13, 2, 15, 2, 17}));
  EXPECT_EQ(scene.joint_names[0], "BodyCenter");
  EXPECT_EQ(scene.joint_names[1], "Neck");
  EXPECT_EQ(scene.joint_names[2], "Nose");
  EXPECT_EQ(scene.joint_names[3], "lShoulder");
  EXPECT_EQ(scene.joint_names[18], "rEar");
  DotTally tally;
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View& view = scene.views[i];
    const int c = int(i % kCameras), s = int(i / (3 * kCameras));
    const long frame = kFrames[(i / kCameras) % 3 == 0 ? 0 : (i / kCameras) % 3 + 1];
    const FixtureCamera& fc = capture.cameras[size_t(c)];
    const std::string key = std::string(kSequenceNames[s]) + "/" + std::to_string(frame);
    EXPECT_EQ(view.name, std::string(kSequenceNames[s]) + "/" + numbered(frame) + "/" + fc.name);
    EXPECT_EQ(view.split, s == 1 ? Split::kTest : Split::kTrain) << view.name;
    EXPECT_EQ(view.target, c == 0) << view.name;
    if (c == 0) {
      EXPECT_EQ(scene.neighbours[i], (std::vector<int>{int(i) + 1, int(i) + 2, int(i) + 3}));
    }
    // The calibration's K, and R and t / 100 as the world-to-camera pose.
    const PinholeCamera<double>& camera = view.camera;
    EXPECT_EQ(camera.width, kWidth);
    EXPECT_DOUBLE_EQ(camera.fx, kFx);
    EXPECT_DOUBLE_EQ(camera.fy, kFy);
    EXPECT_DOUBLE_EQ(camera.cx, kCx);
    EXPECT_DOUBLE_EQ(camera.cy, kCy);
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(camera.w2c[4 * r + k], fc.r[3 * r + k], 1e-12);
      EXPECT_NEAR(camera.w2c[4 * r + 3], fc.t[r] / 100, 1e-12) << view.name;
    }
    const std::vector<double>& body = capture.joints19.at(key);
    for (int j = 0; j < kPanopticJoints; ++j) {
      const int p = j == 0 ? 2 : (j <= 2 ? j - 1 : j);  // Panoptic's index of mvibr's joint j
      const double* x = &body[size_t(4 * p)];
      for (int k = 0; k < 3; ++k) {
        EXPECT_NEAR(view.pose.joints_world[size_t(3 * j + k)], x[k] / 100, 1e-12);
      }
      double u, v, du, dv;
      project_pinhole(fc, x, &u, &v);
      project_distorted(fc, x, &du, &dv);
      const double lu = view.pose.joints_image[size_t(2 * j)];
      const double lv = view.pose.joints_image[size_t(2 * j + 1)];
      tally.add_label(std::hypot(lu - u, lv - v));
      const bool inside = u > -0.5 && u < kWidth - 0.5 && v > -0.5 && v < kHeight - 0.5;
      EXPECT_EQ(view.pose.visible[size_t(j)], inside && x[3] > 0.1) << view.name << " " << j;
      // The dot of joint j in the undistorted image, where no other dot is near.
      bool alone = true;
      for (int o = 0; o < kPanopticJoints; ++o) {
        double ou, ov;
        project_pinhole(fc, &body[size_t(4 * o)], &ou, &ov);
        if (o != p && std::hypot(ou - u, ov - v) < 12) alone = false;
      }
      double cu, cv;
      if (!alone || !dot_centroid(view, lu, lv, &cu, &cv)) continue;
      tally.add_dot(std::hypot(cu - lu, cv - lv), c == kDistortedCamera,
                    std::hypot(du - u, dv - v));
    }
  }
  tally.expect(61, 16);
}

TEST(Panoptic, BodyCropsAreSquaresAboutTheConfidentJointsAndDotsLieOnTheirLabels) {
  Capture capture;
  // Joint 5 of frame 100 (confidence 0.05) moved far out to the side: the crop leaves it out.
  std::vector<double>& body100 = capture.joints19.at(std::string(kSequenceNames[0]) + "/100");
  body100[4 * 5] += 150;
  nlohmann::json file = nlohmann::json::parse(std::ifstream(capture.body_file(0, 100)));
  file["bodies"][0]["joints19"] = body100;
  write_text(capture.body_file(0, 100), file.dump());
  for (int c = 0; c < kCameras; ++c) {
    Capture::write_image(capture.image_file(0, c, 100), capture.cameras[size_t(c)], body100);
  }
  PanopticOptions o;
  o.body_crop = 0.25;
  std::vector<int> reads;
  o.on_image_read = [&](size_t read, size_t total) {
    EXPECT_EQ(total, size_t(2 * 3 * kCameras));
    reads.push_back(int(read));
  };
  CropTally tally;
  // Every box is larger than 96 pixels and smaller than 480: shrunk, then grown.
  for (const int side : {96, 480}) {
    o.width = side;
    reads.clear();
    const Scene scene = import_with_pixels(capture.root.string(), o);
    ASSERT_EQ(scene.views.size(), size_t(2 * 3 * kCameras));
    ASSERT_EQ(reads.size(), scene.views.size()) << "one progress call a view";
    EXPECT_EQ(reads.back(), int(scene.views.size()));
    for (const View& view : scene.views) {
      // "160422_a/00000100/00_02"
      const std::string sequence = view.name.substr(0, 8);
      const long frame = std::stol(view.name.substr(9, 8));
      const int c = view.name.back() - '0';
      const FixtureCamera& fc = capture.cameras[size_t(c)];
      EXPECT_EQ(view.camera.width, side);
      for (int k = 0; k < 9; ++k) EXPECT_NEAR(view.camera.w2c[4 * (k / 3) + k % 3], fc.r[k], 1e-12);
      EXPECT_NEAR(view.camera.fx / view.camera.fy, kFx / kFy, 1e-12) << "scaled alike";
      const std::vector<double>& body = capture.joints19.at(sequence + "/" + std::to_string(frame));
      std::vector<Vec3<double>> joints;
      std::vector<bool> boxed, whole;
      for (int j = 0; j < kPanopticJoints; ++j) {
        const double* x = &body[size_t(4 * kPanopticJointOrder[j])];
        joints.push_back({x[0] / 100, x[1] / 100, x[2] / 100});
        boxed.push_back(x[3] > 0.1);
        double du, dv;
        project_distorted(fc, x, &du, &dv);
        whole.push_back(du > 7 && dv > 7 && du < kWidth - 8 && dv < kHeight - 8);
        EXPECT_EQ(view.pose.visible[size_t(j)] != 0,
                  x[3] > 0.1 && view.pose.joints_image[size_t(2 * j)] > -0.5 &&
                      view.pose.joints_image[size_t(2 * j)] < side - 0.5 &&
                      view.pose.joints_image[size_t(2 * j + 1)] > -0.5 &&
                      view.pose.joints_image[size_t(2 * j + 1)] < side - 0.5)
            << view.name << " " << j;
      }
      tally.add_view(view, joints, boxed, whole, o.body_crop, kFx);
    }
  }
  tally.expect(60, 24);

  // A body with no confident joint has nothing to crop about.
  for (size_t j = 0; j < kPanopticJoints; ++j) file["bodies"][0]["joints19"][4 * j + 3] = 0.05;
  write_text(capture.body_file(0, 100), file.dump());
  const std::string none = error_of([&] { import_panoptic(capture.root.string(), o); });
  EXPECT_NE(none.find(capture.body_file(0, 100).string() +
                      ": the body has no joint of confidence above 0.1 to crop about"),
            std::string::npos)
      << none;
  o.height = 96;
  EXPECT_EQ(error_of([&] { import_panoptic(capture.root.string(), o); }),
            "panoptic: --body_crop needs --width (the side of the square views) and no --height");
  o = {};
  o.body_crop = -1;
  EXPECT_NE(
      error_of([&] { import_panoptic(capture.root.string(), o); }).find("--body_crop in [0, 10]"),
      std::string::npos);
}

TEST(Panoptic, OptionsChooseCamerasFramesBodiesAndSize) {
  const Capture capture;
  PanopticOptions o;
  o.cameras = {"00_03", "00_01"};
  o.frame_step = 2;  // frames 100 and 102
  o.test_sequences = 0;
  o.width = 160;
  Scene scene = import_with_pixels(capture.root.string(), o);
  ASSERT_EQ(scene.views.size(), size_t(2 * 2 * 2));
  EXPECT_EQ(scene.views[0].name, "160422_a/00000100/00_03");
  EXPECT_EQ(scene.views[3].name, "160422_a/00000102/00_01");
  EXPECT_EQ(scene.views[7].split, Split::kTrain);
  const PinholeCamera<double>& half = scene.views[0].camera;
  EXPECT_EQ(half.height, 120);
  EXPECT_DOUBLE_EQ(half.fx, kFx / 2);
  EXPECT_DOUBLE_EQ(half.cx, (kCx + 0.5) / 2 - 0.5);
  double u, v;
  project_pinhole(capture.cameras[3], &capture.joints19.at("160422_a/100")[0], &u, &v);
  EXPECT_NEAR(scene.views[0].pose.joints_image[2 * 1], (u + 0.5) / 2 - 0.5, 1e-3) << "Neck";

  o = {};
  o.max_frames = 1;
  o.height = 60;  // the width follows: 80
  scene = import_with_pixels((capture.root / kSequenceNames[1]).string(), o);
  ASSERT_EQ(scene.views.size(), size_t(kCameras));
  EXPECT_EQ(scene.name, kSequenceNames[1]);
  EXPECT_EQ(scene.views[0].camera.width, 80);
  EXPECT_EQ(scene.views[0].split, Split::kTrain) << "one sequence: nothing held out";

  o = {};
  o.body = 3;
  nlohmann::json two = nlohmann::json::parse(std::ifstream(capture.body_file(0, 103)));
  two["bodies"].push_back({{"id", 3}, {"joints19", two["bodies"][0]["joints19"]}});
  write_text(capture.body_file(0, 103), two.dump());
  scene = import_with_pixels((capture.root / kSequenceNames[0]).string(), o);
  EXPECT_EQ(scene.views.size(), size_t(kCameras));
  EXPECT_EQ(scene.warnings[0],
            "panoptic: 3 of 4 frames read had no body with id 3 and were skipped");
}

TEST(Panoptic, BadInputIsOneLineNamingTheFile) {
  const Capture capture;
  const std::string root = capture.root.string();
  const auto expect = [&](const PanopticOptions& o, const std::string& needle) {
    const std::string error = error_of([&] { import_with_pixels(root, o); });
    EXPECT_NE(error.find(needle), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  };
  PanopticOptions o;
  o.cameras = {"00_00", "00_09"};
  expect(o, "calibration_160422_a.json: no hd camera '00_09' (--cameras)");
  o.cameras = {"00_00", "01_01"};
  expect(o, "no hd camera '01_01'");
  o.cameras = {"00_01", "00_00", "00_01"};
  expect(o, "--cameras names 00_01 twice");
  o = {};
  o.width = 100, o.height = 100;
  expect(o, "--width 100 --height 100: not the aspect of the 320x240 images (100x75 keeps it)");
  o = {};
  o.test_sequences = 2;
  expect(o, "leaves none of its 2 sequence(s) to train on");
  o = {};

  // Each damage below is undone by the next, in order.
  const fs::path calibration = capture.root / kSequenceNames[1] / "calibration_160906_b.json";
  const std::string good_calibration = [&] {
    std::ifstream in(calibration);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  std::string damaged = good_calibration;
  damaged.replace(damaged.find("\"K\":[[") + 6, 0, "1e999,");
  write_text(calibration, damaged);
  expect(o, "calibration_160906_b.json: not valid JSON");
  write_text(calibration, good_calibration);
  const fs::path first_calibration = capture.root / kSequenceNames[0] / "calibration_160422_a.json";
  json extra = json::parse(std::ifstream(first_calibration));
  FixtureCamera unseen = capture.cameras[0];
  unseen.name = "00_07";
  extra["cameras"].push_back(camera_json(unseen));
  write_text(first_calibration, extra.dump());
  EXPECT_EQ(import_with_pixels(root, o).views.size(), size_t(2 * 3 * kCameras))
      << "a camera without images is not imported";
  o.cameras = {"00_00", "00_07"};
  expect(o, "160422_a/hdImgs/00_07: no such folder (the images of camera 00_07, --cameras)");
  o = {};

  const fs::path body = capture.body_file(0, 102);
  const json good_body = json::parse(std::ifstream(body));
  json short_body = good_body;
  for (int k = 0; k < 4; ++k) short_body["bodies"][0]["joints19"].erase(72);
  write_text(body, short_body.dump());
  expect(o, "body3DScene_00000102.json: body 0 has 18 joints (72 values), coco19 needs 19");
  std::string nan_body = good_body.dump();
  nan_body.replace(nan_body.find("\"joints19\":[") + 12, 0, "NaN,");
  write_text(body, nan_body);
  expect(o, "body3DScene_00000102.json: not valid JSON");
  write_text(body, good_body.dump());

  const fs::path image = capture.image_file(1, 2, 103);
  fs::rename(image, image.string() + ".away");
  expect(o, "160906_b/hdImgs/00_02/00_02_00000103.jpg: missing (camera 00_02 of frame 103");
  const std::vector<uint8_t> small(size_t(100) * 80 * 3, 9);
  write_png(image.string(), 100, 80, 3, small.data());
  expect(o, "00_02_00000103.png: 100x80 pixels, but " + calibration.string() +
                " gives camera 00_02 320x240");
  fs::rename(image.string() + ".away", image);

  const fs::path folder = capture.root / kSequenceNames[1] / "hdImgs" / "00_03";
  fs::rename(folder, folder.string() + ".away");
  expect(o, "160906_b/hdImgs: 3 hd cameras with images (00_00,00_01,00_02), but 160422_a has 4");
  fs::rename(folder.string() + ".away", folder);

  EXPECT_NO_THROW(import_with_pixels(root, o)) << "every damage was undone";
  const fs::path empty = capture.root / "empty";
  fs::create_directories(empty);
  const std::string error = error_of([&] { import_with_pixels(empty.string(), o); });
  EXPECT_NE(error.find("empty: not a Panoptic folder (no calibration_*.json in it or in its "
                       "sub-folders)"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace mvibr::data
