// The mean of some channels of channels-last maps over their cells (the pose model's global
// average pooling in front of its confidence head), and its backward.
// - maps [N, cells, C]; channels [first, first + count) give means [N, count]. Each mean sums in
//   double in cell order, so the CPU and the GPU (nn/cuda_pose.h) give the same bits.
// - The backward overwrites those channels of grad_maps with grad_means / cells and leaves the
//   others as they are.
#pragma once

#include <cstddef>

#include "mvibr/core/hd.h"

namespace mvibr::nn {

MVIBR_HD float channel_mean(const float* map, int cells, int channels, int channel) {
  double sum = 0;
  for (int cell = 0; cell < cells; ++cell) sum += map[size_t(cell) * channels + channel];
  return float(sum / double(cells));
}

MVIBR_HD float channel_mean_gradient(float grad_mean, int cells) {
  return grad_mean / float(cells);
}

inline void channel_mean_forward(int n, int cells, int channels, int first, int count,
                                 const float* maps, float* means) {
  for (int i = 0; i < n; ++i) {
    const float* map = maps + size_t(i) * cells * channels;
    for (int k = 0; k < count; ++k) {
      means[size_t(i) * count + k] = channel_mean(map, cells, channels, first + k);
    }
  }
}

inline void channel_mean_backward(int n, int cells, int channels, int first, int count,
                                  const float* grad_means, float* grad_maps) {
  for (int i = 0; i < n; ++i) {
    float* grad = grad_maps + size_t(i) * cells * channels + first;
    for (int cell = 0; cell < cells; ++cell) {
      for (int k = 0; k < count; ++k) {
        grad[size_t(cell) * channels + k] =
            channel_mean_gradient(grad_means[size_t(i) * count + k], cells);
      }
    }
  }
}

}  // namespace mvibr::nn
