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
template void ray_mask(int, int, int, const float*, RayMaskRule, float*);
template void ray_mask(int, int, int, const double*, RayMaskRule, double*);

}  // namespace mvibr::cpu
