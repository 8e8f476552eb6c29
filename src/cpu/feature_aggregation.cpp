// CPU backend of projection and gathering (IBRNet's Projector) and its backward. The forward
// runs OpenMP over rays; the backward scatter-adds into the feature maps with each thread owning
// whole views, so the sums are deterministic and race-free without atomics.
#include "mvibr/geom/projection.h"

#include <omp.h>

#include <vector>

#include "mvibr/ops/render_ops.h"

namespace mvibr::cpu {

// The cache lines a bilinear read of `taps` will touch, requested ahead of the read.
template <typename T>
static void prefetch_taps(const BilinearTaps<T>& taps, const T* map, int channels) {
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] < 0) continue;
    const T* texel = map + size_t(taps.index[t]) * channels;
    __builtin_prefetch(texel);
    __builtin_prefetch(texel + channels - 1);
  }
}

// Where the samples are: the one of (ray, sample) on its ray at its depth, for every view alike.
template <typename T>
struct SamplesOnRays {
  const T *origins, *directions, *depths;
  int n_samples;
  Vec3<T> at(int r, int s) const {
    return point_on_ray(origins, directions, size_t(r), depths[size_t(r) * n_samples + s]);
  }
  Vec3<T> in_view(int r, int s, int) const { return at(r, s); }
  static constexpr DirectionNormalisation kDirections = DirectionNormalisation::kIbrnet;
};

// DynIBaR's: each view sees the sample where it has moved to by that view's time (`points`, where
// it is at the target's time, only for the forward's direction feature).
template <typename T>
struct MovedSamples {
  const T *points, *moved;
  int n_samples, n_views;
  Vec3<T> at(int r, int s) const { return read(points + (size_t(r) * n_samples + s) * 3); }
  Vec3<T> in_view(int r, int s, int v) const {
    return read(moved + ((size_t(r) * n_samples + s) * n_views + v) * 3);
  }
  static Vec3<T> read(const T* p) { return {p[0], p[1], p[2]}; }
  static constexpr DirectionNormalisation kDirections = DirectionNormalisation::kDynibar;
};

template <typename T, typename Samples>
static void gather_rows(int n_rays, int n_samples, const Samples& samples, Vec3<T> target_center,
                        const SourceViews<T>& views, const GatherOutputs<T>& out) {
  validate_source_views(views);
  const int V = views.n_views, C = views.feature_channels, width = 3 + C;
  const size_t image_texels = size_t(views.image_height) * views.image_width;
  const size_t feature_texels = size_t(views.feature_height) * views.feature_width;
  // Projected samples land all over the source maps, so nearly every tap misses the caches: the
  // taps of sample s + kAhead are requested while sample s is read.
  constexpr int kAhead = 4;
  struct SampleTaps {
    Vec3<T> point;
    Projection<T> projection;
    BilinearTaps<T> image, feature;
  };
#pragma omp parallel
  {
    std::vector<SampleTaps> ray_taps(size_t(n_samples) * V);
#pragma omp for schedule(static)
    for (int r = 0; r < n_rays; ++r) {
      for (int s = 0; s < n_samples; ++s) {
        for (int v = 0; v < V; ++v) {
          SampleTaps& taps = ray_taps[size_t(s) * V + v];
          taps.point = samples.in_view(r, s, v);
          taps.projection =
              project_point(views.cameras[v], taps.point, views.image_width, views.image_height);
          taps.image = bilinear_taps(taps.projection.u, taps.projection.v, views.image_width,
                                     views.image_height, views.image_width, views.image_height);
          taps.feature =
              bilinear_taps(taps.projection.u, taps.projection.v, views.image_width,
                            views.image_height, views.feature_width, views.feature_height);
        }
      }
      for (int s = 0; s < n_samples; ++s) {
        const Vec3<T> point = samples.at(r, s);
        for (int v = 0; v < V; ++v) {
          const T* image = views.images + v * image_texels * 3;
          const T* features = views.features + v * feature_texels * C;
          if (s + kAhead < n_samples) {
            const SampleTaps& ahead = ray_taps[size_t(s + kAhead) * V + v];
            prefetch_taps(ahead.image, image, 3);
            if (C > 0) prefetch_taps(ahead.feature, features, C);
          }
          const SampleTaps& taps = ray_taps[size_t(s) * V + v];
          const size_t rsv = (size_t(r) * n_samples + s) * V + v;
          T* row = out.rgb_features + rsv * width;
          bilinear_read_all(taps.image, image, 3, row);
          bilinear_read_all(taps.feature, features, C, row + 3);
          ray_direction_difference(target_center, point, views.cameras[v].center(), taps.point,
                                   Samples::kDirections, out.ray_diff + rsv * 4);
          out.mask[rsv] = taps.projection.valid ? T(1) : T(0);
        }
      }
    }
  }
}

