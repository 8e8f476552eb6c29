// The rendering core as batched operations, with the same signature on two backends:
// mvibr::cpu (host pointers, OpenMP, float and double) and mvibr::cuda (device pointers,
// float, asynchronous on the given stream). Both call the per-ray math of geom/ and render/.
//
// Layouts (row-major, last index fastest):
//   pixels [R,2] (u, v); origins, directions [R,3]; depths [R,S];
//   DynIBaR's moving samples: points [R,S,3] at the target's time, moved_points [R,S,V,3] where
//   each has moved to by source view v's time (gather_moved_samples reads view v there; ray_diff
//   compares the target's direction to `points` with the source's to the moved point);
//   source images [V,H,W,3] and feature maps [V,Hf,Wf,C], channels last;
//   gathered rgb_features [R,S,V,3+C] (colour then features), ray_diff [R,S,V,4], mask [R,S,V];
//   DynIBaR's rendered flow: weights [R,S], points [K,R,S,3] (the samples at each of K source
//   views' times), cameras [K], flows [K,R,2] (render/rendered_flow.h);
//   sigma [R,S], sample rgb [R,S,3]; rgb_map [R,3], depth_map, acc_map, ray_mask [R];
//   weights [R,S].
#pragma once

#include <cstdint>

#include "mvibr/core/philox.h"
#include "mvibr/geom/camera.h"
#include "mvibr/render/dynamic_compositing.h"
#include "mvibr/render/rendered_flow.h"
#include "mvibr/render/volume_rendering.h"

struct CUstream_st;

