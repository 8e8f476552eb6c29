// Camera paths (see camera_path.h). LLFF writes its spiral with camera axes [right, up,
// backward]; here cameras are OpenCV's [right, down, forward], so LLFF's offset
// (rx cos t, -ry sin t, -rz sin(z_rate t)) is (rx cos t, ry sin t, rz sin(z_rate t)) and its
// "z away from the focus point" is our "looking at the focus point"; test/reference checks the
// frames against a numpy transcription of LLFF's own.
#include "mvibr/data/camera_path.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "mvibr/core/error.h"

namespace mvibr::data {

namespace {

using Vec = Vec3<double>;
using Rotation = std::array<double, 9>;  // row-major; columns are the camera axes in the world

Vec column(const double* c2w, int axis) {
  return {c2w[axis], c2w[4 + axis], c2w[8 + axis]};
}

Rotation rotation_of(const PinholeCamera<double>& c) {
  return {c.c2w[0], c.c2w[1], c.c2w[2], c.c2w[4], c.c2w[5],
          c.c2w[6], c.c2w[8], c.c2w[9], c.c2w[10]};
}

Rotation multiply(const Rotation& a, const Rotation& b) {
  Rotation m{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      m[size_t(3 * r + c)] = a[size_t(3 * r)] * b[size_t(c)] +
                             a[size_t(3 * r + 1)] * b[size_t(3 + c)] +
                             a[size_t(3 * r + 2)] * b[size_t(6 + c)];
    }
  }
  return m;
}

Rotation transpose(const Rotation& a) {
  return {a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8]};
}

// Rotation by `angle` about the unit `axis` (Rodrigues).
Rotation axis_angle(Vec axis, double angle) {
  const double s = std::sin(angle), k = 1 - std::cos(angle);
  const double x = axis.x, y = axis.y, z = axis.z;
  return {1 - k * (y * y + z * z), -s * z + k * x * y,      s * y + k * x * z,
          s * z + k * x * y,       1 - k * (x * x + z * z), -s * x + k * y * z,
          -s * y + k * x * z,      s * x + k * y * z,       1 - k * (x * x + y * y)};
}

// The axis and angle (0..pi) of a rotation, through its unit quaternion with w >= 0 (Shepperd's
// method: the largest of w, x, y, z is taken from the diagonal, the rest from the off-diagonal,
// so the result is accurate near pi too).
void to_axis_angle(const Rotation& m, Vec* axis, double* angle) {
  const double trace = m[0] + m[4] + m[8];
  double w, x, y, z;
  if (trace >= m[0] && trace >= m[4] && trace >= m[8]) {
    w = 0.5 * std::sqrt(std::max(0.0, 1 + trace));
    x = (m[7] - m[5]) / (4 * w);
    y = (m[2] - m[6]) / (4 * w);
    z = (m[3] - m[1]) / (4 * w);
  } else if (m[0] >= m[4] && m[0] >= m[8]) {
    x = 0.5 * std::sqrt(std::max(0.0, 1 + m[0] - m[4] - m[8]));
    w = (m[7] - m[5]) / (4 * x);
    y = (m[1] + m[3]) / (4 * x);
    z = (m[2] + m[6]) / (4 * x);
  } else if (m[4] >= m[8]) {
    y = 0.5 * std::sqrt(std::max(0.0, 1 - m[0] + m[4] - m[8]));
    w = (m[2] - m[6]) / (4 * y);
    x = (m[1] + m[3]) / (4 * y);
    z = (m[5] + m[7]) / (4 * y);
  } else {
    z = 0.5 * std::sqrt(std::max(0.0, 1 - m[0] - m[4] + m[8]));
    w = (m[3] - m[1]) / (4 * z);
    x = (m[2] + m[6]) / (4 * z);
    y = (m[5] + m[7]) / (4 * z);
  }
  if (w < 0) w = -w, x = -x, y = -y, z = -z;  // the shorter way round
  const double sine = std::sqrt(x * x + y * y + z * z);
  *angle = 2 * std::atan2(sine, w);
  *axis = sine > 0 ? Vec{x / sine, y / sine, z / sine} : Vec{1, 0, 0};
}

