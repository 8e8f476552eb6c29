// DynIBaR's scene motion for a chunk of samples (render_ray.py's render_rays_mono, its motion
// part): each sample's trajectory coefficients from the motion MLP at (x, y, z, t), the far end
// of every ray held static, and the sample moved along its trajectory to other frames; the
// backward into the MLP, the trajectory basis and the samples' own positions.
// - Far samples: the coefficients of the last round(0.1 S) samples of each ray are 0 (round half
//   to even, as Python's). The published slice [-0:] would zero every sample when that count is
//   0 (S < 5); here none is then.
// - moved[o] = x + sum_k c_k (B[to_o, k] - B[frame, k]) per axis (trajectory.h).
// - The positions' gradient (for points that were themselves moved: cross-time rendering's
//   anchor samples) sums the identity's part and the MLP input's.
// - No threads of its own, like MotionMlp: a model runs chunks of rays around it.
// - The MLP runs where its calls (MotionMlpCalls) run it: the CPU network, or a device's copy.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "mvibr/nn/motion_mlp.h"

namespace mvibr::nn {

// The samples of each ray whose coefficients are held at zero: the last round(0.1 n_samples).
int static_far_samples(int n_samples);

// What the forward keeps for the backward.
template <typename T>
struct DynibarMotionWorkspace {
  int n_rays = 0, n_samples = 0, frame = 0;
  std::vector<int> to_frames;
  std::vector<T> coefficients;  // [R S, 3 K], the far samples' zero
  std::vector<T> saved;         // the CPU MLP's
};

// The motion MLP where it runs: forward xyzt [n, 4] -> coefficients [n, 3 K] (overwritten),
// keeping what its backward needs; backward from grad_coefficients [n, 3 K], accumulating the
// MLP's parameter gradients where they live and overwriting grad_xyzt [n, 4] (null: skipped).
template <typename T>
struct MotionMlpCalls {
  std::function<void(size_t n, const T* xyzt, T* coefficients)> forward;
  std::function<void(size_t n, const T* grad_coefficients, T* grad_xyzt)> backward;
};

class DynibarMotion {
 public:
  // The MLP (whose run of the set is `mlp_params`) must outlive this; `frames` is the basis's rows.
  DynibarMotion(const MotionMlp& mlp, int frames);

  // points [R, S, 3] at time `time` of frame `frame` -> moved [O, R, S, 3] at to_frames[o].
  // InvalidArgument for a frame outside [0, frames).
  template <typename T>
  void forward(const T* mlp_params, const T* basis, int n_rays, int n_samples, const T* points,
               T time, int frame, const std::vector<int>& to_frames, T* moved,
               DynibarMotionWorkspace<T>* workspace) const;
  // From grad_moved [O, R, S, 3]: accumulates (+=) the MLP's and the basis's gradients and
  // overwrites grad_points [R, S, 3] (nullable: then the MLP's input gradient is skipped).
  template <typename T>
  void backward(const T* mlp_params, T* mlp_grads, const T* basis, T* grad_basis,
                const DynibarMotionWorkspace<T>& workspace, const T* grad_moved,
                T* grad_points) const;

  // The same with the MLP run by `mlp` (workspace.saved unused).
  template <typename T>
  void forward(const MotionMlpCalls<T>& mlp, const T* basis, int n_rays, int n_samples,
               const T* points, T time, int frame, const std::vector<int>& to_frames, T* moved,
               DynibarMotionWorkspace<T>* workspace) const;
  template <typename T>
  void backward(const MotionMlpCalls<T>& mlp, const T* basis, T* grad_basis,
                const DynibarMotionWorkspace<T>& workspace, const T* grad_moved,
                T* grad_points) const;

 private:
  const MotionMlp& mlp_;
  int frames_;
};

}  // namespace mvibr::nn
