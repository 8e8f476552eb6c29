// Validation of scenes: the one place that decides what a usable scene is, so that every
// importer and the HDF5 reader reject the same things with the same words.
#include "mvibr/data/scene.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mvibr/core/error.h"

namespace mvibr::data {

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kValidation:
      return "val";
    case Split::kTest:
      return "test";
  }
  return "unknown";
}

std::string check_rigid_pose(const double c2w[12]) {
  for (int i = 0; i < 12; ++i) {
    if (!std::isfinite(c2w[i])) return "pose has a non-finite entry";
  }
  double worst = 0;
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      double d = 0;
      for (int k = 0; k < 3; ++k) d += c2w[k * 4 + a] * c2w[k * 4 + b];
      worst = std::max(worst, std::abs(d - (a == b ? 1.0 : 0.0)));
    }
  }
  if (worst > 1e-4) {
    std::ostringstream why;
    why << "pose rotation is not orthonormal (|R^T R - I| = " << worst << ")";
    return why.str();
  }
  const double* m = c2w;
  const double det = m[0] * (m[5] * m[10] - m[6] * m[9]) - m[1] * (m[4] * m[10] - m[6] * m[8]) +
                     m[2] * (m[4] * m[9] - m[5] * m[8]);
  if (det < 0) return "pose rotation is a reflection (det = -1)";
  return "";
}

namespace {

// A frame's motion arrays: all present or all absent, as on the first view, of the frame's size,
// finite, masks 0 or 1.
template <typename Fail>
void check_motion(const View& v, bool absent, const Fail& fail) {
  const FrameMotion& m = v.motion;
  if (m.empty() != absent || (m.empty() && !(m.motion_mask.empty() && m.static_mask.empty() &&
                                             m.flow.empty() && m.flow_valid.empty()))) {
    fail("has flows, masks and disparity where other views have none, or the reverse");
  }
  if (m.empty()) return;
  const size_t pixels = size_t(v.camera.width) * v.camera.height;
  const auto sized = [&](size_t size, size_t expected, const char* what) {
    if (size != expected) {
      fail(std::string(what) + " has " + std::to_string(size) + " values, expected " +
           std::to_string(expected));
    }
  };
  sized(m.disparity.size(), pixels, "disparity");
  sized(m.motion_mask.size(), pixels, "motion mask");
  sized(m.static_mask.size(), pixels, "static mask");
  sized(m.flow.size(), size_t(kFlowCount) * pixels * 2, "flow");
  sized(m.flow_valid.size(), size_t(kFlowCount) * pixels, "flow mask");
  for (const float d : m.disparity) {
    if (!(d >= 0) || !std::isfinite(d)) fail("disparity must be finite and non-negative");
  }
  for (const float f : m.flow) {
    if (!std::isfinite(f)) fail("flow has a non-finite value");
  }
  for (const auto* mask : {&m.motion_mask, &m.static_mask, &m.flow_valid}) {
    for (const uint8_t b : *mask) {
      if (b > 1) fail("masks must hold 0 or 1");
    }
  }
}

// A view's pose labels: present exactly when the scene has a skeleton, J joints each, finite,
// visibility 0 or 1.
template <typename Fail>
void check_pose(const View& v, size_t joints, const Fail& fail) {
  const PoseLabels& p = v.pose;
  if (joints == 0) {
    if (!p.empty() || !p.joints_image.empty() || !p.visible.empty()) {
      fail("has pose labels but the scene has no skeleton");
    }
    return;
  }
  if (p.joints_world.size() != 3 * joints || p.joints_image.size() != 2 * joints ||
      p.visible.size() != joints) {
    fail("has pose labels of " + std::to_string(p.joints_world.size() / 3) + " 3D, " +
         std::to_string(p.joints_image.size() / 2) + " 2D and " + std::to_string(p.visible.size()) +
         " visibility joints; the skeleton has " + std::to_string(joints));
  }
  for (const double x : p.joints_world) {
    if (!std::isfinite(x)) fail("has a non-finite 3D joint");
  }
  for (const float x : p.joints_image) {
    if (!std::isfinite(x)) fail("has a non-finite 2D joint");
  }
  for (const uint8_t b : p.visible) {
    if (b > 1) fail("joint visibility must be 0 or 1");
  }
}

// The skeleton: parents before children (so the root is joint 0), names one per joint.
template <typename Fail>
void check_skeleton(const Scene& scene, const Fail& fail) {
  const std::vector<int>& parents = scene.skeleton;
  if (parents.empty()) return;
  if (scene.joint_names.size() != parents.size()) {
    fail("", "has " + std::to_string(scene.joint_names.size()) + " joint names for " +
                 std::to_string(parents.size()) + " joints");
  }
  for (size_t j = 0; j < parents.size(); ++j) {
    if (j == 0 ? parents[j] != -1 : (parents[j] < 0 || size_t(parents[j]) >= j)) {
      fail("", "skeleton joint " + std::to_string(j) + " has parent " + std::to_string(parents[j]) +
                   " (the root is joint 0; parents come first)");
    }
  }
}

}  // namespace

