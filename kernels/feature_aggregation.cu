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

// Where one sample falls in one view: the taps into the image and into the feature map.
struct SampleInView {
  Vec3<float> point;
  Projection<float> projection;
  BilinearTaps<float> image_taps, feature_taps;
};

__device__ SampleInView locate_sample(const float* origins, const float* directions,
                                      const float* depths, int n_samples, size_t ray_sample,
                                      const PinholeCamera<float>& camera,
                                      const SourceViews<float>& views) {
  SampleInView at;
  at.point = point_on_ray(origins, directions, ray_sample / n_samples, depths[ray_sample]);
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

__global__ void gather_samples_kernel(int n_rays, int n_samples, const float* origins,
                                      const float* directions, const float* depths,
                                      Vec3<float> target_center, SourceViews<float> views,
                                      GatherOutputs<float> out) {
  const GatherLayout layout = gather_layout(n_rays, n_samples, views);
  const int lane = int(threadIdx.x % kWarpSize);
  // The whole warp shares `rsv`, so the loop exits for all its lanes together.
  for (size_t rsv = grid_thread_index() / kWarpSize; rsv < layout.n_triples;
       rsv += grid_thread_count() / kWarpSize) {
    const int v = int(rsv % layout.n_views);
    const PinholeCamera<float>& camera = views.cameras[v];
    const SampleInView at =
        locate_sample(origins, directions, depths, n_samples, rsv / layout.n_views, camera, views);
    const float* image = views.images + v * layout.image_texels * 3;
    const float* features = views.features + v * layout.feature_texels * layout.channels;
    float* row = out.rgb_features + rsv * layout.width;
    for (int c = lane; c < layout.width; c += kWarpSize) {
      row[c] = c < 3 ? bilinear_read(at.image_taps, image, 3, c)
                     : bilinear_read(at.feature_taps, features, layout.channels, c - 3);
    }
    if (lane < 4) {
      float difference[4];
      ray_direction_difference(target_center, at.point, camera.center(), at.point,
                               DirectionNormalisation::kIbrnet, difference);
      out.ray_diff[rsv * 4 + lane] = difference[lane];
    }
    if (lane == 0) out.mask[rsv] = at.projection.valid ? 1.0f : 0.0f;
  }
}

void gather_samples(int n_rays, int n_samples, const float* origins, const float* directions,
                    const float* depths, Vec3<float> target_center, const SourceViews<float>& views,
                    const GatherOutputs<float>& out, StreamHandle stream) {
  validate_source_views(views);
  if (n_rays <= 0 || n_samples <= 0) return;
  const size_t n_threads = size_t(n_rays) * n_samples * views.n_views * kWarpSize;
  MVIBR_LAUNCH(gather_samples_kernel, blocks_for(n_threads, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (n_rays, n_samples, origins, directions, depths, target_center, views, out);
  MVIBR_CUDA_CHECK_LAUNCH();
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

__global__ void gather_samples_backward_kernel(int n_rays, int n_samples, const float* origins,
                                               const float* directions, const float* depths,
                                               SourceViews<float> views,
                                               const float* grad_rgb_features, float* grad_images,
                                               float* grad_features) {
  const GatherLayout layout = gather_layout(n_rays, n_samples, views);
  const int lane = int(threadIdx.x % kWarpSize);
  for (size_t rsv = grid_thread_index() / kWarpSize; rsv < layout.n_triples;
       rsv += grid_thread_count() / kWarpSize) {
    const int v = int(rsv % layout.n_views);
    const SampleInView at = locate_sample(origins, directions, depths, n_samples,
                                          rsv / layout.n_views, views.cameras[v], views);
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

void gather_samples_backward(int n_rays, int n_samples, const float* origins,
                             const float* directions, const float* depths,
                             const SourceViews<float>& views, const float* grad_rgb_features,
                             float* grad_images, float* grad_features, StreamHandle stream) {
  validate_source_views(views);
  if (n_rays <= 0 || n_samples <= 0) return;
  const size_t n_threads = size_t(n_rays) * n_samples * views.n_views * kWarpSize;
  MVIBR_LAUNCH(gather_samples_backward_kernel, blocks_for(n_threads, kThreadsPerBlock),
               kThreadsPerBlock, 0, stream)
  (n_rays, n_samples, origins, directions, depths, views, grad_rgb_features, grad_images,
   grad_features);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::cuda
