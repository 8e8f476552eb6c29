// Joints drawn as dots, found again after an import: the pose importers' tests (Panoptic,
// Human3.6M) draw a Gaussian dot at each joint's distorted projection into a photograph, and
// after undistortion, cropping and scaling each dot must lie on its joint's label.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/data/scene.h"
#include "mvibr/geom/camera.h"

namespace mvibr::data {

constexpr int kDotBackground = 40;  // every channel
constexpr double kDotSigma = 1.5;

// A width x height RGB image of the background with a dot at each (u, v) of `points` (u0, v0,
// u1, v1, ...), dot j coloured (200, 10 j, 200 - 10 j) and cut off 6 pixels from its centre.
inline std::vector<uint8_t> draw_dots(int width, int height, const std::vector<double>& points) {
  std::vector<double> level(size_t(width) * size_t(height) * 3, kDotBackground);
  for (size_t j = 0; 2 * j < points.size(); ++j) {
    const double u = points[2 * j], v = points[2 * j + 1];
    const double colour[3] = {200, 10.0 * double(j), 200 - 10.0 * double(j)};
    for (int y = int(v) - 6; y <= int(v) + 6; ++y) {
      for (int x = int(u) - 6; x <= int(u) + 6; ++x) {
        if (x < 0 || y < 0 || x >= width || y >= height) continue;
        const double g =
            std::exp(-((x - u) * (x - u) + (y - v) * (y - v)) / (2 * kDotSigma * kDotSigma));
        for (int k = 0; k < 3; ++k)
          level[(size_t(y) * size_t(width) + size_t(x)) * 3 + k] += colour[k] * g;
      }
    }
  }
  std::vector<uint8_t> rgb(level.size());
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(std::lround(std::min(level[i], 255.0)));
  return rgb;
}

// The red-weighted centroid of the dot within `radius` pixels of (u, v); false when that window
// reaches the view's edge.
inline bool dot_centroid(const View& view, double u, double v, double* cu, double* cv,
                         int radius = 5) {
  const int x0 = int(std::lround(u)), y0 = int(std::lround(v));
  if (x0 <= radius || y0 <= radius || x0 >= view.camera.width - radius - 1 ||
      y0 >= view.camera.height - radius - 1) {
    return false;
  }
  double sum = 0, su = 0, sv = 0;
  for (int y = y0 - radius; y <= y0 + radius; ++y) {
    for (int x = x0 - radius; x <= x0 + radius; ++x) {
      const double w =
          std::max(0.0, double(view.rgb[(size_t(y) * size_t(view.camera.width) + size_t(x)) * 3]) -
                            kDotBackground);
      sum += w, su += w * x, sv += w * y;
    }
  }
  if (sum <= 0) return false;
  *cu = su / sum, *cv = sv / sum;
  return true;
}

// Labels against the projections they must equal, and dots against their labels, over a test;
// the dots of the camera with a lens counted apart, with how far its lens moved them.
struct DotTally {
  double worst_label = 0, worst_dot = 0, worst_distorted_dot = 0, distortion_shift = 0;
  int dots = 0, distorted_dots = 0;

  void add_label(double error) { worst_label = std::max(worst_label, error); }
  void add_dot(double error, bool distorted, double lens_shift) {
    worst_dot = std::max(worst_dot, error);
    ++dots;
    if (!distorted) return;
    worst_distorted_dot = std::max(worst_distorted_dot, error);
    distortion_shift = std::max(distortion_shift, lens_shift);
    ++distorted_dots;
  }
  // Labels within 1e-3 px, dots within 0.5 px, at least `least` dots (`least_distorted` of the
  // lens's camera), and a lens that moved them more than 2.5 px.
  void expect(int least, int least_distorted) const {
    std::printf(
        "labels vs pinhole projections: %.2g px; dots vs labels: worst %.3f px over %d dots, "
        "%.3f px over %d dots of the distorted camera, whose lens moved them up to %.2f px\n",
        worst_label, worst_dot, dots, worst_distorted_dot, distorted_dots, distortion_shift);
    EXPECT_LT(worst_label, 1e-3);
    EXPECT_GE(dots, least);
    EXPECT_GE(distorted_dots, least_distorted);
    EXPECT_GT(distortion_shift, 2.5) << "the lens must matter for the test to mean anything";
    EXPECT_LT(worst_dot, 0.5);
  }
};

// Body-crop views (--body_crop) against the joints they were cut about, over a test: labels on
// the pinhole projections of the world joints; the box of the joints the crop was made about
// filling 1 / (1 + 2 margin) of the side, centred, within half a photograph pixel (where the
// crop was rounded to); the dots on their labels; views grown and shrunk from the photograph.
struct CropTally {
  double worst_label = 0, worst_span = 0, worst_centre = 0, worst_dot = 0;
  int dots = 0, grown = 0, shrunk = 0;

