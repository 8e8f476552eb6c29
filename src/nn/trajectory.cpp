// DynIBaR's trajectory basis and displacements (see trajectory.h): short loops over K per axis,
// in the order the published code sums them (torch.sum over K of coefficient x basis row).
#include "mvibr/nn/trajectory.h"

#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {

std::vector<double> dct_trajectory_basis(int frames, int basis) {
  if (basis < 1 || basis >= frames) {
    throw InvalidArgument("trajectory basis: needs 1 <= basis (" + std::to_string(basis) +
                          ") < frames (" + std::to_string(frames) + ")");
  }
  const double pi = std::acos(-1.0);
  std::vector<double> b(size_t(frames) * size_t(basis));
  for (int t = 0; t < frames; ++t) {
    for (int k = 1; k <= basis; ++k) {
      b[size_t(t) * size_t(basis) + size_t(k - 1)] =
          std::sqrt(2.0 / frames) * std::cos(pi / (2.0 * frames) * (2 * t + 1) * k);
    }
  }
  return b;
}

template <typename T>
void trajectory_displacement(size_t points, int basis, const T* coefficients,
                             const T* trajectory_basis, int from, int to, T* out) {
  const size_t K = size_t(basis);
  const T* b_from = trajectory_basis + size_t(from) * K;
  const T* b_to = trajectory_basis + size_t(to) * K;
  for (size_t p = 0; p < points; ++p) {
    for (size_t axis = 0; axis < 3; ++axis) {
      const T* c = coefficients + (p * 3 + axis) * K;
      T at_to = 0, at_from = 0;
      for (size_t k = 0; k < K; ++k) {
        at_to += c[k] * b_to[k];
        at_from += c[k] * b_from[k];
      }
      out[p * 3 + axis] = at_to - at_from;
    }
  }
}

template <typename T>
void trajectory_displacement_backward(size_t points, int basis, const T* coefficients,
                                      const T* trajectory_basis, int from, int to,
                                      const T* grad_out, T* grad_coefficients, T* grad_basis) {
  const size_t K = size_t(basis);
  const T* b_from = trajectory_basis + size_t(from) * K;
  const T* b_to = trajectory_basis + size_t(to) * K;
  for (size_t p = 0; p < points; ++p) {
    for (size_t axis = 0; axis < 3; ++axis) {
      const size_t row = p * 3 + axis;
      const T g = grad_out[row];
      const T* c = coefficients + row * K;
      for (size_t k = 0; k < K; ++k) {
        if (grad_coefficients) grad_coefficients[row * K + k] += g * (b_to[k] - b_from[k]);
        if (grad_basis) {
          grad_basis[size_t(to) * K + k] += g * c[k];
          grad_basis[size_t(from) * K + k] -= g * c[k];
        }
      }
    }
  }
}

#define MVIBR_TRAJECTORY(T)                                                                 \
  template void trajectory_displacement(size_t, int, const T*, const T*, int, int, T*);     \
  template void trajectory_displacement_backward(size_t, int, const T*, const T*, int, int, \
                                                 const T*, T*, T*);
MVIBR_TRAJECTORY(float)
MVIBR_TRAJECTORY(double)
#undef MVIBR_TRAJECTORY

}  // namespace mvibr::nn