PinholeCamera<double> camera_at(const PinholeCamera<double>& intrinsics, const Rotation& r,
                                Vec center) {
  PinholeCamera<double> c = intrinsics;
  const double c2w[12] = {r[0], r[1],     r[2], center.x, r[3], r[4],
                          r[5], center.y, r[6], r[7],     r[8], center.z};
  std::copy(c2w, c2w + 12, c.c2w);
  set_world_to_camera(&c);
  return c;
}

// numpy.percentile's default (linear interpolation between the closest ranks).
double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double position = q / 100 * double(values.size() - 1);
  const size_t below = size_t(position);
  if (below + 1 >= values.size()) return values.back();
  return values[below] + (position - double(below)) * (values[below + 1] - values[below]);
}

double lerp(double a, double b, double t) {
  return a + t * (b - a);
}

// The smallest near and the largest far bound of the scene's views.
std::pair<double, double> depth_range(const Scene& scene) {
  double near = INFINITY, far = 0;
  for (const View& v : scene.views) {
    near = std::min(near, v.near_depth);
    far = std::max(far, v.far_depth);
  }
  return {near, far};
}

// A frame of a spiral or an orbit: a camera at `eye` looking at `target`, with view 0's
// intrinsics and size and the scene's depth range.
PathFrame looking_at(const Scene& scene, Vec eye, Vec target, Vec up, int time_index) {
  const PinholeCamera<double>& first = scene.views.front().camera;
  PathFrame frame;
  frame.camera = look_at_camera(eye, target, up, first.fx, first.width, first.height);
  frame.camera.fy = first.fy;
  frame.camera.cx = first.cx;
  frame.camera.cy = first.cy;
  std::tie(frame.near_depth, frame.far_depth) = depth_range(scene);
  frame.time_index = time_index;
  return frame;
}

}  // namespace

double focus_depth(const Scene& scene) {
  const auto [close, far] = depth_range(scene);
  // LLFF's far end is 5x the largest bound; far_depth holds 1.6x the bound (IBRNet's margin,
  // which the importers add), so LLFF scenes get LLFF's focus exactly.
  const double infinity = 5 / 1.6 * far, weight = 0.75;
  return 1 / ((1 - weight) / close + weight / infinity);
}

std::vector<PathFrame> spiral_path(const Scene& scene, const SpiralOptions& options) {
  if (options.frames < 1) {
    throw InvalidArgument("a spiral path needs at least 1 frame, got " +
                          std::to_string(options.frames));
  }
  if (scene.views.empty()) throw InvalidArgument("scene '" + scene.name + "' has no views");
  const double n = double(scene.views.size());
  Vec center{0, 0, 0}, forward{0, 0, 0}, down{0, 0, 0};
  for (const View& v : scene.views) {
    center = center + (1 / n) * v.camera.center();
    forward = forward + column(v.camera.c2w, 2);
    down = down + column(v.camera.c2w, 1);
  }
  if (norm(forward) < 0.05 * n) {
    throw InvalidArgument("scene '" + scene.name +
                          "': its cameras face every way, so a spiral around their average has "
                          "no direction (use the interpolated path)");
  }
  const Vec up = (-1 / norm(down)) * down;
  const PinholeCamera<double> average =
      look_at_camera(center, center + (1 / norm(forward)) * forward, up, 1.0, 1, 1);
  // Radii: how far the views spread along the average camera's axes.
  std::vector<double> offsets[3];
  for (const View& v : scene.views) {
    const Vec local = transform_point(average.w2c, v.camera.center());
    offsets[0].push_back(std::abs(local.x));
    offsets[1].push_back(std::abs(local.y));
    offsets[2].push_back(std::abs(local.z));
  }
  const Vec radii{percentile(offsets[0], 90), percentile(offsets[1], 90),
                  percentile(offsets[2], 90)};
  const Vec focus = transform_point(average.c2w, Vec{0, 0, focus_depth(scene)});
  std::vector<PathFrame> path;
  for (int k = 0; k < options.frames; ++k) {
    const double t = 2 * M_PI * options.rotations * k / options.frames;
    const Vec eye = transform_point(average.c2w, Vec{radii.x * std::cos(t), radii.y * std::sin(t),
                                                     radii.z * std::sin(t * options.z_rate)});
    path.push_back(looking_at(scene, eye, focus, up, options.time_index));
  }
  return path;
}

