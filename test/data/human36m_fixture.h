// A tiny Human3.6M processed folder written on the spot (human36m_test.cpp describes it): four
// cameras in a ring with H36M's sizes in small and one lens, S1's and S9's actions with
// annot.h5 as h36m-fetch writes it, cameras.h5 as una-dinosauria writes it (or H36M's
// metadata.xml), and PNG frames with a dot at each of the 17 joints' distorted projections.
// Shared by the importer's tests and the import fuzz test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "joint_dots.h"
#include "mvibr/data/human36m.h"
#include "mvibr/data/image_io.h"
#include "mvibr/geom/camera.h"
#include "mvibr/hdf5/hdf5_file.h"

namespace mvibr::data::h36m_fixture {

namespace fs = std::filesystem;

inline constexpr int kWidth = 160;
inline const int kHeights[4] = {162, 160, 160, 161};  // H36M's 1002 and 1000, small; and an odd one
inline const char* const kCameraIds[4] = {"54138969", "55011271", "58860488", "60457274"};
inline constexpr double kFocal[2] = {152, 151.2}, kCentre[2] = {79.6, 80.9};
inline constexpr int kDistortedCamera = 2;

struct FixtureCamera {
  double r[9];  // cameras.h5's R: x_world = R x_camera + T
  double t[3];  // T, millimetres
  double k[3] = {0, 0, 0}, p[2] = {0, 0};
  int height;
};

// x_camera = R^T (x - T).
inline Vec3<double> to_camera(const FixtureCamera& c, const double x[3]) {
  const double d[3] = {x[0] - c.t[0], x[1] - c.t[1], x[2] - c.t[2]};
  return {c.r[0] * d[0] + c.r[3] * d[1] + c.r[6] * d[2],
          c.r[1] * d[0] + c.r[4] * d[1] + c.r[7] * d[2],
          c.r[2] * d[0] + c.r[5] * d[1] + c.r[8] * d[2]};
}

// OpenCV's projectPoints with [k1 k2 p1 p2 k3], written out, in the full image's pixels.
inline void project_distorted(const FixtureCamera& c, const double x[3], double* u, double* v) {
  const Vec3<double> p = to_camera(c, x);
  const double a = p.x / p.z, b = p.y / p.z, r = a * a + b * b;
  const double radial = 1 + c.k[0] * r + c.k[1] * r * r + c.k[2] * r * r * r;
  const double ad = a * radial + 2 * c.p[0] * a * b + c.p[1] * (r + 2 * a * a);
  const double bd = b * radial + 2 * c.p[1] * a * b + c.p[0] * (r + 2 * b * b);
  *u = kFocal[0] * ad + kCentre[0];
  *v = kFocal[1] * bd + kCentre[1];
}

inline void project_pinhole(const FixtureCamera& c, const double x[3], double* u, double* v) {
  FixtureCamera ideal = c;
  ideal.k[0] = ideal.k[1] = ideal.k[2] = ideal.p[0] = ideal.p[1] = 0;
  project_distorted(ideal, x, u, v);
}

inline std::vector<FixtureCamera> ring_cameras() {
  std::vector<FixtureCamera> cameras;
  for (int c = 0; c < 4; ++c) {
    const double a = 2 * M_PI * c / 4 + 0.7;
    const PinholeCamera<double> look =
        look_at_camera<double>({3.5 * std::cos(a), 3.5 * std::sin(a), 1.2 + 0.3 * (c % 2)},
                               {0.05 * c, -0.1, 0.9}, {0, 0, 1}, kFocal[0], kWidth, 160);
    FixtureCamera f;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) f.r[3 * i + j] = look.c2w[4 * i + j];
      f.t[i] = 1000 * look.c2w[4 * i + 3];
    }
    if (c == kDistortedCamera) {  // H36M's lenses: k near (-0.2, 0.25, -0.003), p near 1e-3
      f.k[0] = -0.21, f.k[1] = 0.24, f.k[2] = -0.003, f.p[0] = -0.0012, f.p[1] = 0.0009;
    }
    f.height = kHeights[c];
    cameras.push_back(f);
  }
  return cameras;
}

