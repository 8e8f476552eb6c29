// Cross-view fusion of multi-view heatmaps (Qiu et al., ICCV 2019, "Cross View Fusion for 3D
// Human Pose Estimation"; microsoft/multiview-human-pose-estimation-pytorch's Aggregation of
// ChannelWiseFC layers) and its hand-written backward.
// - Heatmaps are rows of pixels, [V, R, P]: view v's R rows (instants x joints), each a map of
//   P = Hf Wf cells in row-major order, as PyTorch's heatmaps.reshape(N C, H W).
// - One weight W_ts [P, P] per ordered pair of a target view t and a source view s != t, no bias,
//   shared by every row (every joint channel and instant): warped_ts[q] = sum_p h_s[p] W_ts[p, q].
//   Pair k = t (V - 1) + (s < t ? s : s - 1), the published order (each target in turn, with the
//   other views ascending), so "<prefix><k>.weight" is a published aggre_layer.aggre.<k>.weight.
//   A data set's camera rig is fixed, so a pair's map learns that pair's epipolar geometry.
// - fused_t = a_own h_t + a_other sum_{s != t} warped_ts, with fixed a_own = 0.4 and a_other =
//   0.6 / (V - 1): the published [0.4, 0.2, 0.2, 0.2] for its 4 cameras, kept a convex mix for
//   any V (the published list zips away a fifth view and under-weighs fewer than four).
// - Initialisation as published: every weight uniform in [0, 0.1).
// - Backward: dL/dh_s = a_own g_s + a_other sum_{t != s} g_t W_ts^T (overwritten) and
//   dL/dW_ts += a_other h_s^T g_t (accumulated), g_t = dL/dfused_t.
// - Each pair is a GEMM on cblas (OpenBLAS's threads): float, and double for the reference. The
//   GPU's (nn/cuda_pose.h) runs on the backbone's channels-last maps instead of rows.
#pragma once

#include <cstddef>

#include "mvibr/nn/layers.h"  // ParameterBlock, Initializer

namespace mvibr::nn {

class CrossViewFusion {
 public:
  static constexpr double kOwnWeight = 0.4;

  // Registers the V (V - 1) weights "<k>.weight" [P, P] back to back in `block`. Throws
  // InvalidArgument for fewer than two views or an empty map.
  CrossViewFusion(ParameterBlock& block, int views, int pixels);

  int views() const { return views_; }
  int pixels() const { return pixels_; }
  int pairs() const { return views_ * (views_ - 1); }
  double other_weight() const { return (1 - kOwnWeight) / (views_ - 1); }
  // The weight index k of target view t fused from source view s (s != t).
  int pair(int target, int source) const;
  // Where pair k's weight [P, P] starts in the block's values.
  size_t weight_offset(int pair) const {
    return weights_ + size_t(pair) * size_t(pixels_) * size_t(pixels_);
  }

  void initialize(float* params, Initializer& init) const;

  // heatmaps and fused [V, R, P] (views and pixels must be the layer's; InvalidArgument else).
  template <typename T>
  void forward(const T* params, int views, int rows, int pixels, const T* heatmaps, T* fused) const;
  // grad_heatmaps [V, R, P] is overwritten; the weights' gradients are added into grads.
  template <typename T>
  void backward(const T* params, T* grads, int views, int rows, int pixels, const T* heatmaps,
                const T* grad_fused, T* grad_heatmaps) const;

 private:
  void check(int views, int rows, int pixels) const;

  int views_, pixels_;
  size_t weights_;  // the first pair's offset in the block; pair k at weights_ + k P P
};

}  // namespace mvibr::nn
