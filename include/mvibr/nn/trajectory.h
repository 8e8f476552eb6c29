// DynIBaR's motion trajectories: a point's path over the video's frames as a learnable basis
// [frames, K] weighted by per-point coefficients, with the backward into both.
// - The basis starts as DCT-II columns k = 1..K (no DC term), orthonormal: DynIBaR's init.
// - Coefficients are [points, 3, K]: K for each axis (x, y, z).
// - A point's displacement from frame i to frame j is sum_k c_k (B[j, k] - B[i, k]).
#pragma once

#include <cstddef>
#include <vector>

namespace mvibr::nn {

// B[t, k - 1] = sqrt(2 / T) cos(pi / (2 T) (2 t + 1) k) for t < frames, k = 1..K.
// InvalidArgument unless 1 <= K < frames.
std::vector<double> dct_trajectory_basis(int frames, int basis);

// out [points, 3] = the displacements from frame `from` to frame `to`.
template <typename T>
void trajectory_displacement(size_t points, int basis, const T* coefficients,
                             const T* trajectory_basis, int from, int to, T* out);

// Given grad_out [points, 3]: grad_coefficients [points, 3, K] and grad_basis [frames, K]
// accumulate (+=); either may be null.
template <typename T>
void trajectory_displacement_backward(size_t points, int basis, const T* coefficients,
                                      const T* trajectory_basis, int from, int to,
                                      const T* grad_out, T* grad_coefficients, T* grad_basis);

}  // namespace mvibr::nn
