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
#include "mvibr/geom/projection.h"
#include "support/datasets.h"

namespace mvibr::data::testing {

namespace fs = std::filesystem;
using nlohmann::json;

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