template <typename T>
void gather_samples(int n_rays, int n_samples, const T* origins, const T* directions,
                    const T* depths, Vec3<T> target_center, const SourceViews<T>& views,
                    const GatherOutputs<T>& out) {
  gather_rows(n_rays, n_samples, SamplesOnRays<T>{origins, directions, depths, n_samples},
              target_center, views, out);
}

template <typename T>
void gather_moved_samples(int n_rays, int n_samples, const T* points, const T* moved_points,
                          Vec3<T> target_center, const SourceViews<T>& views,
                          const GatherOutputs<T>& out) {
  gather_rows(n_rays, n_samples, MovedSamples<T>{points, moved_points, n_samples, views.n_views},
              target_center, views, out);
}

// Adds the gradient of one gathered row's channels [first, first + count) into a map.
template <typename T>
static void scatter_taps(const BilinearTaps<T>& taps, const T* grad_row, int count, T* map) {
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] < 0) continue;
    T* texel = map + size_t(taps.index[t]) * count;
    for (int c = 0; c < count; ++c) texel[c] += taps.weight[t] * grad_row[c];
  }
}

// The backward of gather_rows into the maps (nullable grad_images) and, when grad_points is
// given, into each row's point [R,S,V,3].
template <typename T, typename Samples>
static void gather_rows_backward(int n_rays, int n_samples, const Samples& samples,
                                 const SourceViews<T>& views, const T* grad_rgb_features,
                                 T* grad_points, T* grad_images, T* grad_features) {
  validate_source_views(views);
  const int V = views.n_views, C = views.feature_channels, width = 3 + C;
  const size_t image_texels = size_t(views.image_height) * views.image_width;
  const size_t feature_texels = size_t(views.feature_height) * views.feature_width;
  // Texel coordinates per image pixel, for the coordinate gradient.
  const T image_scale = T(1), feature_x = T(views.feature_width - 1) / T(views.image_width - 1),
          feature_y = T(views.feature_height - 1) / T(views.image_height - 1);
  // Each thread owns a fixed band of views and walks every ray once, so the gradient rows of its
  // views are read as one contiguous span per sample. (A pass over all rays per view read them
  // strided, and took twice as long.) A texel's sum runs over the rays and samples in order,
  // whichever thread owns its view.
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int first_view = V * thread / threads, end_view = V * (thread + 1) / threads;
    for (int r = 0; r < n_rays && first_view < end_view; ++r) {
      for (int s = 0; s < n_samples; ++s) {
        for (int v = first_view; v < end_view; ++v) {
          const Vec3<T> p = samples.in_view(r, s, v);
          const Projection<T> proj =
              project_point(views.cameras[v], p, views.image_width, views.image_height);
          const size_t rsv = (size_t(r) * n_samples + s) * V + v;
          const T* grad_row = grad_rgb_features + rsv * width;
          const BilinearTaps<T> image_taps =
              bilinear_taps(proj.u, proj.v, views.image_width, views.image_height,
                            views.image_width, views.image_height);
          const BilinearTaps<T> feature_taps =
              bilinear_taps(proj.u, proj.v, views.image_width, views.image_height,
                            views.feature_width, views.feature_height);
          const T* image = views.images + v * image_texels * 3;
          const T* features = views.features + v * feature_texels * C;
          if (grad_images)
            scatter_taps(image_taps, grad_row, 3, grad_images + v * image_texels * 3);
          if (C > 0) {
            scatter_taps(feature_taps, grad_row + 3, C, grad_features + v * feature_texels * C);
          }
          if (!grad_points) continue;
          T g_x = 0, g_y = 0, f_x = 0, f_y = 0;
          bilinear_coordinate_gradient(image_taps, image, 3, grad_row, &g_x, &g_y);
          bilinear_coordinate_gradient(feature_taps, features, C, grad_row + 3, &f_x, &f_y);
          const Vec3<T> g =
              project_point_backward(views.cameras[v], p, g_x * image_scale + f_x * feature_x,
                                     g_y * image_scale + f_y * feature_y);
          grad_points[rsv * 3] = g.x;
          grad_points[rsv * 3 + 1] = g.y;
          grad_points[rsv * 3 + 2] = g.z;
        }
      }
    }
  }
}

