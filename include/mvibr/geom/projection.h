// Projecting a 3D sample into a source view and reading that view there: IBRNet's Projector.
// A sample is valid in a view when it is in front of the camera and inside the image; colour
// and features are read by bilinear interpolation with grid_sample's align_corners=True and
// zero padding, so a feature map of any resolution is corner-aligned with its image.
#pragma once

#include <cmath>

#include "mvibr/core/hd.h"
#include "mvibr/geom/camera.h"

namespace mvibr {

template <typename T>
struct Projection {
  T u, v;  // pixel coordinates in the source image, clamped to +-1e6
  bool valid;
};

template <typename T>
MVIBR_HD T clamp_value(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// The sample at depth z on ray r of the batch (origins and directions [R,3]).
template <typename T>
MVIBR_HD Vec3<T> point_on_ray(const T* origins, const T* directions, size_t r, T z) {
  return {origins[3 * r] + z * directions[3 * r], origins[3 * r + 1] + z * directions[3 * r + 1],
          origins[3 * r + 2] + z * directions[3 * r + 2]};
}

template <typename T>
MVIBR_HD Projection<T> project_point(const PinholeCamera<T>& camera, Vec3<T> world_point,
                                     int image_width, int image_height) {
  const Vec3<T> p = transform_point(camera.w2c, world_point);
  const T z = p.z > T(1e-8) ? p.z : T(1e-8);
  Projection<T> out;
  out.u = clamp_value((camera.fx * p.x + camera.cx * p.z) / z, T(-1e6), T(1e6));
  out.v = clamp_value((camera.fy * p.y + camera.cy * p.z) / z, T(-1e6), T(1e6));
  out.valid = p.z > T(0) && out.u >= T(0) && out.u <= T(image_width - 1) && out.v >= T(0) &&
              out.v <= T(image_height - 1);
  return out;
}

// The gradient of a world point from that of its projection's pixel (g_u, g_v): through the
// clamps (none beyond +-1e6) and the division by the depth (held at 1e-8 below it), as PyTorch's
// autograd differentiates IBRNet's projection.
template <typename T>
MVIBR_HD Vec3<T> project_point_backward(const PinholeCamera<T>& camera, Vec3<T> world_point, T g_u,
                                        T g_v) {
  const Vec3<T> p = transform_point(camera.w2c, world_point);
  const bool near = !(p.z > T(1e-8));
  const T z = near ? T(1e-8) : p.z;
  const T u = (camera.fx * p.x + camera.cx * p.z) / z, v = (camera.fy * p.y + camera.cy * p.z) / z;
  if (u < T(-1e6) || u > T(1e6)) g_u = T(0);
  if (v < T(-1e6) || v > T(1e6)) g_v = T(0);
  // d(u, v) / d(camera point): the numerators over z, and -(u, v) / z through z when it is free.
  const Vec3<T> g_camera{
      g_u * camera.fx / z, g_v * camera.fy / z,
      (g_u * camera.cx + g_v * camera.cy - (near ? T(0) : g_u * u + g_v * v)) / z};
  const T* m = camera.w2c;  // rows of R, then t: the world gradient is R^T g_camera
  return {m[0] * g_camera.x + m[4] * g_camera.y + m[8] * g_camera.z,
          m[1] * g_camera.x + m[5] * g_camera.y + m[9] * g_camera.z,
          m[2] * g_camera.x + m[6] * g_camera.y + m[10] * g_camera.z};
}

// The four taps of a bilinear read of a map of map_width x map_height texels at image pixel
// (u, v) of an image_width x image_height image. A tap outside the map has index -1 (it
// reads zero and receives no gradient).
template <typename T>
struct BilinearTaps {
  int index[4];  // texel index y * map_width + x, or -1
  T weight[4];
  T frac_x, frac_y;  // where the read falls between the taps, for the coordinate gradient
};

template <typename T>
MVIBR_HD BilinearTaps<T> bilinear_taps(T u, T v, int image_width, int image_height, int map_width,
                                       int map_height) {
  const T x = u * T(map_width - 1) / T(image_width - 1);
  const T y = v * T(map_height - 1) / T(image_height - 1);
  const T x_floor = std::floor(x), y_floor = std::floor(y);
  const int x0 = static_cast<int>(x_floor), y0 = static_cast<int>(y_floor);
  const T fx = x - x_floor, fy = y - y_floor;
  BilinearTaps<T> taps;
  const int xs[4] = {x0, x0 + 1, x0, x0 + 1};
  const int ys[4] = {y0, y0, y0 + 1, y0 + 1};
  const T ws[4] = {(T(1) - fx) * (T(1) - fy), fx * (T(1) - fy), (T(1) - fx) * fy, fx * fy};
  for (int t = 0; t < 4; ++t) {
    const bool inside = xs[t] >= 0 && xs[t] < map_width && ys[t] >= 0 && ys[t] < map_height;
    taps.index[t] = inside ? ys[t] * map_width + xs[t] : -1;
    taps.weight[t] = ws[t];
  }
  taps.frac_x = fx;
  taps.frac_y = fy;
  return taps;
}

// Adds to (g_x, g_y) the gradient of a bilinear read's channels, given their upstream gradient
// grad [channels], with respect to the read's texel coordinates: the slopes of the four weights
// (grid_sample's, taps outside the map reading zero).
template <typename T>
MVIBR_HD void bilinear_coordinate_gradient(const BilinearTaps<T>& taps, const T* map, int channels,
                                           const T* grad, T* g_x, T* g_y) {
  const T fx = taps.frac_x, fy = taps.frac_y;
  const T slope_x[4] = {-(T(1) - fy), T(1) - fy, -fy, fy};
  const T slope_y[4] = {-(T(1) - fx), -fx, T(1) - fx, fx};
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] < 0) continue;
    const T* texel = map + static_cast<long long>(taps.index[t]) * channels;
    T along = T(0);
    for (int c = 0; c < channels; ++c) along += grad[c] * texel[c];
    *g_x += slope_x[t] * along;
    *g_y += slope_y[t] * along;
  }
}