void validate_scene(const Scene& scene) {
  const auto fail = [&](const std::string& where, const std::string& what) {
    throw InvalidArgument("scene '" + scene.name + "'" + where + ": " + what);
  };
  if (scene.views.empty()) fail("", "has no views");
  const int width = scene.views[0].camera.width, height = scene.views[0].camera.height;
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const View& v = scene.views[i];
    const std::string where = ", view " + std::to_string(i) + " (" + v.name + ")";
    const PinholeCamera<double>& c = v.camera;
    if (c.width != width || c.height != height) {
      fail(where, "image is " + std::to_string(c.width) + "x" + std::to_string(c.height) +
                      ", other views are " + std::to_string(width) + "x" + std::to_string(height));
    }
    if (c.width < 2 || c.height < 2) fail(where, "image is smaller than 2x2");
    if (v.rgb.size() != size_t(c.width) * c.height * 3 && !(v.rgb.empty() && scene.read_rgb)) {
      fail(where, "has " + std::to_string(v.rgb.size()) + " bytes of pixels, expected " +
                      std::to_string(size_t(c.width) * c.height * 3));
    }
    if (!(c.fx > 0) || !(c.fy > 0) || !std::isfinite(c.fx) || !std::isfinite(c.fy) ||
        !std::isfinite(c.cx) || !std::isfinite(c.cy)) {
      fail(where, "intrinsics must be finite with positive focal lengths");
    }
    const std::string pose = check_rigid_pose(c.c2w);
    if (!pose.empty()) fail(where, pose);
    if (!std::isfinite(v.near_depth) || !std::isfinite(v.far_depth) || !(v.near_depth > 0) ||
        !(v.near_depth < v.far_depth)) {
      std::ostringstream what;
      what << "needs 0 < near < far, got near=" << v.near_depth << " far=" << v.far_depth;
      fail(where, what.str());
    }
    if (!std::isfinite(v.time) || v.time_index < 0) fail(where, "bad time stamp or time index");
    if (v.split != Split::kTrain && v.split != Split::kValidation && v.split != Split::kTest) {
      fail(where, "unknown split");
    }
    check_motion(v, scene.views[0].motion.empty(),
                 [&](const std::string& what) { fail(where, what); });
    check_pose(v, scene.skeleton.size(), [&](const std::string& what) { fail(where, what); });
    // An importer that forgot set_world_to_camera would project with a stale w2c.
    const Vec3<double> probe{0.3, -0.2, 1.7};
    const Vec3<double> back = transform_point(c.c2w, transform_point(c.w2c, probe));
    if (norm(back - probe) > 1e-6 * (1 + norm(probe) + norm(c.center()))) {
      fail(where, "world-to-camera pose is not the inverse of camera-to-world");
    }
  }
  check_skeleton(scene, fail);
  if (!scene.neighbours.empty()) {
    if (scene.neighbours.size() != scene.views.size()) {
      fail("", "has neighbour lists for " + std::to_string(scene.neighbours.size()) + " of " +
                   std::to_string(scene.views.size()) + " views");
    }
    for (size_t i = 0; i < scene.neighbours.size(); ++i) {
      std::vector<int> sorted = scene.neighbours[i];
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        fail(", view " + std::to_string(i), "neighbour list repeats a view");
      }
      for (int n : scene.neighbours[i]) {
        if (n < 0 || size_t(n) >= scene.views.size() || size_t(n) == i) {
          fail(", view " + std::to_string(i),
               "neighbour index " + std::to_string(n) + " is out of range or the view itself");
        }
      }
    }
    // A view that is no target reaches a shard only as some target's source.
    std::vector<bool> reached(scene.views.size());
    for (size_t i = 0; i < scene.views.size(); ++i) {
      if (!scene.views[i].target) continue;
      reached[i] = true;
      for (int n : scene.neighbours[i]) reached[size_t(n)] = true;
    }
    for (size_t i = 0; i < scene.views.size(); ++i) {
      if (!reached[i]) {
        fail(", view " + std::to_string(i) + " (" + scene.views[i].name + ")",
             "is no target and no target's source");
      }
    }
  }
}

}  // namespace mvibr::data
