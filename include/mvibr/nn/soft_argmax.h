// Soft-argmax of heatmaps into 2D joints in image pixels (learnable triangulation's
// integrate_tensor_2d on heatmaps times heatmap_multiplier) and its backward.
// - Heatmaps are channels last, as the ResUNet gives them: [N, Hf, Wf, C]; channels [0, J) are
//   the J heatmaps, the rest (C > J) feed another head and are neither read nor written.
// - Per map: p = softmax(beta h) over the Hf Wf cells (the max subtracted, so any beta and any
//   finite h stay finite), x = sum p col, y = sum p row (the cell index at the cell's centre),
//   u = scale_x x + offset_x, v = scale_y y + offset_y. A NaN or +inf cell gives NaN (u, v),
//   which the triangulation flags; a -inf cell just gets p = 0.
// - Backward: dL/dh_i = beta p_i (g_x (col_i - x) + g_y (row_i - y)), g_x = scale_x dL/du. It
//   recomputes p from the heatmap (two passes over a map the forward just read) rather than
//   saving N J Hf Wf probabilities, and overwrites the J heatmap channels of its output.
//   Gradients below T's smallest normal are written as 0: at heatmap_multiplier 100 a peaked
//   map's p underflows, most cells' gradients came out subnormal, and the GEMMs and
//   convolutions after it ran 30-150x slower on them (OpenBLAS, oneDNN's 1x1 backward).
// The per-map math is MVIBR_HD (runtime sizes, no allocation), so CUDA kernels can run it; the
// CPU runs the same sums over all J maps of an image at once (soft_argmax.cpp).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>

#include "mvibr/core/hd.h"

namespace mvibr::nn {

// Heatmap cells to image pixels, and the softmax's multiplier.
struct SoftArgmaxOptions {
  double multiplier = 100;  // learnable triangulation's heatmap_multiplier
  double scale_x = 1, offset_x = 0, scale_y = 1, offset_y = 0;

  // A heatmap at 1 / stride of the image: cell i covers pixels [stride i, stride i + stride),
  // whose centre is stride i + (stride - 1) / 2 (stride 4: u = 4 x + 1.5).
  static SoftArgmaxOptions for_stride(int stride, double multiplier) {
    const double offset = 0.5 * (stride - 1);
    return {multiplier, double(stride), offset, double(stride), offset};
  }
};

// One heatmap: height x width cells, cell (row, col) at map[cell_stride (row width + col)].
struct HeatmapView {
  int height, width, cell_stride;
};

// exp(x) for the softmax's x <= 0, with 0 at once where exp rounds to 0 anyway (below -104 in
// float, -746 in double): libm's underflow path is slow, and at multiplier 100 most cells take it.
template <typename T>
MVIBR_HD T softmax_exp(T x) {
  constexpr T kRoundsToZero = sizeof(T) == sizeof(float) ? T(-104) : T(-746);
  return x < kRoundsToZero ? T(0) : std::exp(x);
}

// The softmax's normaliser and expected cell coordinates of one map.
template <typename T>
struct SoftmaxMoments {
  T max_logit, sum, x, y;  // p_i = exp(beta h_i - max_logit) / sum
};

template <typename T>
MVIBR_HD SoftmaxMoments<T> softmax_moments(const T* map, HeatmapView view, T multiplier) {
  const int cells = view.height * view.width;
  T max_logit = multiplier * map[0];
  for (int i = 1; i < cells; ++i) {
    const T logit = multiplier * map[size_t(view.cell_stride) * i];
    if (logit > max_logit) max_logit = logit;
  }
  T sum = T(0), sum_x = T(0), sum_y = T(0);
  for (int row = 0; row < view.height; ++row) {
    T row_sum = T(0), row_sum_x = T(0);
    for (int col = 0; col < view.width; ++col) {
      const T e = softmax_exp(
          multiplier * map[size_t(view.cell_stride) * (row * view.width + col)] - max_logit);
      row_sum += e;
      row_sum_x += e * T(col);
    }
    sum += row_sum;
    sum_x += row_sum_x;
    sum_y += row_sum * T(row);
  }
  return {max_logit, sum, sum_x / sum, sum_y / sum};
}

// (u, v) of one map into point[0], point[1].
template <typename T>
MVIBR_HD void soft_argmax_map(const T* map, HeatmapView view, const SoftArgmaxOptions& options,
                              T* point) {
  const SoftmaxMoments<T> m = softmax_moments(map, view, T(options.multiplier));
  point[0] = T(options.scale_x) * m.x + T(options.offset_x);
  point[1] = T(options.scale_y) * m.y + T(options.offset_y);
}

// dL/dh of one map (written at grad_map with the map's cell stride) from dL/du, dL/dv.
template <typename T>
MVIBR_HD void soft_argmax_map_backward(const T* map, HeatmapView view,
                                       const SoftArgmaxOptions& options, const T* grad_point,
                                       T* grad_map) {
  const T multiplier = T(options.multiplier);
  const SoftmaxMoments<T> m = softmax_moments(map, view, multiplier);
  const T grad_x = T(options.scale_x) * grad_point[0];
  const T grad_y = T(options.scale_y) * grad_point[1];
  const T scale = multiplier / m.sum;
  const T smallest_normal = T(sizeof(T) == sizeof(float) ? FLT_MIN : DBL_MIN);
  for (int row = 0; row < view.height; ++row) {
    const T row_term = grad_y * (T(row) - m.y);
    for (int col = 0; col < view.width; ++col) {
      const size_t at = size_t(view.cell_stride) * (row * view.width + col);
      const T p_times_multiplier = scale * softmax_exp(multiplier * map[at] - m.max_logit);
      const T grad = p_times_multiplier * (grad_x * (T(col) - m.x) + row_term);
      grad_map[at] = grad > -smallest_normal && grad < smallest_normal ? T(0) : grad;
    }
  }
}

// The batch on the CPU, OpenMP over the N J maps. heatmaps and grad_heatmaps [N, height, width,
// channels]; points and grad_points [N, joints, 2]; joints <= channels. The backward writes
// channels [0, joints) of grad_heatmaps and leaves the others as they are.
// moments (null: none): [N, joints, kSoftArgmaxMoments], each map's SoftmaxMoments, which the
// forward writes and the backward then reads instead of a pass over the maps to make them again
// (the same values: its gradients are bit for bit those without).
constexpr size_t kSoftArgmaxMoments = 4;
template <typename T>
void soft_argmax_forward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                         const SoftArgmaxOptions& options, T* points, T* moments = nullptr);
template <typename T>
void soft_argmax_backward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                          const SoftArgmaxOptions& options, const T* grad_points, T* grad_heatmaps,
                          const T* moments = nullptr);

}  // namespace mvibr::nn