std::optional<Vec3<double>> point_views_look_at(const std::vector<View>& views) {
  // The point nearest every optical axis: sum (I - d d^T) p = sum (I - d d^T) o, solved by
  // Cramer's rule; a near-singular system means the axes are nearly parallel.
  double a[3][3] = {}, b[3] = {};
  Vec forward{0, 0, 0};
  for (const View& v : views) {
    const Vec d = column(v.camera.c2w, 2), o = v.camera.center();
    const double dv[3] = {d.x, d.y, d.z}, ov[3] = {o.x, o.y, o.z};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        const double m = (i == j ? 1.0 : 0.0) - dv[i] * dv[j];
        a[i][j] += m;
        b[i] += m * ov[j];
      }
    }
    forward = forward + d;
  }
  const auto determinant = [](const double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
           m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  const double n = double(views.size()), det = determinant(a);
  // How far the axes turn from their mean, mean(sin^2): under 0.03 (about 10 degrees) the point
  // they meet is too poorly placed, as in a forward-facing capture.
  double spread = 1;
  if (norm(forward) > 1e-9 * n) {
    forward = (1 / norm(forward)) * forward;
    spread = 0;
    for (const View& v : views) {
      const double c = dot(column(v.camera.c2w, 2), forward);
      spread += (1 - c * c) / n;
    }
  }
  if (views.size() < 2 || spread < 0.03 || det / (n * n * n) < 1e-9) return std::nullopt;
  double solution[3];
  for (int k = 0; k < 3; ++k) {
    double m[3][3];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] = j == k ? b[i] : a[i][j];
    }
    solution[k] = determinant(m) / det;
  }
  return Vec{solution[0], solution[1], solution[2]};
}

std::vector<PathFrame> orbit_path(const Scene& scene, const OrbitOptions& options) {
  if (options.frames < 1) {
    throw InvalidArgument("an orbit needs at least 1 frame, got " + std::to_string(options.frames));
  }
  if (scene.views.size() < 2) {
    throw InvalidArgument("scene '" + scene.name + "': an orbit needs at least 2 views");
  }
  const std::optional<Vec> looked_at = point_views_look_at(scene.views);
  if (!looked_at) {
    throw InvalidArgument("scene '" + scene.name +
                          "': its views look nearly the same way, so their axes meet nowhere to "
                          "orbit around (use the spiral path)");
  }
  const Vec center = *looked_at;
  const double n = double(scene.views.size());
  Vec down{0, 0, 0};
  for (const View& v : scene.views) down = down + column(v.camera.c2w, 1);
  const Vec up = (-1 / norm(down)) * down;
  double radius = 0, elevation = 0;
  for (const View& v : scene.views) {
    const Vec offset = v.camera.center() - center;
    radius += norm(offset) / n;
    elevation += std::asin(std::clamp(dot(offset, up) / norm(offset), -1.0, 1.0)) / n;
  }
  // Azimuth 0 along view 0's offset in the plane normal to up.
  const Vec first = scene.views.front().camera.center() - center;
  Vec east = first - dot(first, up) * up;
  if (norm(east) < 1e-9 * radius) east = column(scene.views.front().camera.c2w, 0);
  east = (1 / norm(east)) * east;
  const Vec north{up.y * east.z - up.z * east.y, up.z * east.x - up.x * east.z,
                  up.x * east.y - up.y * east.x};
  std::vector<PathFrame> path;
  for (int k = 0; k < options.frames; ++k) {
    const double t = 2 * M_PI * k / options.frames;
    const Vec around = std::cos(t) * east + std::sin(t) * north;
    const Vec eye = center + radius * (std::cos(elevation) * around + std::sin(elevation) * up);
    path.push_back(looking_at(scene, eye, center, up, options.time_index));
  }
  return path;
}

