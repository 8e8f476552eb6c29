// The CPU backend of the pose model's soft-argmax (nn/soft_argmax.h): OpenMP over the images, the
// J maps of each at once (the CUDA kernels run soft_argmax.h's per-map math).
#include "mvibr/nn/soft_argmax.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "vector_math.h"

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

// The J maps of one image at once: a cell's joints lie side by side (channels last), so every
// loop runs across joints and vectorises, with an exp that does (vector_math.h). Per map the
// sums are soft_argmax.h's, in its order; only the exp differs from the GPU's (within 2 ulp).
template <typename T>
struct ImageMoments {
  std::vector<T> max_logit, sum, x, y;  // per joint, as SoftmaxMoments

  // To and from an image's [joints, kSoftArgmaxMoments] kept moments.
  void keep(T* kept) const {
    for (size_t j = 0; j < sum.size(); ++j) {
      T* at = kept + j * kSoftArgmaxMoments;
      at[0] = max_logit[j];
      at[1] = sum[j];
      at[2] = x[j];
      at[3] = y[j];
    }
  }
  static ImageMoments kept(const T* kept, size_t joints) {
    ImageMoments m{std::vector<T>(joints), std::vector<T>(joints), std::vector<T>(joints),
                   std::vector<T>(joints)};
    for (size_t j = 0; j < joints; ++j) {
      const T* at = kept + j * kSoftArgmaxMoments;
      m.max_logit[j] = at[0];
      m.sum[j] = at[1];
      m.x[j] = at[2];
      m.y[j] = at[3];
    }
    return m;
  }
};

template <typename T>
ImageMoments<T> image_moments(const T* image, const HeatmapView& view, int joints, T multiplier) {
  const size_t J = size_t(joints), cells = size_t(view.height) * size_t(view.width);
  const size_t stride = size_t(view.cell_stride);
  ImageMoments<T> m{std::vector<T>(J), std::vector<T>(J, T(0)), std::vector<T>(J, T(0)),
                    std::vector<T>(J, T(0))};
  T* top = m.max_logit.data();
  for (size_t j = 0; j < J; ++j) top[j] = multiplier * image[j];
  for (size_t cell = 1; cell < cells; ++cell) {
    const T* h = image + cell * stride;
#pragma omp simd
    for (size_t j = 0; j < J; ++j) {
      const T logit = multiplier * h[j];
      top[j] = logit > top[j] ? logit : top[j];
    }
  }
  std::vector<T> row_sum(J), row_sum_x(J);
  for (int row = 0; row < view.height; ++row) {
    std::fill(row_sum.begin(), row_sum.end(), T(0));
    std::fill(row_sum_x.begin(), row_sum_x.end(), T(0));
    for (int col = 0; col < view.width; ++col) {
      const T* h = image + size_t(row * view.width + col) * stride;
#pragma omp simd
      for (size_t j = 0; j < J; ++j) {
        const T e = exp_nonpositive_with_subnormals(multiplier * h[j] - top[j]);
        row_sum[j] += e;
        row_sum_x[j] += e * T(col);
      }
    }
    for (size_t j = 0; j < J; ++j) {
      m.sum[j] += row_sum[j];
      m.x[j] += row_sum_x[j];
      m.y[j] += row_sum[j] * T(row);
    }
  }
  for (size_t j = 0; j < J; ++j) {
    m.x[j] /= m.sum[j];
    m.y[j] /= m.sum[j];
  }
  return m;
}

}  // namespace

template <typename T>
void soft_argmax_forward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                         const SoftArgmaxOptions& options, T* points, T* moments) {
  check_sizes(n, height, width, channels, joints);
  const HeatmapView view{height, width, channels};
  const size_t map_size = size_t(height) * width * channels;
#pragma omp parallel for schedule(static)
  for (int image = 0; image < n; ++image) {
    const ImageMoments<T> m =
        image_moments(heatmaps + size_t(image) * map_size, view, joints, T(options.multiplier));
    if (moments) m.keep(moments + size_t(image) * size_t(joints) * kSoftArgmaxMoments);
    T* point = points + 2 * size_t(image) * size_t(joints);
    for (size_t j = 0; j < size_t(joints); ++j) {
      point[2 * j] = T(options.scale_x) * m.x[j] + T(options.offset_x);
      point[2 * j + 1] = T(options.scale_y) * m.y[j] + T(options.offset_y);
    }
  }
}

template <typename T>
void soft_argmax_backward(int n, int height, int width, int channels, int joints, const T* heatmaps,
                          const SoftArgmaxOptions& options, const T* grad_points, T* grad_heatmaps,
                          const T* moments) {
  check_sizes(n, height, width, channels, joints);
  const HeatmapView view{height, width, channels};
  const size_t map_size = size_t(height) * width * channels, J = size_t(joints);
  const T multiplier = T(options.multiplier);
  const T smallest_normal = std::numeric_limits<T>::min();
#pragma omp parallel for schedule(static)
  for (int image = 0; image < n; ++image) {
    const T* maps = heatmaps + size_t(image) * map_size;
    T* grads = grad_heatmaps + size_t(image) * map_size;
    const ImageMoments<T> m =
        moments ? ImageMoments<T>::kept(moments + size_t(image) * J * kSoftArgmaxMoments, J)
                : image_moments(maps, view, joints, multiplier);
    const T* grad_point = grad_points + 2 * size_t(image) * J;
    std::vector<T> grad_x(J), grad_y(J), scale(J), row_term(J);
    for (size_t j = 0; j < J; ++j) {
      grad_x[j] = T(options.scale_x) * grad_point[2 * j];
      grad_y[j] = T(options.scale_y) * grad_point[2 * j + 1];
      scale[j] = multiplier / m.sum[j];
    }
    // dL/dh_i = beta p_i (g_x (col_i - x) + g_y (row_i - y)), below T's normals 0 (soft_argmax.h).
    for (int row = 0; row < height; ++row) {
      for (size_t j = 0; j < J; ++j) row_term[j] = grad_y[j] * (T(row) - m.y[j]);
      for (int col = 0; col < width; ++col) {
        const size_t at = size_t(row * width + col) * size_t(channels);
        const T* h = maps + at;
        T* g = grads + at;
#pragma omp simd
        for (size_t j = 0; j < J; ++j) {
          const T p_times_multiplier =
              scale[j] * exp_nonpositive_with_subnormals(multiplier * h[j] - m.max_logit[j]);
          const T grad = p_times_multiplier * (grad_x[j] * (T(col) - m.x[j]) + row_term[j]);
          g[j] = grad > -smallest_normal && grad < smallest_normal ? T(0) : grad;
        }
      }
    }
  }
}

template void soft_argmax_forward(int, int, int, int, int, const float*, const SoftArgmaxOptions&,
                                  float*, float*);
template void soft_argmax_forward(int, int, int, int, int, const double*, const SoftArgmaxOptions&,
                                  double*, double*);
template void soft_argmax_backward(int, int, int, int, int, const float*, const SoftArgmaxOptions&,
                                   const float*, float*, const float*);
template void soft_argmax_backward(int, int, int, int, int, const double*, const SoftArgmaxOptions&,
                                   const double*, double*, const double*);

}  // namespace mvibr::nn
