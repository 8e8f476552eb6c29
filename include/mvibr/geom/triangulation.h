// Confidence-weighted triangulation of a joint from V calibrated views (learnable
// triangulation's algebraic DLT, karfly/learnable-triangulation-pytorch), solved by 3x3 normal
// equations, with its backward by implicit differentiation; and the confidences-to-weights step
// in front of it.
// - View v sees the joint at pixel (u, v) through P (3x4, K [R|t] in pixels, rows P1 P2 P3):
//   a1 = u P3 - P1, a2 = v P3 - P2, each of its two rows weighted by c_v (the published A).
// - mvibr fixes X = [x; 1] and minimises sum_v c_v^2 ((a1 . X)^2 + (a2 . X)^2): M x = r with
//   M = sum_v c_v^2 sum_k a_k[:3] a_k[:3]^T, r = -sum_v c_v^2 sum_k a_k[3] a_k[:3]. For exact
//   2D points both this and the published SVD of A give the joint; under noise they minimise
//   the same algebraic error under different normalisations (X4 = 1 against |X| = 1).
// - Backward: F(x, theta) = sum_v c_v^2 sum_k e_k a_k[:3] = 0, e_k = a_k . X, so with
//   lambda = M^-1 dL/dx (M is symmetric):
//     dL/dc_v = -2 c_v sum_k e_k (lambda . a_k[:3])
//     dL/du_v = -c_v^2 ((P3 . X)(lambda . a1[:3]) + e1 (lambda . P3[:3]))   (v_v: a2, e2)
// - M is solved by its adjugate, after dividing it by its trace (no overflow or underflow at
//   any pixel or metre scale), not by Cholesky: the adjugate gives the reciprocal condition number
//   det / (|M|_F |adj M|_F) for a few more products, a singularity test that does not depend on
//   the world's axes. Unpivoted Cholesky's pivots do not reveal the rank: a one-view M (rank 2)
//   left relative pivots up to 6e-10 in double and 0.16 in float when its null direction (the
//   view's ray) lay near a coordinate plane; pivoting would fix that at the cost of a
//   permutation. On a camera ring's M it solves to rounding (pose_layers_test: exact joints
//   come back to 1.2e-15 relative in double, 7e-8 in float).
// - The per-joint solve computes in double whatever T is: it is O(V) per joint beside a network
//   of O(pixels) per view, and in float M's reciprocal condition would fall below float's
//   resolution for weights as uneven as 1 : 1e-3 (about 1e-6 on a 4-view ring), and dL/dc_v,
//   proportional to the reprojection residuals, would keep only about 1e-4 px of them.
// - A joint is not ok when that reciprocal condition number is at or below kConditionTolerance
//   (fewer than two views with weight, or views that all see it along one ray) or when anything
//   read is not finite; it then gets x = 0 and zero gradients, and the caller must mask it out.
// Everything per joint is MVIBR_HD with fixed-size locals, so CUDA kernels can run it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mvibr/core/hd.h"
#include "mvibr/geom/camera.h"

