// CUDA launchers of projection and gathering (IBRNet's Projector) and its backward. One warp
// per (ray, sample, view) and one lane per output channel: the channels of a texel are
// contiguous in the channels-last maps and in the gathered rows, so reads, writes and the
// backward's atomics are coalesced across the warp. Every lane projects the sample itself;
// that is a few dozen flops, cheaper than broadcasting it, and keeps the warp converged.
#include "common.h"
#include "mvibr/geom/projection.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr::cuda {

constexpr int kWarpSize = 32;

// Where the samples are: on their rays at their depths (IBRNet), or, for DynIBaR's moving
// samples, `points` [R,S,3] at the target's time and `moved` [R,S,V,3] at each view's.
struct SamplePoints {
  const float *origins = nullptr, *directions = nullptr, *depths = nullptr;
  const float *points = nullptr, *moved = nullptr;
  int n_samples = 0, n_views = 0;

  __device__ Vec3<float> at(size_t ray_sample) const {
    if (moved) return read(points + ray_sample * 3);
    return point_on_ray(origins, directions, ray_sample / n_samples, depths[ray_sample]);
  }
  __device__ Vec3<float> in_view(size_t rsv) const {
    return moved ? read(moved + rsv * 3) : at(rsv / n_views);
  }
  __device__ DirectionNormalisation directions_style() const {
    return moved ? DirectionNormalisation::kDynibar : DirectionNormalisation::kIbrnet;
  }
  __device__ static Vec3<float> read(const float* p) { return {p[0], p[1], p[2]}; }
};

SamplePoints samples_on_rays(int n_samples, int n_views, const float* origins,
                             const float* directions, const float* depths) {
  SamplePoints samples;
  samples.origins = origins;
  samples.directions = directions;
  samples.depths = depths;
  samples.n_samples = n_samples;
  samples.n_views = n_views;
  return samples;
}

SamplePoints moved_samples(int n_samples, int n_views, const float* points, const float* moved) {
  SamplePoints samples;
  samples.points = points;
  samples.moved = moved;
  samples.n_samples = n_samples;
  samples.n_views = n_views;
  return samples;
}

// Where one sample falls in one view: the taps into the image and into the feature map.
struct SampleInView {
  Vec3<float> point;
  Projection<float> projection;
  BilinearTaps<float> image_taps, feature_taps;
};

__device__ SampleInView locate_sample(const SamplePoints& samples, size_t rsv,
                                      const PinholeCamera<float>& camera,
                                      const SourceViews<float>& views) {
  SampleInView at;
  at.point = samples.in_view(rsv);
  at.projection = project_point(camera, at.point, views.image_width, views.image_height);
  at.image_taps = bilinear_taps(at.projection.u, at.projection.v, views.image_width,
                                views.image_height, views.image_width, views.image_height);
  at.feature_taps = bilinear_taps(at.projection.u, at.projection.v, views.image_width,
                                  views.image_height, views.feature_width, views.feature_height);
  return at;
}

// The sizes both gather kernels index with: a gathered row is `width` = 3 + channels wide, and
// there is one per (ray, sample, view) triple.
struct GatherLayout {
  int n_views, channels, width;
  size_t image_texels, feature_texels, n_triples;
};

__device__ GatherLayout gather_layout(int n_rays, int n_samples, const SourceViews<float>& views) {
  const int channels = views.feature_channels;
  return {views.n_views,
          channels,
          3 + channels,
          size_t(views.image_height) * views.image_width,
          size_t(views.feature_height) * views.feature_width,
          size_t(n_rays) * n_samples * views.n_views};
}

