// Plucker coordinates of rays, DynIBaR's ray geometry for its static network
// (render_ray.py's compute_ref_plucker_coordinate and compute_src_plucker_coordinate).
// - [direction, moment]: the unit direction d and the moment o x d of a ray through o. The moment
//   is the same from any point of the ray, so the six values name the line, not a point on it.
// - Directions are normalised as F.normalize does: d / max(|d|, 1e-12).
#pragma once

#include "mvibr/core/hd.h"
#include "mvibr/geom/camera.h"

namespace mvibr {

template <typename T>
MVIBR_HD Vec3<T> cross(Vec3<T> a, Vec3<T> b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}

// out [6] of the ray from `origin` along `direction` (any length).
template <typename T>
MVIBR_HD void plucker_coordinates(Vec3<T> origin, Vec3<T> direction, T* out) {
  const T length = norm(direction);
  const Vec3<T> d = (T(1) / (length > T(1e-12) ? length : T(1e-12))) * direction;
  const Vec3<T> m = cross(origin, d);
  out[0] = d.x;
  out[1] = d.y;
  out[2] = d.z;
  out[3] = m.x;
  out[4] = m.y;
  out[5] = m.z;
}

// out [6] of a source camera's ray through a point: from the camera centre towards the point.
template <typename T>
MVIBR_HD void source_plucker_coordinates(Vec3<T> center, Vec3<T> point, T* out) {
  plucker_coordinates(center, point - center, out);
}

}  // namespace mvibr