namespace mvibr {

using StreamHandle = CUstream_st*;

struct DepthSampling {
  double near_depth = 0;
  double far_depth = 0;
  int n_samples = 64;
  bool inv_uniform = false;
  bool deterministic = false;
};

// Throws InvalidArgument (naming the value) unless 0 < near < far, both finite, n_samples in
// [1, kMaxSamplesPerRay].
void validate_depth_sampling(const DepthSampling& sampling);

struct ImportanceSampling {
  int n_coarse = 64;
  int n_importance = 64;
  bool inv_uniform = false;
  bool deterministic = false;
};

// Throws InvalidArgument unless n_coarse >= 3 (a pdf needs one interior bin) and
// n_coarse + n_importance <= kMaxSamplesPerRay.
void validate_importance_sampling(const ImportanceSampling& sampling);

// The source views every sample is projected into. `cameras` has n_views entries (host memory
// for the CPU backend, device memory for CUDA) sharing one image size.
template <typename T>
struct SourceViews {
  int n_views = 0;
  const PinholeCamera<T>* cameras = nullptr;
  int image_height = 0, image_width = 0;
  const T* images = nullptr;  // [V,H,W,3]
  int feature_height = 0, feature_width = 0, feature_channels = 0;
  const T* features = nullptr;  // [V,Hf,Wf,C]
};

// Throws InvalidArgument unless sizes are positive and images/maps at least 2x2.
template <typename T>
void validate_source_views(const SourceViews<T>& views);

template <typename T>
struct GatherOutputs {
  T* rgb_features = nullptr;  // [R,S,V,3+C]
  T* ray_diff = nullptr;      // [R,S,V,4]
  T* mask = nullptr;          // [R,S,V], 1 when in front and inside the image, else 0
};

struct RayMaskRule {
  int min_views = 2;    // a sample counts when seen by this many views (IBRNet: > 1)
  int min_samples = 9;  // a ray counts when this many samples count (IBRNet: > 8)
};

#define MVIBR_RENDER_OPS(T, PREFIX, STREAM_PARAM)                                                 \
  PREFIX void generate_rays(const PinholeCamera<T>& camera, const T* pixels, int n_rays,          \
                            T* origins, T* directions STREAM_PARAM);                              \
  PREFIX void sample_coarse_depths(int n_rays, const DepthSampling& sampling, RandomKey key,      \
                                   uint32_t first_ray, T* depths STREAM_PARAM);                   \
  PREFIX void sample_importance_depths(                                                           \
      int n_rays, const ImportanceSampling& sampling, const T* coarse_depths,                     \
      const T* coarse_weights, RandomKey key, uint32_t first_ray, T* merged_depths STREAM_PARAM); \
  PREFIX void gather_samples(int n_rays, int n_samples, const T* origins, const T* directions,    \
                             const T* depths, Vec3<T> target_center, const SourceViews<T>& views, \
                             const GatherOutputs<T>& out STREAM_PARAM);                           \
  PREFIX void gather_samples_backward(int n_rays, int n_samples, const T* origins,                \
                                      const T* directions, const T* depths,                       \
                                      const SourceViews<T>& views, const T* grad_rgb_features,    \
                                      T* grad_images, T* grad_features STREAM_PARAM);             \
  PREFIX void gather_moved_samples(                                                               \
      int n_rays, int n_samples, const T* points, const T* moved_points, Vec3<T> target_center,   \
      const SourceViews<T>& views, const GatherOutputs<T>& out STREAM_PARAM);                     \
  PREFIX void gather_moved_samples_backward(int n_rays, int n_samples, const T* moved_points,     \
                                            const SourceViews<T>& views,                          \
                                            const T* grad_rgb_features, T* grad_moved_points,     \
                                            T* grad_images, T* grad_features STREAM_PARAM);       \
  PREFIX void mask_unseen_colours(size_t n_rows, int row_width, const T* rgb_features,            \
                                  const T* mask, T* masked STREAM_PARAM);                         \
  PREFIX void composite_rays(int n_rays, int n_samples, const T* sigma, const T* rgb,             \
                             const T* depths, const T* directions, CompositeOptions options,      \
                             T* rgb_map, T* depth_map, T* acc_map, T* weights STREAM_PARAM);      \
  PREFIX void composite_rays_backward(                                                            \
      int n_rays, int n_samples, const T* sigma, const T* rgb, const T* depths,                   \
      const T* directions, CompositeOptions options, const T* grad_rgb_map,                       \
      const T* grad_depth_map, const T* grad_acc_map, const T* grad_weights, T* grad_sigma,       \
      T* grad_rgb STREAM_PARAM);                                                                  \
  PREFIX void composite_dynamic_rays(int n_rays, int n_samples, DynamicComposite mode,            \
                                     const DynamicSamples<const T>& samples, const T* depths,     \
                                     const DynamicRenders<T>& out STREAM_PARAM);                  \
  PREFIX void composite_dynamic_rays_backward(                                                    \
      int n_rays, int n_samples, DynamicComposite mode, const DynamicSamples<const T>& samples,   \
      const T* depths, const DynamicRenders<const T>& grad_out,                                   \
      const DynamicSamples<T>& grad_samples STREAM_PARAM);                                        \
  PREFIX void render_flows(int n_rays, int n_samples, int n_offsets, const T* weights,            \
                           const T* points, const PinholeCamera<T>* cameras, const T* pixels,     \
                           T* flows STREAM_PARAM);                                                \
  PREFIX void render_flows_backward(int n_rays, int n_samples, int n_offsets, const T* weights,   \
                                    const T* points, const PinholeCamera<T>* cameras,             \
                                    const T* grad_flows, T* grad_weights,                         \
                                    T* grad_points STREAM_PARAM);                                 \
  PREFIX void ray_mask(int n_rays, int n_samples, int n_views, const T* sample_mask,              \
                       RayMaskRule rule, T* ray_mask STREAM_PARAM);                               \
  PREFIX void masked_mse(int n_rays, const T* predicted, const T* target, const T* ray_mask,      \
                         T* loss_and_denominator STREAM_PARAM);                                   \
  PREFIX void masked_mse_backward(int n_rays, const T* predicted, const T* target,                \
                                  const T* ray_mask, const T* loss_and_denominator, T grad_loss,  \
                                  T* grad_predicted STREAM_PARAM);

#define MVIBR_NO_STREAM
#define MVIBR_WITH_STREAM , StreamHandle stream

namespace cpu {
// Templates instantiated for float and double. Every function validates its options and throws
// InvalidArgument on bad ones. gather_samples_backward accumulates (+=) into grad_features and
// grad_images (nullable); every other output is overwritten. Null grad_depth_map / grad_acc_map /
// grad_weights mean zero gradient. gather_moved_samples_backward overwrites grad_moved_points
// [R,S,V,3] (nullable), the gradient through the projection and the bilinear reads;
// render_flows_backward accumulates into grad_weights [R,S] and overwrites grad_points
// [K,R,S,3], both nullable. mask_unseen_colours writes seen_colour_mask (geom/projection.h) of
// each gathered row [rows, row_width] and its mask. masked_mse
// writes {loss, denominator}; the backward reads the denominator.
MVIBR_RENDER_OPS(T, template <typename T>, MVIBR_NO_STREAM)
}  // namespace cpu

namespace cuda {
// Same contracts with every array in device memory, views.cameras included (generate_rays'
// camera is a host value passed to the kernel); asynchronous on `stream`.
// Options are validated on the host before launch.
MVIBR_RENDER_OPS(float, , MVIBR_WITH_STREAM)
}  // namespace cuda

}  // namespace mvibr