__global__ void gather_samples_kernel(int n_rays, SamplePoints samples, Vec3<float> target_center,
                                      SourceViews<float> views, GatherOutputs<float> out) {
  const GatherLayout layout = gather_layout(n_rays, samples.n_samples, views);
  const int lane = int(threadIdx.x % kWarpSize);
  // The whole warp shares `rsv`, so the loop exits for all its lanes together.
  for (size_t rsv = grid_thread_index() / kWarpSize; rsv < layout.n_triples;
       rsv += grid_thread_count() / kWarpSize) {
    const int v = int(rsv % layout.n_views);
    const PinholeCamera<float>& camera = views.cameras[v];
    const SampleInView at = locate_sample(samples, rsv, camera, views);
    const float* image = views.images + v * layout.image_texels * 3;
    const float* features = views.features + v * layout.feature_texels * layout.channels;
    float* row = out.rgb_features + rsv * layout.width;
    for (int c = lane; c < layout.width; c += kWarpSize) {
      row[c] = c < 3 ? bilinear_read(at.image_taps, image, 3, c)
                     : bilinear_read(at.feature_taps, features, layout.channels, c - 3);
    }
    if (lane < 4) {
      float difference[4];
      ray_direction_difference(target_center, samples.at(rsv / layout.n_views), camera.center(),
                               at.point, samples.directions_style(), difference);
      out.ray_diff[rsv * 4 + lane] = difference[lane];
    }
    if (lane == 0) out.mask[rsv] = at.projection.valid ? 1.0f : 0.0f;
  }
}

