// What the importer and file-format tests share: a scratch directory, small files written on
// the spot, an expectation that a refusal names its file, and checks of views against the
// conventions (geom/projection.h, OpenCV axes).
#pragma once

#include "mvibr/data/importers.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "mvibr/core/error.h"
#include "mvibr/data/downscale.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/npy.h"
#include "mvibr/data/npz.h"
#include "mvibr/data/undistort.h"
#include "mvibr/geom/camera.h"
#include "mvibr/geom/projection.h"
#include "support/datasets.h"

namespace mvibr::data::testing {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory for one test, removed when the test ends.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mvibr_import_" + std::to_string(getpid()) + "_" +
                                         info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_gradient_png(const std::string& path, int width, int height, int channels) {
  std::vector<uint8_t> pixels(size_t(width) * height * channels);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7 % 251);
  fs::create_directories(fs::path(path).parent_path());
  write_png(path, width, height, channels, pixels.data());
}

// The cameras of the small COLMAP models below (image ids 1 to 3) and their images' names; the
// views are imported in name order.
inline std::vector<PinholeCamera<double>> colmap_cameras() {
  return {look_at_camera<double>({3, -1, 2}, {0, 0, 0}, {0, 0, 1}, 50.0, 32, 24),
          look_at_camera<double>({-2, -3, 1}, {0.1, 0, 0}, {0, 0, 1}, 50.0, 32, 24),
          look_at_camera<double>({0.5, 3, 1.5}, {0, 0.2, 0}, {0, 0, 1}, 50.0, 32, 24)};
}
inline const char* const kColmapImageNames[] = {"c.png", "a.png", "b.png"};

// A camera's w2c rotation as COLMAP's quaternion (w, x, y, z); these rotations have trace > -1.
inline std::array<double, 4> colmap_quaternion(const PinholeCamera<double>& camera) {
  const double* m = camera.w2c;
  const double w = 0.5 * std::sqrt(1 + m[0] + m[5] + m[10]);
  return {w, (m[9] - m[6]) / (4 * w), (m[2] - m[8]) / (4 * w), (m[4] - m[1]) / (4 * w)};
}

// The model of colmap_cameras() (one OPENCV camera with a lens, a 2D point per image, two 3D
// points) as COLMAP writes it by default, cameras.bin, images.bin and points3D.bin field by field
// as its reconstruction_io does, and as its text twin.
struct ColmapTwins {
  std::string cameras_bin, images_bin, points_bin, cameras_txt, images_txt, points_txt;
};

