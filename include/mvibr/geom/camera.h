// Pinhole cameras in the OpenCV convention (x right, y down, z forward), as IBRNet stores them.
// A ray's direction has camera-z component 1, so a depth along it is the camera-z depth.
#pragma once

#include <cmath>

#include "mvibr/core/hd.h"

namespace mvibr {

template <typename T>
struct Vec3 {
  T x, y, z;
};

template <typename T>
MVIBR_HD Vec3<T> operator+(Vec3<T> a, Vec3<T> b) {
  return {a.x + b.x, a.y + b.y, a.z + b.z};
}
template <typename T>
MVIBR_HD Vec3<T> operator-(Vec3<T> a, Vec3<T> b) {
  return {a.x - b.x, a.y - b.y, a.z - b.z};
}
template <typename T>
MVIBR_HD Vec3<T> operator*(T s, Vec3<T> a) {
  return {s * a.x, s * a.y, s * a.z};
}
template <typename T>
MVIBR_HD T dot(Vec3<T> a, Vec3<T> b) {
  return a.x * b.x + a.y * b.y + a.z * b.z;
}
template <typename T>
MVIBR_HD T norm(Vec3<T> a) {
  return std::sqrt(dot(a, a));
}

// Intrinsics, both poses (camera-to-world and its rigid inverse) and the image size.
// Poses are the top 3x4 of the 4x4 matrix, row-major.
template <typename T>
struct PinholeCamera {
  T fx, fy, cx, cy;
  T c2w[12];
  T w2c[12];
  int width, height;

  MVIBR_HD Vec3<T> center() const { return {c2w[3], c2w[7], c2w[11]}; }
};

// Fills w2c from c2w (R^T, -R^T t); the caller has checked that c2w is rigid.
template <typename T>
inline void set_world_to_camera(PinholeCamera<T>* camera) {
  const T* m = camera->c2w;
  T* w = camera->w2c;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) w[r * 4 + c] = m[c * 4 + r];
    w[r * 4 + 3] = -(m[0 * 4 + r] * m[3] + m[1 * 4 + r] * m[7] + m[2 * 4 + r] * m[11]);
  }
}

template <typename T>
MVIBR_HD Vec3<T> rotate(const T* m, Vec3<T> v) {
  return {m[0] * v.x + m[1] * v.y + m[2] * v.z, m[4] * v.x + m[5] * v.y + m[6] * v.z,
          m[8] * v.x + m[9] * v.y + m[10] * v.z};
}

template <typename T>
MVIBR_HD Vec3<T> transform_point(const T* m, Vec3<T> p) {
  const Vec3<T> r = rotate(m, p);
  return {r.x + m[3], r.y + m[7], r.z + m[11]};
}

// The ray through pixel coordinate (u, v). mvibr puts integer coordinates at pixel centres
// (IBRNet's pixel grids and its align_corners=True projector); importers shift principal points
// given in a corner convention by -0.5 (data/importers.h).
template <typename T>
MVIBR_HD void pixel_to_ray(const PinholeCamera<T>& camera, T u, T v, Vec3<T>* origin,
                           Vec3<T>* direction) {
  const Vec3<T> d_camera{(u - camera.cx) / camera.fx, (v - camera.cy) / camera.fy, T(1)};
  *origin = camera.center();
  *direction = rotate(camera.c2w, d_camera);
}

// Ray r of a batch: pixel (pixels[2r], pixels[2r+1]) to origins[3r..] and directions[3r..].
template <typename T>
MVIBR_HD void store_pixel_ray(const PinholeCamera<T>& camera, const T* pixels, size_t r, T* origins,
                              T* directions) {
  Vec3<T> o, d;
  pixel_to_ray(camera, pixels[2 * r], pixels[2 * r + 1], &o, &d);
  origins[3 * r] = o.x;
  origins[3 * r + 1] = o.y;
  origins[3 * r + 2] = o.z;
  directions[3 * r] = d.x;
  directions[3 * r + 1] = d.y;
  directions[3 * r + 2] = d.z;
}

}  // namespace mvibr

namespace mvibr {

template <typename To, typename From>
PinholeCamera<To> camera_cast(const PinholeCamera<From>& c) {
  PinholeCamera<To> out;
  out.fx = To(c.fx);
  out.fy = To(c.fy);
  out.cx = To(c.cx);
  out.cy = To(c.cy);
  for (int i = 0; i < 12; ++i) {
    out.c2w[i] = To(c.c2w[i]);
    out.w2c[i] = To(c.w2c[i]);
  }
  out.width = c.width;
  out.height = c.height;
  return out;
}

// A camera at `eye` looking at `target`, image y pointing along -up (OpenCV axes).
template <typename T>
PinholeCamera<T> look_at_camera(Vec3<T> eye, Vec3<T> target, Vec3<T> up, T focal, int width,
                                int height) {
  const auto normalized = [](Vec3<T> a) { return (T(1) / norm(a)) * a; };
  const auto cross = [](Vec3<T> a, Vec3<T> b) {
    return Vec3<T>{a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
  };
  const Vec3<T> z = normalized(target - eye);
  const Vec3<T> x = normalized(cross(T(-1) * up, z));
  const Vec3<T> y = cross(z, x);
  PinholeCamera<T> camera;
  camera.fx = camera.fy = focal;
  camera.cx = T(0.5) * T(width - 1);
  camera.cy = T(0.5) * T(height - 1);
  const T c2w[12] = {x.x, y.x, z.x, eye.x, x.y, y.y, z.y, eye.y, x.z, y.z, z.z, eye.z};
  for (int i = 0; i < 12; ++i) camera.c2w[i] = c2w[i];
  camera.width = width;
  camera.height = height;
  set_world_to_camera(&camera);
  return camera;
}

}  // namespace mvibr