template <typename T>
void gather_samples_backward(int n_rays, int n_samples, const T* origins, const T* directions,
                             const T* depths, const SourceViews<T>& views,
                             const T* grad_rgb_features, T* grad_images, T* grad_features) {
  gather_rows_backward(n_rays, n_samples, SamplesOnRays<T>{origins, directions, depths, n_samples},
                       views, grad_rgb_features, static_cast<T*>(nullptr), grad_images,
                       grad_features);
}

template <typename T>
void gather_moved_samples_backward(int n_rays, int n_samples, const T* moved_points,
                                   const SourceViews<T>& views, const T* grad_rgb_features,
                                   T* grad_moved_points, T* grad_images, T* grad_features) {
  gather_rows_backward(n_rays, n_samples,
                       MovedSamples<T>{nullptr, moved_points, n_samples, views.n_views}, views,
                       grad_rgb_features, grad_moved_points, grad_images, grad_features);
}

template <typename T>
void mask_unseen_colours(size_t n_rows, int row_width, const T* rgb_features, const T* mask,
                         T* masked) {
  for (size_t i = 0; i < n_rows; ++i) {
    masked[i] = seen_colour_mask(rgb_features + i * size_t(row_width), mask[i]);
  }
}

template void mask_unseen_colours(size_t, int, const float*, const float*, float*);
template void mask_unseen_colours(size_t, int, const double*, const double*, double*);
template void gather_samples(int, int, const float*, const float*, const float*, Vec3<float>,
                             const SourceViews<float>&, const GatherOutputs<float>&);
template void gather_samples(int, int, const double*, const double*, const double*, Vec3<double>,
                             const SourceViews<double>&, const GatherOutputs<double>&);
template void gather_samples_backward(int, int, const float*, const float*, const float*,
                                      const SourceViews<float>&, const float*, float*, float*);
template void gather_samples_backward(int, int, const double*, const double*, const double*,
                                      const SourceViews<double>&, const double*, double*, double*);
template void gather_moved_samples(int, int, const float*, const float*, Vec3<float>,
                                   const SourceViews<float>&, const GatherOutputs<float>&);
template void gather_moved_samples(int, int, const double*, const double*, Vec3<double>,
                                   const SourceViews<double>&, const GatherOutputs<double>&);
template void gather_moved_samples_backward(int, int, const float*, const SourceViews<float>&,
                                            const float*, float*, float*, float*);
template void gather_moved_samples_backward(int, int, const double*, const SourceViews<double>&,
                                            const double*, double*, double*, double*);

}  // namespace mvibr::cpu