  // joints: world, metres; boxed[j]: joint j was in the crop's box; photograph_fx: the camera's
  // fx in the photograph; whole[j]: joint j's dot lies whole within the photograph.
  void add_view(const View& view, const std::vector<Vec3<double>>& joints,
                const std::vector<bool>& boxed, const std::vector<bool>& whole, double margin,
                double photograph_fx) {
    const PinholeCamera<double>& camera = view.camera;
    EXPECT_EQ(camera.width, camera.height) << view.name;
    (camera.fx > photograph_fx ? grown : shrunk) += 1;
    // Dots in grown views are larger: the window and the distance to other dots grow alike.
    const double scale = camera.fx / photograph_fx, grown_by = std::max(1.0, scale);
    const std::vector<float>& labels = view.pose.joints_image;
    double low[2] = {1e9, 1e9}, high[2] = {-1e9, -1e9};
    for (size_t j = 0; j < joints.size(); ++j) {
      const Vec3<double> p = transform_point(camera.w2c, joints[j]);
      const double u = camera.fx * p.x / p.z + camera.cx, v = camera.fy * p.y / p.z + camera.cy;
      const double lu = labels[2 * j], lv = labels[2 * j + 1];
      // A joint behind the camera has a meaningless label (and is hidden).
      if (p.z > 0) worst_label = std::max(worst_label, std::hypot(lu - u, lv - v));
      if (boxed[j]) {
        low[0] = std::min(low[0], lu), high[0] = std::max(high[0], lu);
        low[1] = std::min(low[1], lv), high[1] = std::max(high[1], lv);
      }
      bool alone = whole[j];
      for (size_t other = 0; other < joints.size(); ++other) {
        const double distance = std::hypot(labels[2 * other] - lu, labels[2 * other + 1] - lv);
        if (other != j && distance < 12 * grown_by) alone = false;
      }
      double cu, cv;
      if (!alone || !dot_centroid(view, lu, lv, &cu, &cv, int(std::lround(5 * grown_by)))) {
        continue;
      }
      worst_dot = std::max(worst_dot, std::hypot(cu - lu, cv - lv));
      ++dots;
    }
    const double span = std::max(high[0] - low[0], high[1] - low[1]), side = camera.width;
    worst_span = std::max(worst_span, std::abs(span - side / (1 + 2 * margin)) / scale);
    for (int k = 0; k < 2; ++k) {
      if (high[k] - low[k] == span) {
        worst_centre =
            std::max(worst_centre, std::abs((low[k] + high[k]) / 2 - (side - 1) / 2.0) / scale);
      }
    }
  }

  // Labels within 1e-3 px, box within 0.6 photograph px, at least `least_dots` dots within
  // 0.5 px, and `views` views each grown and shrunk (both paths of the resampling).
  void expect(int least_dots, int views) const {
    std::printf(
        "body crops: labels vs projections %.2g px, span and centre off by %.2f and %.2f "
        "photograph px; dots vs labels: worst %.3f px over %d dots; %d views grown, %d shrunk\n",
        worst_label, worst_span, worst_centre, worst_dot, dots, grown, shrunk);
    EXPECT_LT(worst_label, 1e-3);
    EXPECT_LT(worst_span, 0.6);
    EXPECT_LT(worst_centre, 0.6);
    EXPECT_GE(dots, least_dots);
    EXPECT_LT(worst_dot, 0.5);
    EXPECT_EQ(grown, views);
    EXPECT_EQ(shrunk, views);
  }
};

// What `body` threw as InvalidArgument, or "no error".
inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace mvibr::data
