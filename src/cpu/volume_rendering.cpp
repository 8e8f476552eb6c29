// CPU backend of compositing (IBRNet's, and DynIBaR's two components), its backward and IBRNet's
// ray mask: OpenMP over rays, the math of render/volume_rendering.h and dynamic_compositing.h.
#include "mvibr/render/volume_rendering.h"
#include "mvibr/render/dynamic_compositing.h"

#include "mvibr/ops/render_ops.h"

namespace mvibr::cpu {

template <typename T>
static T direction_norm(const T* directions, int r) {
  if (!directions) return T(1);
  const T* d = directions + 3 * r;
  return std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
}

template <typename T>
void composite_rays(int n_rays, int n_samples, const T* sigma, const T* rgb, const T* depths,
                    const T* directions, CompositeOptions options, T* rgb_map, T* depth_map,
                    T* acc_map, T* weights) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    const size_t base = size_t(r) * n_samples;
    composite_ray(sigma + base, rgb + 3 * base, depths + base, n_samples,
                  direction_norm(directions, r), options, weights + base, rgb_map + 3 * r,
                  depth_map + r, acc_map + r);
  }
}

template <typename T>
void composite_rays_backward(int n_rays, int n_samples, const T* sigma, const T* rgb,
                             const T* depths, const T* directions, CompositeOptions options,
                             const T* grad_rgb_map, const T* grad_depth_map, const T* grad_acc_map,
                             const T* grad_weights, T* grad_sigma, T* grad_rgb) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    const size_t base = size_t(r) * n_samples;
    composite_ray_backward(
        sigma + base, rgb + 3 * base, depths + base, n_samples, direction_norm(directions, r),
        options, grad_rgb_map + 3 * r, grad_depth_map ? grad_depth_map[r] : T(0),
        grad_acc_map ? grad_acc_map[r] : T(0), grad_weights ? grad_weights + base : nullptr,
        grad_sigma + base, grad_rgb + 3 * base);
  }
}

template <typename T>
void composite_dynamic_rays(int n_rays, int n_samples, DynamicComposite mode,
                            const DynamicSamples<const T>& samples, const T* depths,
                            const DynamicRenders<T>& out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    composite_dynamic_batch_ray(size_t(r), n_samples, mode, samples, depths, out);
  }
}

template <typename T>
void composite_dynamic_rays_backward(int n_rays, int n_samples, DynamicComposite mode,
                                     const DynamicSamples<const T>& samples, const T* depths,
                                     const DynamicRenders<const T>& grad_out,
                                     const DynamicSamples<T>& grad_samples) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    composite_dynamic_batch_ray_backward(size_t(r), n_samples, mode, samples, depths, grad_out,
                                         grad_samples);
  }
}

template <typename T>
void render_flows(int n_rays, int n_samples, int n_offsets, const T* weights, const T* points,
                  const PinholeCamera<T>* cameras, const T* pixels, T* flows) {
  const size_t R = size_t(n_rays), S = size_t(n_samples);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    for (int k = 0; k < n_offsets; ++k) {
      const size_t kr = size_t(k) * R + size_t(r);
      rendered_flow(n_samples, weights + size_t(r) * S, points + kr * S * 3, cameras[k],
                    pixels + size_t(r) * 2, flows + kr * 2);
    }
  }
}

template <typename T>
void render_flows_backward(int n_rays, int n_samples, int n_offsets, const T* weights,
                           const T* points, const PinholeCamera<T>* cameras, const T* grad_flows,
                           T* grad_weights, T* grad_points) {
  const size_t R = size_t(n_rays), S = size_t(n_samples);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {  // a ray's offsets in order: its weights' sums are fixed
    for (int k = 0; k < n_offsets; ++k) {
      const size_t kr = size_t(k) * R + size_t(r);
      rendered_flow_backward(n_samples, weights + size_t(r) * S, points + kr * S * 3, cameras[k],
                             grad_flows + kr * 2,
                             grad_weights ? grad_weights + size_t(r) * S : nullptr,
                             grad_points ? grad_points + kr * S * 3 : nullptr);
    }
  }
}

template <typename T>
void ray_mask(int n_rays, int n_samples, int n_views, const T* sample_mask, RayMaskRule rule,
              T* out) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    out[r] = ray_validity(sample_mask + size_t(r) * n_samples * n_views, n_samples, n_views,
                          rule.min_views, rule.min_samples);
  }
}

template void composite_rays(int, int, const float*, const float*, const float*, const float*,
                             CompositeOptions, float*, float*, float*, float*);
template void composite_rays(int, int, const double*, const double*, const double*, const double*,
                             CompositeOptions, double*, double*, double*, double*);
template void composite_rays_backward(int, int, const float*, const float*, const float*,
                                      const float*, CompositeOptions, const float*, const float*,
                                      const float*, const float*, float*, float*);
template void composite_rays_backward(int, int, const double*, const double*, const double*,
                                      const double*, CompositeOptions, const double*, const double*,
                                      const double*, const double*, double*, double*);
#define MVIBR_INSTANTIATE_DYNAMIC(T)                                                               \
  template void composite_dynamic_rays(int, int, DynamicComposite, const DynamicSamples<const T>&, \
                                       const T*, const DynamicRenders<T>&);                        \
  template void composite_dynamic_rays_backward(                                                   \
      int, int, DynamicComposite, const DynamicSamples<const T>&, const T*,                        \
      const DynamicRenders<const T>&, const DynamicSamples<T>&);
MVIBR_INSTANTIATE_DYNAMIC(float)
MVIBR_INSTANTIATE_DYNAMIC(double)
#undef MVIBR_INSTANTIATE_DYNAMIC
#define MVIBR_INSTANTIATE_FLOWS(T)                                                                 \
  template void render_flows(int, int, int, const T*, const T*, const PinholeCamera<T>*, const T*, \
                             T*);                                                                  \
  template void render_flows_backward(int, int, int, const T*, const T*, const PinholeCamera<T>*,  \
                                      const T*, T*, T*);
MVIBR_INSTANTIATE_FLOWS(float)
MVIBR_INSTANTIATE_FLOWS(double)
#undef MVIBR_INSTANTIATE_FLOWS
template void ray_mask(int, int, int, const float*, RayMaskRule, float*);
template void ray_mask(int, int, int, const double*, RayMaskRule, double*);

}  // namespace mvibr::cpu
