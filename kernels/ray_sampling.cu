// CUDA launchers of ray generation and depth sampling. Rays and coarse depths are independent
// per element, so each gets its own thread (per ray, per (ray, sample)). Importance sampling
// is a sequential inverse-CDF walk and insertion sort per ray, so a thread owns a ray and keeps
// its cdf and merged depths in a local array, sized by a compile-time capacity picked at launch
// so the common 64 + 64 samples do not reserve local memory for kMaxSamplesPerRay.
#include "common.h"
#include "mvibr/geom/ray_sampling.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr::cuda {

// Thread-per-ray kernels see a few hundred rays per call in training: small blocks spread them
// over many SMs instead of packing them onto a few.
constexpr int kRayThreadsPerBlock = 64;

__global__ void generate_rays_kernel(PinholeCamera<float> camera, const float* pixels, int n_rays,
                                     float* origins, float* directions) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    store_pixel_ray(camera, pixels, r, origins, directions);
  }
}

// `camera` is read on the host: it is passed by value as a kernel argument.
void generate_rays(const PinholeCamera<float>& camera, const float* pixels, int n_rays,
                   float* origins, float* directions, StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(generate_rays_kernel, blocks_for(size_t(n_rays), kRayThreadsPerBlock),
               kRayThreadsPerBlock, 0, stream)
  (camera, pixels, n_rays, origins, directions);
  MVIBR_CUDA_CHECK_LAUNCH();
}

__global__ void sample_coarse_depths_kernel(int n_rays, int n_samples, float near_depth,
                                            float far_depth, bool inv_uniform, bool deterministic,
                                            RandomKey key, uint32_t first_ray, float* depths) {
  const size_t n_depths = size_t(n_rays) * n_samples;
  for (size_t k = grid_thread_index(); k < n_depths; k += grid_thread_count()) {
    const int r = int(k / n_samples), i = int(k % n_samples);
    const float u = deterministic ? 0.0f
                                  : float(philox_uniform(key, RandomStream::kStratifiedJitter,
                                                         first_ray + uint32_t(r), uint32_t(i)));
    depths[k] = coarse_depth(i, n_samples, near_depth, far_depth, inv_uniform, deterministic, u);
  }
}

void sample_coarse_depths(int n_rays, const DepthSampling& sampling, RandomKey key,
                          uint32_t first_ray, float* depths, StreamHandle stream) {
  validate_depth_sampling(sampling);
  if (n_rays <= 0) return;
  const size_t n_depths = size_t(n_rays) * sampling.n_samples;
  MVIBR_LAUNCH(sample_coarse_depths_kernel, blocks_for(n_depths, kThreadsPerBlock),
               kThreadsPerBlock, 0, stream)
  (n_rays, sampling.n_samples, float(sampling.near_depth), float(sampling.far_depth),
   sampling.inv_uniform, sampling.deterministic, key, first_ray, depths);
  MVIBR_CUDA_CHECK_LAUNCH();
}

// kCapacity bounds n_coarse + n_importance; cdf needs n_coarse - 1 of it.
template <int kCapacity>
__global__ void sample_importance_depths_kernel(int n_rays, int n_coarse, int n_importance,
                                                bool inv_uniform, bool deterministic,
                                                const float* coarse_depths,
                                                const float* coarse_weights, RandomKey key,
                                                uint32_t first_ray, float* merged_depths) {
  const int n_total = n_coarse + n_importance;
  float cdf[kCapacity];
  float merged[kCapacity];
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    const ImportanceUniforms<float> uniforms{key, first_ray + uint32_t(r), n_importance,
                                             deterministic};
    importance_sample_ray(coarse_depths + r * n_coarse, coarse_weights + r * n_coarse, n_coarse,
                          n_importance, inv_uniform, uniforms, cdf, merged);
    float* out = merged_depths + r * n_total;
    for (int j = 0; j < n_total; ++j) out[j] = merged[j];
  }
}

template <int kCapacity>
static void launch_importance_sampling(int n_rays, const ImportanceSampling& s,
                                       const float* coarse_depths, const float* coarse_weights,
                                       RandomKey key, uint32_t first_ray, float* merged_depths,
                                       StreamHandle stream) {
  MVIBR_LAUNCH(sample_importance_depths_kernel<kCapacity>,
               blocks_for(size_t(n_rays), kRayThreadsPerBlock), kRayThreadsPerBlock, 0, stream)
  (n_rays, s.n_coarse, s.n_importance, s.inv_uniform, s.deterministic, coarse_depths,
   coarse_weights, key, first_ray, merged_depths);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void sample_importance_depths(int n_rays, const ImportanceSampling& sampling,
                              const float* coarse_depths, const float* coarse_weights,
                              RandomKey key, uint32_t first_ray, float* merged_depths,
                              StreamHandle stream) {
  validate_importance_sampling(sampling);
  if (n_rays <= 0) return;
  const int n_total = sampling.n_coarse + sampling.n_importance;
  const auto launch = n_total <= 64    ? launch_importance_sampling<64>
                      : n_total <= 128 ? launch_importance_sampling<128>
                      : n_total <= 256 ? launch_importance_sampling<256>
                                       : launch_importance_sampling<kMaxSamplesPerRay>;
  launch(n_rays, sampling, coarse_depths, coarse_weights, key, first_ray, merged_depths, stream);
}

}  // namespace mvibr::cuda