// annot.h5's datasets as written.
struct Annotations {
  std::vector<int> cameras, frames;
  std::vector<double> pose_3d, pose_2d;
  int joints = kHuman36mSourceJoints;
};

struct FixtureAction {
  std::string subject, name;
  std::vector<long> frames;
  std::vector<int> cameras;  // those with rows and images
};

// The folder on disk, and what was written into it.
struct Processed {
  fs::path root =
      fs::temp_directory_path() / ("mvibr-h36m-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::path calibration = root / "cameras.h5";
  std::vector<FixtureCamera> cameras = ring_cameras();
  std::vector<FixtureAction> actions = {{"S1", "Directions-1", {1, 2, 3}, {0, 1, 2, 3}},
                                        {"S1", "Directions-2", {1, 2}, {1, 2, 3}},
                                        {"S9", "Eating-1", {1, 65, 129}, {0, 1, 2, 3}}};
  std::map<std::string, std::vector<double>> joints;  // "<subject>/<action>/<frame>": 32 x 3, mm

  Processed() {
    fs::remove_all(root);
    fs::create_directories(root / "S1" / "MySegmentsMat" / "ground_truth_bb");
    write_calibration(calibration, {{"S1", cameras}, {"S9", cameras}});
    std::mt19937_64 random(11);
    std::uniform_real_distribution<double> unit(0, 1);
    for (const FixtureAction& action : actions) {
      for (const long frame : action.frames) {
        std::vector<double>& body = joints[key(action, frame)];
        for (int j = 0; j < kHuman36mSourceJoints; ++j) {
          body.insert(body.end(), {2600 * unit(random) - 1300, 2600 * unit(random) - 1300,
                                   2400 * unit(random) - 300});
        }
      }
      write_annotations(action, nullptr);
      for (const int c : action.cameras) {
        for (const long frame : action.frames) write_image(action, c, frame);
      }
    }
  }
  ~Processed() { fs::remove_all(root); }

  static std::string key(const FixtureAction& a, long frame) {
    return a.subject + "/" + a.name + "/" + std::to_string(frame);
  }
  fs::path annot(const FixtureAction& a) const { return root / a.subject / a.name / "annot.h5"; }
  fs::path image(const FixtureAction& a, int camera, long frame) const {
    char name[32];
    std::snprintf(name, sizeof name, "img_%06ld.jpg", frame);
    return root / a.subject / a.name / "imageSequence" / kCameraIds[camera] / name;
  }

  static void write_calibration(const fs::path& path,
                                const std::map<std::string, std::vector<FixtureCamera>>& subjects) {
    h5::File file = h5::File::create(path.string());
    for (const auto& [subject, list] : subjects) {
      const std::string group = "subject" + subject.substr(1);
      file.create_group(group);
      for (size_t c = 0; c < list.size(); ++c) {
        const std::string at = group + "/camera" + std::to_string(c + 1);
        file.create_group(at);
        const FixtureCamera& f = list[c];
        file.write(at + "/R", {3, 3}, f.r);
        file.write(at + "/T", {3, 1}, f.t);
        file.write(at + "/f", {2, 1}, kFocal);
        file.write(at + "/c", {2, 1}, kCentre);
        file.write(at + "/k", {3, 1}, f.k);
        file.write(at + "/p", {2, 1}, f.p);
        int name[8];
        for (int i = 0; i < 8; ++i) name[i] = kCameraIds[c][i];
        file.write(at + "/Name", {8, 1}, name);
      }
    }
  }

  // H36M's metadata.xml with the same cameras for every subject: <w0>'s 300 numbers (angles a, b,
  // c of the world-to-camera rotation Rx(a) Ry(b) Rz(c) and T per subject and camera, then f, c,
  // k, p per camera) and the camera ids. `values` numbers are written.
  void write_metadata_xml(const fs::path& path, size_t values = 300) const {
    std::vector<double> w0(300, 0.0);
    for (int k = 0; k < 4; ++k) {
      const FixtureCamera& f = cameras[size_t(k)];
      // R_w2c = R^T: entry (i, j) is f.r[3 j + i].
      const double b = std::asin(f.r[6]), c = std::atan2(-f.r[3], f.r[0]),
                   a = std::atan2(-f.r[7], f.r[8]);
      for (int subject = 0; subject < 11; ++subject) {
        double* e = &w0[size_t(6 * (11 * k + subject))];
        e[0] = a, e[1] = b, e[2] = c, e[3] = f.t[0], e[4] = f.t[1], e[5] = f.t[2];
      }
      const double intrinsics[9] = {kFocal[0], kFocal[1], kCentre[0], kCentre[1], f.k[0],
                                    f.k[1],    f.k[2],    f.p[0],     f.p[1]};
      std::copy(intrinsics, intrinsics + 9, &w0[size_t(264 + 9 * k)]);
    }
    std::string text = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<a>\n<w0>[";
    char number[32];
    for (size_t i = 0; i < values; ++i) {
      std::snprintf(number, sizeof number, "%s%.17g", i ? " " : "", w0[i]);
      text += number;
    }
    text += "]</w0>\n<dbcameras><index2id>";
    for (const char* id : kCameraIds) text += std::string("<item>") + id + "</item>";
    text += "</index2id></dbcameras>\n</a>\n";
    std::ofstream(path, std::ios::binary) << text;
  }

  // h36m-fetch's annot.h5: rows camera by camera; `edit` may change them before writing.
  void write_annotations(const FixtureAction& a,
                         const std::function<void(Annotations*)>& edit) const {
    Annotations rows;
    std::vector<double>&pose_3d = rows.pose_3d, &pose_2d = rows.pose_2d;
    for (const int c : a.cameras) {
      for (const long frame : a.frames) {
        rows.cameras.push_back(std::stoi(kCameraIds[c]));
        rows.frames.push_back(int(frame));
        const std::vector<double>& body = joints.at(key(a, frame));
        for (int j = 0; j < kHuman36mSourceJoints; ++j) {
          const Vec3<double> x = to_camera(cameras[size_t(c)], &body[size_t(3 * j)]);
          pose_3d.insert(pose_3d.end(), {x.x, x.y, x.z});
          double u, v;
          project_distorted(cameras[size_t(c)], &body[size_t(3 * j)], &u, &v);
          pose_2d.insert(pose_2d.end(), {u, v});
        }
      }
    }
    if (edit) edit(&rows);
    fs::create_directories(annot(a).parent_path());
    h5::File file = h5::File::create(annot(a).string());
    const hsize_t n = rows.cameras.size();
    file.write("camera", {n}, rows.cameras.data());
    file.write("frame", {n}, rows.frames.data());
    file.create_group("pose");
    file.write("pose/3d", {n, hsize_t(rows.joints), 3}, pose_3d.data());
    file.write("pose/2d", {n, 32, 2}, pose_2d.data());
  }

  // Dots at the distorted projections of the 17 joints, in the full image.
  void write_image(const FixtureAction& a, int camera, long frame) const {
    const FixtureCamera& c = cameras[size_t(camera)];
    const std::vector<double>& body = joints.at(key(a, frame));
    std::vector<double> points;
    for (int j = 0; j < kPoseJoints; ++j) {
      double u, v;
      project_distorted(c, &body[size_t(3 * kHuman36mJointIndex[j])], &u, &v);
      points.insert(points.end(), {u, v});
    }
    const fs::path path = image(a, camera, frame);
    fs::create_directories(path.parent_path());
    write_png(path.string(), kWidth, c.height, 3,  // PNG bytes; read by content
              draw_dots(kWidth, c.height, points).data());
  }
};

inline Human36mOptions with_calibration(const Processed& p) {
  Human36mOptions o;
  o.calibration = p.calibration.string();
  return o;
}

}  // namespace mvibr::data::h36m_fixture
