// DynIBaR's rendered optical flow (render_ray.py's compute_optical_flow), per (offset, ray).
// - The ray's expected point at a source view's time, e = sum_s w_s p_s over its samples moved
//   to that time, projected into that view's camera, minus the target pixel: the flow the
//   flow loss compares with the precomputed one.
// - As published, the projection divides by the camera depth unclamped (no 1e-8 floor, no
//   +-1e6 clamp): an expected point behind the camera gives a wild flow, as it does there.
// - The backward gives the weights' and the points' gradients.
#pragma once

#include <cstddef>

#include "mvibr/core/hd.h"
#include "mvibr/geom/camera.h"

namespace mvibr {

// flow [2] of one (offset, ray): weights [S], points [S, 3] (the ray's samples at the view's
// time), pixel [2] (u, v) of the target ray.
template <typename T>
MVIBR_HD void rendered_flow(int n_samples, const T* weights, const T* points,
                            const PinholeCamera<T>& camera, const T* pixel, T* flow) {
  Vec3<T> e{T(0), T(0), T(0)};
  for (int s = 0; s < n_samples; ++s) {
    e = e + weights[s] * Vec3<T>{points[3 * s], points[3 * s + 1], points[3 * s + 2]};
  }
  const Vec3<T> c = transform_point(camera.w2c, e);
  flow[0] = (camera.fx * c.x + camera.cx * c.z) / c.z - pixel[0];
  flow[1] = (camera.fy * c.y + camera.cy * c.z) / c.z - pixel[1];
}

// Its backward from grad_flow [2]: grad_weights [S] accumulate (+=), grad_points [S, 3] are
// overwritten; either may be null.
template <typename T>
MVIBR_HD void rendered_flow_backward(int n_samples, const T* weights, const T* points,
                                     const PinholeCamera<T>& camera, const T* grad_flow,
                                     T* grad_weights, T* grad_points) {
  Vec3<T> e{T(0), T(0), T(0)};
  for (int s = 0; s < n_samples; ++s) {
    e = e + weights[s] * Vec3<T>{points[3 * s], points[3 * s + 1], points[3 * s + 2]};
  }
  const Vec3<T> c = transform_point(camera.w2c, e);
  const T u = (camera.fx * c.x + camera.cx * c.z) / c.z;
  const T v = (camera.fy * c.y + camera.cy * c.z) / c.z;
  const T g_u = grad_flow[0], g_v = grad_flow[1];
  const Vec3<T> g_c{g_u * camera.fx / c.z, g_v * camera.fy / c.z,
                    (g_u * (camera.cx - u) + g_v * (camera.cy - v)) / c.z};
  const T* m = camera.w2c;  // the world gradient is R^T g_c
  const Vec3<T> g_e{m[0] * g_c.x + m[4] * g_c.y + m[8] * g_c.z,
                    m[1] * g_c.x + m[5] * g_c.y + m[9] * g_c.z,
                    m[2] * g_c.x + m[6] * g_c.y + m[10] * g_c.z};
  for (int s = 0; s < n_samples; ++s) {
    const T* p = points + 3 * s;
    if (grad_weights) grad_weights[s] += g_e.x * p[0] + g_e.y * p[1] + g_e.z * p[2];
    if (grad_points) {
      grad_points[3 * s] = weights[s] * g_e.x;
      grad_points[3 * s + 1] = weights[s] * g_e.y;
      grad_points[3 * s + 2] = weights[s] * g_e.z;
    }
  }
}

}  // namespace mvibr