namespace mvibr {

// What learnable triangulation adds to the normalised confidences "for numerical stability".
constexpr double kTriangulationWeightEpsilon = 1e-5;

// True unless x is NaN or infinite (x - x is NaN then); usable in device code.
template <typename T>
MVIBR_HD bool is_finite(T x) {
  return x - x == T(0);
}

// The smallest reciprocal condition number accepted: 64 units of double's rounding, so that
// the rounding noise left in a rank-deficient M (at most 5e-17, pose_layers_test) is refused and
// every well-posed camera layout passes by orders of magnitude.
constexpr double kConditionTolerance = 64 * 2.220446049250313e-16;

// P = K [R|t] of a camera, row-major 3x4 (12 values), in mvibr's pixel convention (integer
// coordinates at pixel centres, camera.h): (u, v) = (P1 . X, P2 . X) / (P3 . X).
template <typename T>
MVIBR_HD void projection_matrix(const PinholeCamera<T>& camera, T* projection) {
  const T* w = camera.w2c;
  for (int c = 0; c < 4; ++c) {
    projection[c] = camera.fx * w[c] + camera.cx * w[8 + c];
    projection[4 + c] = camera.fy * w[4 + c] + camera.cy * w[8 + c];
    projection[8 + c] = w[8 + c];
  }
}

// A symmetric 3x3 matrix by its lower triangle.
template <typename T>
struct Symmetric3 {
  T xx = T(0), yx = T(0), yy = T(0), zx = T(0), zy = T(0), zz = T(0);
};

// M^-1 as adj(M') / det(M') of M' = M / trace(M): scaled so that no product of entries can
// overflow or underflow in T whatever the pixel and metre scales.
template <typename T>
struct SymmetricInverse3 {
  Symmetric3<T> adjugate;
  T scale;  // 1 / (trace(M) det(M')): M^-1 = scale adjugate
};

// Frobenius norm.
template <typename T>
MVIBR_HD T frobenius_norm(const Symmetric3<T>& m) {
  return std::sqrt(m.xx * m.xx + m.yy * m.yy + m.zz * m.zz +
                   T(2) * (m.yx * m.yx + m.zx * m.zx + m.zy * m.zy));
}

// False when M is numerically singular, det(M') <= tolerance |M'| |adj M'| (the reciprocal
// condition number in the Frobenius norm, about lambda_min / lambda_max, and independent of the
// world's axes), or not finite.
template <typename T>
MVIBR_HD bool invert_symmetric_3x3(const Symmetric3<T>& m, SymmetricInverse3<T>* inverse) {
  const T trace = m.xx + m.yy + m.zz;
  if (!(is_finite(trace) && trace > T(0))) return false;
  const T s = T(1) / trace;
  const Symmetric3<T> n{s * m.xx, s * m.yx, s * m.yy, s * m.zx, s * m.zy, s * m.zz};
  Symmetric3<T>& a = inverse->adjugate;
  a.xx = n.yy * n.zz - n.zy * n.zy;
  a.yx = n.zy * n.zx - n.yx * n.zz;
  a.yy = n.xx * n.zz - n.zx * n.zx;
  a.zx = n.yx * n.zy - n.yy * n.zx;
  a.zy = n.yx * n.zx - n.xx * n.zy;
  a.zz = n.xx * n.yy - n.yx * n.yx;
  const T determinant = n.xx * a.xx + n.yx * a.yx + n.zx * a.zx;
  inverse->scale = s / determinant;
  return is_finite(determinant) &&
         determinant > T(kConditionTolerance) * frobenius_norm(n) * frobenius_norm(a);
}

template <typename T>
MVIBR_HD void apply_inverse(const SymmetricInverse3<T>& inverse, const T* b, T* x) {
  const Symmetric3<T>& a = inverse.adjugate;
  x[0] = inverse.scale * (a.xx * b[0] + a.yx * b[1] + a.zx * b[2]);
  x[1] = inverse.scale * (a.yx * b[0] + a.yy * b[1] + a.zy * b[2]);
  x[2] = inverse.scale * (a.zx * b[0] + a.zy * b[1] + a.zz * b[2]);
}

// Where one joint's views are: view v's projection at projections[12 v], its pixel at
// points[point_stride v] (u, then v), its weight at weights[weight_stride v]. The batched layouts
// [B, V, J, 2] and [B, V, J] give strides 2 J and J.
template <typename T>
struct JointViews {
  int n_views;
  const T* projections;
  const T* points;
  int point_stride;
  const T* weights;
  int weight_stride;
};

// Joint j of sample b in the batched layouts (projections [B, V, 3, 4], points [B, V, J, 2],
// weights [B, V, J]); `first` of [b, 0, j] is its view 0's index into weights.
template <typename T>
MVIBR_HD JointViews<T> batch_joint_views(int b, int j, int views, int joints, const T* projections,
                                         const T* points, const T* weights) {
  const size_t first = size_t(b) * views * joints + size_t(j);
  return {
      views, projections + size_t(b) * views * 12, points + 2 * first, 2 * joints, weights + first,
      joints};
}

template <typename T>
MVIBR_HD T dot3(const T* a, const T* b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

// View v's two DLT rows, a1 = u P3 - P1, a2 = v P3 - P2, and its weight, in double.
template <typename T>
MVIBR_HD double dlt_rows(const JointViews<T>& views, int v, double* a1, double* a2) {
  const T* p = views.projections + 12 * size_t(v);
  const double u = double(views.points[size_t(views.point_stride) * v]);
  const double w = double(views.points[size_t(views.point_stride) * v + 1]);
  for (int c = 0; c < 4; ++c) {
    a1[c] = u * double(p[8 + c]) - double(p[c]);
    a2[c] = w * double(p[8 + c]) - double(p[4 + c]);
  }
  return double(views.weights[size_t(views.weight_stride) * v]);
}

// M and r of the normal equations, summed over the views in order, in double.
template <typename T>
MVIBR_HD void normal_equations(const JointViews<T>& views, Symmetric3<double>* m, double* r) {
  *m = Symmetric3<double>{};
  r[0] = r[1] = r[2] = 0;
  for (int v = 0; v < views.n_views; ++v) {
    double rows[2][4];
    const double c = dlt_rows(views, v, rows[0], rows[1]);
    const double c2 = c * c;
    for (const double* a : rows) {
      m->xx += c2 * a[0] * a[0];
      m->yx += c2 * a[1] * a[0];
      m->yy += c2 * a[1] * a[1];
      m->zx += c2 * a[2] * a[0];
      m->zy += c2 * a[2] * a[1];
      m->zz += c2 * a[2] * a[2];
      for (int i = 0; i < 3; ++i) r[i] -= c2 * a[3] * a[i];
    }
  }
}

// The joint in world coordinates (3 values). Returns false, and writes 0, when M is singular or
// anything read is not finite.
template <typename T>
MVIBR_HD bool triangulate_joint(const JointViews<T>& views, T* joint) {
  Symmetric3<double> m;
  double r[3], x[3];
  normal_equations(views, &m, r);
  SymmetricInverse3<double> inverse;
  if (invert_symmetric_3x3(m, &inverse)) {
    apply_inverse(inverse, r, x);
    for (int i = 0; i < 3; ++i) joint[i] = T(x[i]);
    if (is_finite(joint[0]) && is_finite(joint[1]) && is_finite(joint[2])) return true;
  }
  joint[0] = joint[1] = joint[2] = T(0);
  return false;
}

// Gradients of L into every view's pixel (grad_points, same strides as points) and weight
// (grad_weights, same stride as weights) given dL/djoint. Solves for the joint again, in double
// (a mat-vec with the inverse it needs anyway), rather than reading the forward's rounded one.
// Overwrites its outputs (zeros where the joint is not ok, which this decides as the forward
// did) and returns ok.
template <typename T>
MVIBR_HD bool triangulate_joint_backward(const JointViews<T>& views, const T* grad_joint,
                                         T* grad_points, T* grad_weights) {
  Symmetric3<double> m;
  double r[3], x[3] = {0, 0, 0}, lambda[3] = {0, 0, 0};
  normal_equations(views, &m, r);
  SymmetricInverse3<double> inverse;
  bool ok = invert_symmetric_3x3(m, &inverse);
  if (ok) {
    const double g[3] = {double(grad_joint[0]), double(grad_joint[1]), double(grad_joint[2])};
    apply_inverse(inverse, r, x);
    apply_inverse(inverse, g, lambda);
    ok = is_finite(T(x[0])) && is_finite(T(x[1])) && is_finite(T(x[2])) && is_finite(lambda[0]) &&
         is_finite(lambda[1]) && is_finite(lambda[2]);
  }
  for (int v = 0; v < views.n_views; ++v) {
    T* grad_point = grad_points + size_t(views.point_stride) * v;
    T* grad_weight = grad_weights + size_t(views.weight_stride) * v;
    if (!ok) {
      grad_point[0] = grad_point[1] = *grad_weight = T(0);
      continue;
    }
    const T* p = views.projections + 12 * size_t(v);
    const double p3[4] = {double(p[8]), double(p[9]), double(p[10]), double(p[11])};
    double a1[4], a2[4];
    const double c = dlt_rows(views, v, a1, a2);
    const double e1 = dot3(a1, x) + a1[3];
    const double e2 = dot3(a2, x) + a2[3];
    const double depth = dot3(p3, x) + p3[3];  // P3 . X
    const double lambda_a1 = dot3(lambda, a1), lambda_a2 = dot3(lambda, a2);
    const double lambda_p3 = dot3(lambda, p3);
    grad_point[0] = T(-c * c * (depth * lambda_a1 + e1 * lambda_p3));
    grad_point[1] = T(-c * c * (depth * lambda_a2 + e2 * lambda_p3));
    *grad_weight = T(-2 * c * (e1 * lambda_a1 + e2 * lambda_a2));
  }
  return ok;
}

// One (sample, joint)'s weights from its V confidences (stride between views):
// w_v = c_v / sum_u c_u + 1e-5 (AlgebraicTriangulationNet). A zero sum gives non-finite weights,
// which the triangulation then flags.
template <typename T>
MVIBR_HD void triangulation_weights(int n_views, const T* confidences, int stride, T* weights) {
  T sum = T(0);
  for (int v = 0; v < n_views; ++v) sum += confidences[size_t(stride) * v];
  for (int v = 0; v < n_views; ++v) {
    weights[size_t(stride) * v] =
        confidences[size_t(stride) * v] / sum + T(kTriangulationWeightEpsilon);
  }
}

// dL/dc_u = (g_u - sum_v g_v c_v / S) / S, S = sum_v c_v; overwrites grad_confidences.
template <typename T>
MVIBR_HD void triangulation_weights_backward(int n_views, const T* confidences, int stride,
                                             const T* grad_weights, T* grad_confidences) {
  T sum = T(0), weighted = T(0);
  for (int v = 0; v < n_views; ++v) {
    sum += confidences[size_t(stride) * v];
    weighted += grad_weights[size_t(stride) * v] * confidences[size_t(stride) * v];
  }
  const T mean_gradient = weighted / sum;
  for (int v = 0; v < n_views; ++v) {
    grad_confidences[size_t(stride) * v] = (grad_weights[size_t(stride) * v] - mean_gradient) / sum;
  }
}

namespace cpu {

// The batch on the CPU, OpenMP over (sample, joint). confidences, weights [B, V, J];
// points [B, V, J, 2] (pixels); projections [B, V, 3, 4]; joints_3d [B, J, 3]; ok [B, J] (1 ok,
// 0 not). The backward needs no saved state (it solves again) and overwrites its outputs;
// triangulate_joints(_backward) return the number of joints not ok (the same joints in both).
template <typename T>
void triangulation_weights(int batch, int views, int joints, const T* confidences, T* weights);
template <typename T>
void triangulation_weights_backward(int batch, int views, int joints, const T* confidences,
                                    const T* grad_weights, T* grad_confidences);
template <typename T>
int triangulate_joints(int batch, int views, int joints, const T* projections, const T* points,
                       const T* weights, T* joints_3d, uint8_t* ok);
template <typename T>
int triangulate_joints_backward(int batch, int views, int joints, const T* projections,
                                const T* points, const T* weights, const T* grad_joints_3d,
                                T* grad_points, T* grad_weights);

}  // namespace cpu

}  // namespace mvibr