inline ColmapTwins colmap_twins() {
  const std::vector<PinholeCamera<double>> truth = colmap_cameras();
  ColmapTwins m;
  const auto put = [](std::string* out, const auto value) {
    out->append(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  put(&m.cameras_bin, uint64_t(1));
  put(&m.cameras_bin, uint32_t(1));  // camera id
  put(&m.cameras_bin, int32_t(4));   // OPENCV
  put(&m.cameras_bin, uint64_t(32));
  put(&m.cameras_bin, uint64_t(24));
  for (double p : {50.0, 51.0, 16.0, 12.0, 0.01, -0.002, 0.001, 0.0005}) put(&m.cameras_bin, p);
  put(&m.images_bin, uint64_t(truth.size()));
  for (size_t i = 0; i < truth.size(); ++i) {
    const double* w2c = truth[i].w2c;
    const std::array<double, 4> q = colmap_quaternion(truth[i]);
    put(&m.images_bin, uint32_t(i + 1));
    for (double x : q) put(&m.images_bin, x);
    for (double x : {w2c[3], w2c[7], w2c[11]}) put(&m.images_bin, x);
    put(&m.images_bin, uint32_t(1));
    m.images_bin += std::string(kColmapImageNames[i]) + '\0';
    put(&m.images_bin, uint64_t(1));  // one 2D point
    for (double x : {1.0, 2.0}) put(&m.images_bin, x);
    put(&m.images_bin, uint64_t(7));
    char line[512];
    std::snprintf(line, sizeof line, "%zu %.17g %.17g %.17g %.17g %.17g %.17g %.17g 1 %s\n", i + 1,
                  q[0], q[1], q[2], q[3], w2c[3], w2c[7], w2c[11], kColmapImageNames[i]);
    m.images_txt += std::string(line) + "1.0 2.0 7\n";
  }
  put(&m.points_bin, uint64_t(2));
  const double points[2][3] = {{0, 0, 0}, {0.2, 0.1, 0.3}};
  const uint32_t tracks[2][4] = {{1, 0, 3, 0}, {1, 1, 0, 0}};
  for (int k = 0; k < 2; ++k) {
    put(&m.points_bin, uint64_t(k + 1));
    for (double x : points[k]) put(&m.points_bin, x);
    m.points_bin += std::string("\x0a\x14\x1e", 3);
    put(&m.points_bin, 0.5);
    put(&m.points_bin, uint64_t(k == 0 ? 2 : 1));
    for (int e = 0; e < (k == 0 ? 4 : 2); ++e) put(&m.points_bin, tracks[k][e]);
  }
  m.cameras_txt = "1 OPENCV 32 24 50 51 16 12 0.01 -0.002 0.001 0.0005\n";
  m.points_txt = "1 0 0 0 10 20 30 0.5 1 0 3 0\n2 0.2 0.1 0.3 10 20 30 0.5 1 1\n";
  return m;
}

// The model's images (32x24 gradients) and sparse/0/ in binary or text, under `dir`.
inline void write_colmap_twin(const std::string& dir, const ColmapTwins& m, bool binary) {
  for (const char* name : kColmapImageNames) {
    write_gradient_png(dir + "/images/" + name, 32, 24, 3);
  }
  const std::string sparse = dir + "/sparse/0/";
  write_text(sparse + (binary ? "cameras.bin" : "cameras.txt"),
             binary ? m.cameras_bin : m.cameras_txt);
  write_text(sparse + (binary ? "images.bin" : "images.txt"), binary ? m.images_bin : m.images_txt);
  write_text(sparse + (binary ? "points3D.bin" : "points3D.txt"),
             binary ? m.points_bin : m.points_txt);
}

// Runs `body`, expecting an InvalidArgument whose message contains `needle` (a file name).
inline void expect_invalid_naming(const std::function<void()>& body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "no InvalidArgument; expected one naming " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not name " << needle;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line";
  }
}

inline int count_split(const Scene& scene, Split split) {
  return int(std::count_if(scene.views.begin(), scene.views.end(),
                           [&](const View& v) { return v.split == split; }));
}

inline size_t json_frame_count(const std::string& file) {
  return json::parse(read_bytes(file))["frames"].size();
}

// A point at `depth` on view a's ray through (u, v), projected into view b; b's ray through that
// pixel must pass through the point: intrinsics and both poses agree with projection.h.
inline void expect_reprojection_consistent(const View& a, const View& b, double u, double v,
                                           double depth) {
  Vec3<double> origin, direction;
  pixel_to_ray(a.camera, u, v, &origin, &direction);
  const Vec3<double> point = origin + depth * direction;
  const Projection<double> p = project_point(b.camera, point, b.camera.width, b.camera.height);
  pixel_to_ray(b.camera, p.u, p.v, &origin, &direction);
  const Vec3<double> to_point = point - origin;
  const double along = dot(to_point, direction) / dot(direction, direction);
  EXPECT_LT(norm(to_point - along * direction), 1e-9) << a.name << " -> " << b.name;
  EXPECT_GT(along, 0) << "point behind " << b.name;
}

// The object scenes are rendered without roll, on the upper hemisphere: world up (+z) points
// up the image, and OpenCV's camera y is down.
inline void expect_upright(const View& view) {
  const Vec3<double> up = rotate(view.camera.w2c, Vec3<double>{0, 0, 1});
  EXPECT_LT(up.y, 0) << view.name;
  EXPECT_NEAR(up.x, 0, 1e-6) << view.name;
}

// Bilinear RGB read at pixel coordinates (integer = pixel centre); false outside the image.
inline bool sample_rgb(const View& view, double u, double v, double rgb[3]) {
  const int w = view.camera.width, h = view.camera.height;
  if (!(u >= 0 && v >= 0 && u <= w - 1 && v <= h - 1)) return false;
  const int u0 = std::min(int(u), w - 2), v0 = std::min(int(v), h - 2);
  const double a = u - u0, b = v - v0;
  for (int c = 0; c < 3; ++c) {
    const auto at = [&](int x, int y) { return double(view.rgb[(size_t(y) * w + x) * 3 + c]); };
    rgb[c] = (1 - b) * ((1 - a) * at(u0, v0) + a * at(u0 + 1, v0)) +
             b * ((1 - a) * at(u0, v0 + 1) + a * at(u0 + 1, v0 + 1));
  }
  return true;
}

// LLFF fern as its configs import it: images_8 (1/8 size).
inline ImportOptions fern_options() {
  ImportOptions options;
  options.downsample = 8;
  return options;
}

}  // namespace mvibr::data::testing