std::vector<PathFrame> interpolated_path(const Scene& scene, const std::vector<int>& keys,
                                         int frames) {
  if (keys.size() < 2) {
    throw InvalidArgument("an interpolated path needs at least 2 views, got " +
                          std::to_string(keys.size()));
  }
  if (frames < 2) {
    throw InvalidArgument("an interpolated path needs at least 2 frames, got " +
                          std::to_string(frames));
  }
  for (int k : keys) {
    if (k < 0 || size_t(k) >= scene.views.size()) {
      throw InvalidArgument("path view " + std::to_string(k) + " is not a view of scene '" +
                            scene.name + "' (it has " + std::to_string(scene.views.size()) + ")");
    }
  }
  const int segments = int(keys.size()) - 1;
  std::vector<PathFrame> path;
  for (int f = 0; f < frames; ++f) {
    const double t = double(f) * segments / (frames - 1);
    PathFrame frame;
    if (t == std::floor(t)) {  // on a key: its own camera, not one rebuilt from an interpolation
      const View& key = scene.views[size_t(keys[size_t(t)])];
      frame.camera = key.camera;
      frame.near_depth = key.near_depth;
      frame.far_depth = key.far_depth;
      frame.time_index = key.time_index;
      path.push_back(frame);
      continue;
    }
    const int a = int(t);
    const double u = t - a;
    const View& from = scene.views[size_t(keys[size_t(a)])];
    const View& to = scene.views[size_t(keys[size_t(a + 1)])];
    const Rotation start = rotation_of(from.camera);
    Vec axis;
    double angle;
    to_axis_angle(multiply(transpose(start), rotation_of(to.camera)), &axis, &angle);
    PinholeCamera<double> intrinsics = from.camera;
    intrinsics.fx = lerp(from.camera.fx, to.camera.fx, u);
    intrinsics.fy = lerp(from.camera.fy, to.camera.fy, u);
    intrinsics.cx = lerp(from.camera.cx, to.camera.cx, u);
    intrinsics.cy = lerp(from.camera.cy, to.camera.cy, u);
    const Vec c0 = from.camera.center(), c1 = to.camera.center();
    frame.camera = camera_at(intrinsics, multiply(start, axis_angle(axis, u * angle)),
                             Vec{lerp(c0.x, c1.x, u), lerp(c0.y, c1.y, u), lerp(c0.z, c1.z, u)});
    frame.near_depth = lerp(from.near_depth, to.near_depth, u);
    frame.far_depth = lerp(from.far_depth, to.far_depth, u);
    frame.time_index = u < 0.5 ? from.time_index : to.time_index;
    path.push_back(frame);
  }
  return path;
}

std::vector<PathFrame> fixed_path(const Scene& scene, int view, int frames) {
  if (frames < 1) {
    throw InvalidArgument("a fixed-camera path needs at least 1 frame, got " +
                          std::to_string(frames));
  }
  if (view < 0 || size_t(view) >= scene.views.size()) {
    throw InvalidArgument("path view " + std::to_string(view) + " is not a view of scene '" +
                          scene.name + "' (it has " + std::to_string(scene.views.size()) + ")");
  }
  const View& v = scene.views[size_t(view)];
  PathFrame frame;
  frame.camera = v.camera;
  frame.near_depth = v.near_depth;
  frame.far_depth = v.far_depth;
  frame.time_index = v.time_index;
  return std::vector<PathFrame>(size_t(frames), frame);
}

int time_steps(const Scene& scene) {
  int steps = 0;
  for (const View& v : scene.views) steps = std::max(steps, v.time_index + 1);
  return steps;
}

void set_path_time(const Scene& scene, int step, std::vector<PathFrame>* path) {
  const int steps = time_steps(scene);
  if (step != kSweepTime && (step < 0 || step >= steps)) {
    throw InvalidArgument("time step " + std::to_string(step) + " is not in scene '" + scene.name +
                          "' (it has " + std::to_string(steps) + " steps, 0 to " +
                          std::to_string(steps - 1) + ")");
  }
  const size_t frames = path->size();
  for (size_t f = 0; f < frames; ++f) {
    int t = step;
    if (step == kSweepTime) {
      t = frames > 1 ? int(std::lround(double(f) * (steps - 1) / double(frames - 1))) : 0;
    }
    (*path)[f].time_index = t;
  }
}

}  // namespace mvibr::data
