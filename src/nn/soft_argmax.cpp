// The CPU backend of the pose model's soft-argmax (nn/soft_argmax.h): OpenMP over the maps, each
// running the per-map math the CUDA kernels run.
#include "mvibr/nn/soft_argmax.h"

#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {

namespace {

void check_sizes(int n, int height, int width, int channels, int joints) {
  if (n < 0 || height < 1 || width < 1 || joints < 1 || joints > channels) {
    throw InvalidArgument("soft-argmax: " + std::to_string(joints) + " heatmaps of " +
                          std::to_string(height) + "x" + std::to_string(width) + " in " +
                          std::to_string(channels) + " channels, " + std::to_string(n) +
                          " samples (needs 1 <= joints <= channels and a non-empty map)");
  }
}

}  // namespace

template <typename T>
void soft_argmax_forward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                         const SoftArgmaxOptions& options, T* points) {
  check_sizes(n, height, width, channels, joints);
  const HeatmapView view{height, width, channels};
  const size_t map_size = size_t(height) * width * channels;
#pragma omp parallel for schedule(static)
  for (int nj = 0; nj < n * joints; ++nj) {
    const T* map = heatmaps + size_t(nj / joints) * map_size + size_t(nj % joints);
    soft_argmax_map(map, view, options, points + 2 * size_t(nj));
  }
}

template <typename T>
void soft_argmax_backward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                          const SoftArgmaxOptions& options, const T* grad_points,
                          T* grad_heatmaps) {
  check_sizes(n, height, width, channels, joints);
  const HeatmapView view{height, width, channels};
  const size_t map_size = size_t(height) * width * channels;
#pragma omp parallel for schedule(static)
  for (int nj = 0; nj < n * joints; ++nj) {
    const size_t first = size_t(nj / joints) * map_size + size_t(nj % joints);
    soft_argmax_map_backward(heatmaps + first, view, options, grad_points + 2 * size_t(nj),
                             grad_heatmaps + first);
  }
}

template void soft_argmax_forward(int, int, int, int, int, const float*, const SoftArgmaxOptions&,
                                  float*);
template void soft_argmax_forward(int, int, int, int, int, const double*, const SoftArgmaxOptions&,
                                  double*);
template void soft_argmax_backward(int, int, int, int, int, const float*, const SoftArgmaxOptions&,
                                   const float*, float*);
template void soft_argmax_backward(int, int, int, int, int, const double*, const SoftArgmaxOptions&,
                                   const double*, double*);

}  // namespace mvibr::nn