// Channel c of a channels-last map (texel-major, `channels` values per texel).
template <typename T>
MVIBR_HD T bilinear_read(const BilinearTaps<T>& taps, const T* map, int channels, int c) {
  T value = T(0);
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] >= 0) {
      value += taps.weight[t] * map[static_cast<long long>(taps.index[t]) * channels + c];
    }
  }
  return value;
}

// All channels at once, tap by tap: the same sums as bilinear_read (taps in the same order), in
// a loop over contiguous channels that the compiler vectorises.
template <typename T>
MVIBR_HD void bilinear_read_all(const BilinearTaps<T>& taps, const T* map, int channels, T* out) {
  for (int c = 0; c < channels; ++c) out[c] = T(0);
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] < 0) continue;
    const T* texel = map + static_cast<long long>(taps.index[t]) * channels;
    const T w = taps.weight[t];
    for (int c = 0; c < channels; ++c) out[c] += w * texel[c];
  }
}

// How the direction feature normalises: IBRNet's Projector divides by |x| + 1e-6 and clamps the
// difference's length at 1e-6; DynIBaR's uses F.normalize, x / max(|x|, 1e-12), throughout.
enum class DirectionNormalisation { kIbrnet, kDynibar };

// The 4-value direction feature: the unit difference of the directions to the target camera
// centre (from the sample at the target's time) and to the source camera centre (from where the
// source view sees it: the same point but for DynIBaR's moving samples), and their dot product.
template <typename T>
MVIBR_HD void ray_direction_difference(Vec3<T> target_center, Vec3<T> target_point,
                                       Vec3<T> source_center, Vec3<T> source_point,
                                       DirectionNormalisation style, T out[4]) {
  const bool ibrnet = style == DirectionNormalisation::kIbrnet;
  const auto unit = [&](Vec3<T> x) {
    const T length = norm(x);
    return (T(1) / (ibrnet ? length + T(1e-6) : (length > T(1e-12) ? length : T(1e-12)))) * x;
  };
  const Vec3<T> to_target = unit(target_center - target_point);
  const Vec3<T> to_source = unit(source_center - source_point);
  const Vec3<T> difference = to_target - to_source;
  const T length = norm(difference);
  const T floor = ibrnet ? T(1e-6) : T(1e-12);
  const T inv_length = T(1) / (length > floor ? length : floor);
  out[0] = difference.x * inv_length;
  out[1] = difference.y * inv_length;
  out[2] = difference.z * inv_length;
  out[3] = dot(to_target, to_source);
}

// DynIBaR's mask_rgb for the static network: a view counts where it sees the sample and its colour
// there is not black (the moving pixels are blacked out of the static sources). `rgb` is the
// gathered row's colour, `seen` the gather's mask.
constexpr float kUnseenColourSum = 1e-3f;

template <typename T>
MVIBR_HD T seen_colour_mask(const T* rgb, T seen) {
  return rgb[0] + rgb[1] + rgb[2] > T(kUnseenColourSum) ? seen : T(0);
}

}  // namespace mvibr
