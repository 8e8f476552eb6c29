// DynIBaR's scene motion for a chunk of samples (dynibar_motion.h).
#include "mvibr/nn/dynibar_motion.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mvibr/core/error.h"
#include "mvibr/nn/trajectory.h"

namespace mvibr::nn {

int static_far_samples(int n_samples) {
  return int(std::nearbyint(double(n_samples) * 0.1));  // the default mode rounds half to even
}

DynibarMotion::DynibarMotion(const MotionMlp& mlp, int frames) : mlp_(mlp), frames_(frames) {
  if (frames <= mlp.options().basis) {
    throw InvalidArgument("DynIBaR motion: a basis of " + std::to_string(mlp.options().basis) +
                          " trajectories needs more than that many frames, not " +
                          std::to_string(frames));
  }
  if (mlp.options().inputs != 4) {
    throw InvalidArgument("DynIBaR motion: the motion MLP must take (x, y, z, t)");
  }
}

template <typename T>
void DynibarMotion::forward(const T* mlp_params, const T* basis, int n_rays, int n_samples,
                            const T* points, T time, int frame, const std::vector<int>& to_frames,
                            T* moved, DynibarMotionWorkspace<T>* ws) const {
  const MotionMlpCalls<T> cpu_mlp{[&](size_t n, const T* xyzt, T* coefficients) {
                                    ws->saved.resize(mlp_.saved_size(n));
                                    mlp_.forward(mlp_params, n, xyzt, ws->saved.data(),
                                                 coefficients);
                                  },
                                  {}};
  forward(cpu_mlp, basis, n_rays, n_samples, points, time, frame, to_frames, moved, ws);
}

template <typename T>
void DynibarMotion::backward(const T* mlp_params, T* mlp_grads, const T* basis, T* grad_basis,
                             const DynibarMotionWorkspace<T>& ws, const T* grad_moved,
                             T* grad_points) const {
  const MotionMlpCalls<T> cpu_mlp{{}, [&](size_t n, const T* grad_coefficients, T* grad_xyzt) {
                                    std::vector<T> scratch(mlp_.scratch_size(n));
                                    mlp_.backward(mlp_params, mlp_grads, n, ws.saved.data(),
                                                  grad_coefficients, grad_xyzt, scratch.data());
                                  }};
  backward(cpu_mlp, basis, grad_basis, ws, grad_moved, grad_points);
}

template <typename T>
void DynibarMotion::forward(const MotionMlpCalls<T>& mlp, const T* basis, int n_rays, int n_samples,
                            const T* points, T time, int frame, const std::vector<int>& to_frames,
                            T* moved, DynibarMotionWorkspace<T>* ws) const {
  const auto check = [&](int f) {
    if (f < 0 || f >= frames_) {
      throw InvalidArgument("DynIBaR motion: frame " + std::to_string(f) + " is outside the " +
                            std::to_string(frames_) + " frames of the basis");
    }
  };
  check(frame);
  for (int f : to_frames) check(f);
  const size_t n = size_t(n_rays) * size_t(n_samples), width = size_t(mlp_.outputs());
  ws->n_rays = n_rays;
  ws->n_samples = n_samples;
  ws->frame = frame;
  ws->to_frames = to_frames;
  ws->coefficients.resize(n * width);
  std::vector<T> xyzt(n * 4);
  for (size_t p = 0; p < n; ++p) {
    std::copy(points + 3 * p, points + 3 * p + 3, xyzt.data() + 4 * p);
    xyzt[4 * p + 3] = time;
  }
  mlp.forward(n, xyzt.data(), ws->coefficients.data());
  const int far = static_far_samples(n_samples);
  for (int r = 0; r < n_rays; ++r) {
    T* first = ws->coefficients.data() + (size_t(r) * n_samples + size_t(n_samples - far)) * width;
    std::fill(first, first + size_t(far) * width, T(0));
  }
  for (size_t o = 0; o < to_frames.size(); ++o) {
    T* out = moved + o * n * 3;
    trajectory_displacement(n, mlp_.options().basis, ws->coefficients.data(), basis, frame,
                            to_frames[o], out);
    for (size_t i = 0; i < n * 3; ++i) out[i] += points[i];
  }
}

template <typename T>
void DynibarMotion::backward(const MotionMlpCalls<T>& mlp, const T* basis, T* grad_basis,
                             const DynibarMotionWorkspace<T>& ws, const T* grad_moved,
                             T* grad_points) const {
  const size_t n = size_t(ws.n_rays) * size_t(ws.n_samples), width = size_t(mlp_.outputs());
  std::vector<T> grad_coefficients(n * width, T(0));
  for (size_t o = 0; o < ws.to_frames.size(); ++o) {
    trajectory_displacement_backward(n, mlp_.options().basis, ws.coefficients.data(), basis,
                                     ws.frame, ws.to_frames[o], grad_moved + o * n * 3,
                                     grad_coefficients.data(), grad_basis);
  }
  const int far = static_far_samples(ws.n_samples);  // held at zero: no gradient reaches the MLP
  for (int r = 0; r < ws.n_rays; ++r) {
    T* first =
        grad_coefficients.data() + (size_t(r) * ws.n_samples + size_t(ws.n_samples - far)) * width;
    std::fill(first, first + size_t(far) * width, T(0));
  }
  std::vector<T> grad_xyzt(grad_points ? n * 4 : 0);
  mlp.backward(n, grad_coefficients.data(), grad_points ? grad_xyzt.data() : nullptr);
  if (!grad_points) return;
  for (size_t p = 0; p < n; ++p) {
    for (size_t a = 0; a < 3; ++a) {
      T sum = grad_xyzt[4 * p + a];
      for (size_t o = 0; o < ws.to_frames.size(); ++o) sum += grad_moved[(o * n + p) * 3 + a];
      grad_points[3 * p + a] = sum;
    }
  }
}

#define MVIBR_DYNIBAR_MOTION(T)                                                                   \
  template void DynibarMotion::forward(const T*, const T*, int, int, const T*, T, int,            \
                                       const std::vector<int>&, T*, DynibarMotionWorkspace<T>*)   \
      const;                                                                                      \
  template void DynibarMotion::backward(const T*, T*, const T*, T*,                               \
                                        const DynibarMotionWorkspace<T>&, const T*, T*) const;    \
  template void DynibarMotion::forward(const MotionMlpCalls<T>&, const T*, int, int, const T*, T, \
                                       int, const std::vector<int>&, T*,                          \
                                       DynibarMotionWorkspace<T>*) const;                         \
  template void DynibarMotion::backward(const MotionMlpCalls<T>&, const T*, T*,                   \
                                        const DynibarMotionWorkspace<T>&, const T*, T*) const;
MVIBR_DYNIBAR_MOTION(float)
MVIBR_DYNIBAR_MOTION(double)
#undef MVIBR_DYNIBAR_MOTION

}  // namespace mvibr::nn
