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

// The four taps of a bilinear read of a map of map_width x map_height texels at image pixel
// (u, v) of an image_width x image_height image. A tap outside the map has index -1 (it
// reads zero and receives no gradient).
template <typename T>
struct BilinearTaps {
  int index[4];  // texel index y * map_width + x, or -1
  T weight[4];
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
  return taps;
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

// IBRNet's 4-value direction feature: the unit difference of the directions from the sample
// to the target and to the source camera centres, and their dot product.
template <typename T>
MVIBR_HD void ray_direction_difference(Vec3<T> target_center, Vec3<T> source_center, Vec3<T> point,
                                       T out[4]) {
  Vec3<T> to_target = target_center - point;
  to_target = (T(1) / (norm(to_target) + T(1e-6))) * to_target;
  Vec3<T> to_source = source_center - point;
  to_source = (T(1) / (norm(to_source) + T(1e-6))) * to_source;
  const Vec3<T> difference = to_target - to_source;
  const T length = norm(difference);
  const T inv_length = T(1) / (length > T(1e-6) ? length : T(1e-6));
  out[0] = difference.x * inv_length;
  out[1] = difference.y * inv_length;
  out[2] = difference.z * inv_length;
  out[3] = dot(to_target, to_source);
}

}  // namespace mvibr