static void launch_gather(int n_rays, const SamplePoints& samples, Vec3<float> target_center,
                          const SourceViews<float>& views, const GatherOutputs<float>& out,
                          StreamHandle stream) {
  validate_source_views(views);
  if (n_rays <= 0 || samples.n_samples <= 0) return;
  const size_t n_threads = size_t(n_rays) * samples.n_samples * views.n_views * kWarpSize;
  MVIBR_LAUNCH(gather_samples_kernel, blocks_for(n_threads, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (n_rays, samples, target_center, views, out);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void gather_samples(int n_rays, int n_samples, const float* origins, const float* directions,
                    const float* depths, Vec3<float> target_center, const SourceViews<float>& views,
                    const GatherOutputs<float>& out, StreamHandle stream) {
  launch_gather(n_rays, samples_on_rays(n_samples, views.n_views, origins, directions, depths),
                target_center, views, out, stream);
}

void gather_moved_samples(int n_rays, int n_samples, const float* points, const float* moved_points,
                          Vec3<float> target_center, const SourceViews<float>& views,
                          const GatherOutputs<float>& out, StreamHandle stream) {
  launch_gather(n_rays, moved_samples(n_samples, views.n_views, points, moved_points),
                target_center, views, out, stream);
}

__global__ void mask_unseen_colours_kernel(size_t n_rows, int row_width, const float* rgb_features,
                                           const float* mask, float* masked) {
  for (size_t i = grid_thread_index(); i < n_rows; i += grid_thread_count()) {
    masked[i] = seen_colour_mask(rgb_features + i * size_t(row_width), mask[i]);
  }
}

void mask_unseen_colours(size_t n_rows, int row_width, const float* rgb_features, const float* mask,
                         float* masked, StreamHandle stream) {
  launch_threads(n_rows, stream, mask_unseen_colours_kernel, n_rows, row_width, rgb_features, mask,
                 masked);
}

// Adds weight * gradient into channel c of the texels the taps read (the CPU's scatter_taps).
__device__ void scatter_taps(const BilinearTaps<float>& taps, float gradient, float* map,
                             int channels, int c) {
  for (int t = 0; t < 4; ++t) {
    if (taps.index[t] >= 0) {
      atomicAdd(map + size_t(taps.index[t]) * channels + c, taps.weight[t] * gradient);
    }
  }
}

__global__ void gather_samples_backward_kernel(int n_rays, SamplePoints samples,
                                               SourceViews<float> views,
                                               const float* grad_rgb_features, float* grad_images,
                                               float* grad_features) {
  const GatherLayout layout = gather_layout(n_rays, samples.n_samples, views);
  const int lane = int(threadIdx.x % kWarpSize);
  for (size_t rsv = grid_thread_index() / kWarpSize; rsv < layout.n_triples;
       rsv += grid_thread_count() / kWarpSize) {
    const int v = int(rsv % layout.n_views);
    const SampleInView at = locate_sample(samples, rsv, views.cameras[v], views);
    const float* grad_row = grad_rgb_features + rsv * layout.width;
    for (int c = lane; c < layout.width; c += kWarpSize) {
      if (c >= 3) {
        scatter_taps(at.feature_taps, grad_row[c],
                     grad_features + v * layout.feature_texels * layout.channels, layout.channels,
                     c - 3);
      } else if (grad_images) {
        scatter_taps(at.image_taps, grad_row[c], grad_images + v * layout.image_texels * 3, 3, c);
      }
    }
  }
}

// The moved points' gradient, one thread per (ray, sample, view): the bilinear reads' slopes
// over every channel of the row, then the projection's (the CPU's sums in the CPU's order).
__global__ void moved_points_gradient_kernel(int n_rays, SamplePoints samples,
                                             SourceViews<float> views,
                                             const float* grad_rgb_features,
                                             float* grad_moved_points) {
  const GatherLayout layout = gather_layout(n_rays, samples.n_samples, views);
  const float feature_x = float(views.feature_width - 1) / float(views.image_width - 1);
  const float feature_y = float(views.feature_height - 1) / float(views.image_height - 1);
  for (size_t rsv = grid_thread_index(); rsv < layout.n_triples; rsv += grid_thread_count()) {
    const int v = int(rsv % layout.n_views);
    const SampleInView at = locate_sample(samples, rsv, views.cameras[v], views);
    const float* grad_row = grad_rgb_features + rsv * layout.width;
    float g_x = 0, g_y = 0, f_x = 0, f_y = 0;
    bilinear_coordinate_gradient(at.image_taps, views.images + v * layout.image_texels * 3, 3,
                                 grad_row, &g_x, &g_y);
    bilinear_coordinate_gradient(at.feature_taps,
                                 views.features + v * layout.feature_texels * layout.channels,
                                 layout.channels, grad_row + 3, &f_x, &f_y);
    const Vec3<float> g = project_point_backward(views.cameras[v], at.point, g_x + f_x * feature_x,
                                                 g_y + f_y * feature_y);
    grad_moved_points[rsv * 3] = g.x;
    grad_moved_points[rsv * 3 + 1] = g.y;
    grad_moved_points[rsv * 3 + 2] = g.z;
  }
}

static void launch_gather_backward(int n_rays, const SamplePoints& samples,
                                   const SourceViews<float>& views, const float* grad_rgb_features,
                                   float* grad_moved_points, float* grad_images,
                                   float* grad_features, StreamHandle stream) {
  validate_source_views(views);
  if (n_rays <= 0 || samples.n_samples <= 0) return;
  const size_t n_triples = size_t(n_rays) * samples.n_samples * views.n_views;
  MVIBR_LAUNCH(gather_samples_backward_kernel, blocks_for(n_triples * kWarpSize, kThreadsPerBlock),
               kThreadsPerBlock, 0, stream)
  (n_rays, samples, views, grad_rgb_features, grad_images, grad_features);
  MVIBR_CUDA_CHECK_LAUNCH();
  if (grad_moved_points) {
    cuda_detail::launch_threads(n_triples, stream, moved_points_gradient_kernel, n_rays, samples,
                                views, grad_rgb_features, grad_moved_points);
  }
}

void gather_samples_backward(int n_rays, int n_samples, const float* origins,
                             const float* directions, const float* depths,
                             const SourceViews<float>& views, const float* grad_rgb_features,
                             float* grad_images, float* grad_features, StreamHandle stream) {
  launch_gather_backward(n_rays,
                         samples_on_rays(n_samples, views.n_views, origins, directions, depths),
                         views, grad_rgb_features, nullptr, grad_images, grad_features, stream);
}

void gather_moved_samples_backward(int n_rays, int n_samples, const float* moved_points,
                                   const SourceViews<float>& views, const float* grad_rgb_features,
                                   float* grad_moved_points, float* grad_images,
                                   float* grad_features, StreamHandle stream) {
  // `points` is unread: the direction feature has no backward.
  launch_gather_backward(n_rays, moved_samples(n_samples, views.n_views, nullptr, moved_points),
                         views, grad_rgb_features, grad_moved_points, grad_images, grad_features,
                         stream);
}

}  // namespace mvibr::cuda
