// CPU backend of ray generation and depth sampling: OpenMP over rays, the math of
// geom/camera.h and geom/ray_sampling.h.
#include "mvibr/geom/ray_sampling.h"

#include <vector>

#include "mvibr/ops/render_ops.h"

namespace mvibr::cpu {

template <typename T>
void generate_rays(const PinholeCamera<T>& camera, const T* pixels, int n_rays, T* origins,
                   T* directions) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) store_pixel_ray(camera, pixels, size_t(r), origins, directions);
}

template <typename T>
void sample_coarse_depths(int n_rays, const DepthSampling& s, RandomKey key, uint32_t first_ray,
                          T* depths) {
  validate_depth_sampling(s);
  const T near_depth = T(s.near_depth), far_depth = T(s.far_depth);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    for (int i = 0; i < s.n_samples; ++i) {
      const T u = s.deterministic ? T(0)
                                  : T(philox_uniform(key, RandomStream::kStratifiedJitter,
                                                     first_ray + uint32_t(r), uint32_t(i)));
      depths[size_t(r) * s.n_samples + i] =
          coarse_depth(i, s.n_samples, near_depth, far_depth, s.inv_uniform, s.deterministic, u);
    }
  }
}

template <typename T>
void sample_importance_depths(int n_rays, const ImportanceSampling& s, const T* coarse_depths,
                              const T* coarse_weights, RandomKey key, uint32_t first_ray,
                              T* merged_depths) {
  validate_importance_sampling(s);
  const int n_total = s.n_coarse + s.n_importance;
#pragma omp parallel
  {
    std::vector<T> cdf(size_t(s.n_coarse));
#pragma omp for schedule(static)
    for (int r = 0; r < n_rays; ++r) {
      const ImportanceUniforms<T> uniforms{key, first_ray + uint32_t(r), s.n_importance,
                                           s.deterministic};
      importance_sample_ray(coarse_depths + size_t(r) * s.n_coarse,
                            coarse_weights + size_t(r) * s.n_coarse, s.n_coarse, s.n_importance,
                            s.inv_uniform, uniforms, cdf.data(),
                            merged_depths + size_t(r) * n_total);
    }
  }
}

template void generate_rays(const PinholeCamera<float>&, const float*, int, float*, float*);
template void generate_rays(const PinholeCamera<double>&, const double*, int, double*, double*);
template void sample_coarse_depths(int, const DepthSampling&, RandomKey, uint32_t, float*);
template void sample_coarse_depths(int, const DepthSampling&, RandomKey, uint32_t, double*);
template void sample_importance_depths(int, const ImportanceSampling&, const float*, const float*,
                                       RandomKey, uint32_t, float*);
template void sample_importance_depths(int, const ImportanceSampling&, const double*, const double*,
                                       RandomKey, uint32_t, double*);

}  // namespace mvibr::cpu
