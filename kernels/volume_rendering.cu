// CUDA launchers of compositing (IBRNet's, and DynIBaR's two components), its backward and
// IBRNet's ray mask. Each is a sequential scan
// along one ray (transmittance forward, the suffix sum B backward), so a thread owns a ray and
// runs the same per-ray function as the CPU backend; rays are the parallelism.
#include "common.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/render/volume_rendering.h"

namespace mvibr::cuda {

// Training composites a few hundred rays per call: small blocks spread them over many SMs.
constexpr int kRaysPerBlock = 64;  // a thread per ray

// |d| of ray r, or 1 without directions: the CPU backend's direction_norm.
__device__ float direction_norm(const float* directions, size_t r) {
  if (!directions) return 1.0f;
  return norm(Vec3<float>{directions[3 * r], directions[3 * r + 1], directions[3 * r + 2]});
}

__global__ void composite_rays_kernel(int n_rays, int n_samples, const float* sigma,
                                      const float* rgb, const float* depths,
                                      const float* directions, CompositeOptions options,
                                      float* rgb_map, float* depth_map, float* acc_map,
                                      float* weights) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    const size_t base = r * n_samples;
    composite_ray(sigma + base, rgb + 3 * base, depths + base, n_samples,
                  direction_norm(directions, r), options, weights + base, rgb_map + 3 * r,
                  depth_map + r, acc_map + r);
  }
}

void composite_rays(int n_rays, int n_samples, const float* sigma, const float* rgb,
                    const float* depths, const float* directions, CompositeOptions options,
                    float* rgb_map, float* depth_map, float* acc_map, float* weights,
                    StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(composite_rays_kernel, blocks_for(size_t(n_rays), kRaysPerBlock), kRaysPerBlock, 0,
               stream)
  (n_rays, n_samples, sigma, rgb, depths, directions, options, rgb_map, depth_map, acc_map,
   weights);
  MVIBR_CUDA_CHECK_LAUNCH();
}

__global__ void composite_rays_backward_kernel(int n_rays, int n_samples, const float* sigma,
                                               const float* rgb, const float* depths,
                                               const float* directions, CompositeOptions options,
                                               const float* grad_rgb_map,
                                               const float* grad_depth_map,
                                               const float* grad_acc_map, const float* grad_weights,
                                               float* grad_sigma, float* grad_rgb) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    const size_t base = r * n_samples;
    composite_ray_backward(
        sigma + base, rgb + 3 * base, depths + base, n_samples, direction_norm(directions, r),
        options, grad_rgb_map + 3 * r, grad_depth_map ? grad_depth_map[r] : 0.0f,
        grad_acc_map ? grad_acc_map[r] : 0.0f, grad_weights ? grad_weights + base : nullptr,
        grad_sigma + base, grad_rgb + 3 * base);
  }
}

void composite_rays_backward(int n_rays, int n_samples, const float* sigma, const float* rgb,
                             const float* depths, const float* directions, CompositeOptions options,
                             const float* grad_rgb_map, const float* grad_depth_map,
                             const float* grad_acc_map, const float* grad_weights,
                             float* grad_sigma, float* grad_rgb, StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(composite_rays_backward_kernel, blocks_for(size_t(n_rays), kRaysPerBlock),
               kRaysPerBlock, 0, stream)
  (n_rays, n_samples, sigma, rgb, depths, directions, options, grad_rgb_map, grad_depth_map,
   grad_acc_map, grad_weights, grad_sigma, grad_rgb);
  MVIBR_CUDA_CHECK_LAUNCH();
}

__global__ void composite_dynamic_rays_kernel(int n_rays, int n_samples, DynamicComposite mode,
                                              DynamicSamples<const float> samples,
                                              const float* depths, DynamicRenders<float> out) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    composite_dynamic_batch_ray(r, n_samples, mode, samples, depths, out);
  }
}

void composite_dynamic_rays(int n_rays, int n_samples, DynamicComposite mode,
                            const DynamicSamples<const float>& samples, const float* depths,
                            const DynamicRenders<float>& out, StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(composite_dynamic_rays_kernel, blocks_for(size_t(n_rays), kRaysPerBlock),
               kRaysPerBlock, 0, stream)
  (n_rays, n_samples, mode, samples, depths, out);
  MVIBR_CUDA_CHECK_LAUNCH();
}

// One thread per ray, its offsets in order (the CPU's sums).
__global__ void render_flows_kernel(int n_rays, int n_samples, int n_offsets, const float* weights,
                                    const float* points, const PinholeCamera<float>* cameras,
                                    const float* pixels, float* flows) {
  const size_t R = size_t(n_rays), S = size_t(n_samples);
  for (size_t r = grid_thread_index(); r < R; r += grid_thread_count()) {
    for (int k = 0; k < n_offsets; ++k) {
      const size_t kr = size_t(k) * R + r;
      rendered_flow(n_samples, weights + r * S, points + kr * S * 3, cameras[k], pixels + r * 2,
                    flows + kr * 2);
    }
  }
}

void render_flows(int n_rays, int n_samples, int n_offsets, const float* weights,
                  const float* points, const PinholeCamera<float>* cameras, const float* pixels,
                  float* flows, StreamHandle stream) {
  cuda_detail::launch_threads(size_t(n_rays > 0 ? n_rays : 0), stream, render_flows_kernel, n_rays,
                              n_samples, n_offsets, weights, points, cameras, pixels, flows);
}

__global__ void render_flows_backward_kernel(int n_rays, int n_samples, int n_offsets,
                                             const float* weights, const float* points,
                                             const PinholeCamera<float>* cameras,
                                             const float* grad_flows, float* grad_weights,
                                             float* grad_points) {
  const size_t R = size_t(n_rays), S = size_t(n_samples);
  for (size_t r = grid_thread_index(); r < R; r += grid_thread_count()) {
    for (int k = 0; k < n_offsets; ++k) {
      const size_t kr = size_t(k) * R + r;
      rendered_flow_backward(n_samples, weights + r * S, points + kr * S * 3, cameras[k],
                             grad_flows + kr * 2, grad_weights ? grad_weights + r * S : nullptr,
                             grad_points ? grad_points + kr * S * 3 : nullptr);
    }
  }
}

void render_flows_backward(int n_rays, int n_samples, int n_offsets, const float* weights,
                           const float* points, const PinholeCamera<float>* cameras,
                           const float* grad_flows, float* grad_weights, float* grad_points,
                           StreamHandle stream) {
  cuda_detail::launch_threads(size_t(n_rays > 0 ? n_rays : 0), stream, render_flows_backward_kernel,
                              n_rays, n_samples, n_offsets, weights, points, cameras, grad_flows,
                              grad_weights, grad_points);
}

__global__ void composite_dynamic_rays_backward_kernel(
    int n_rays, int n_samples, DynamicComposite mode, DynamicSamples<const float> samples,
    const float* depths, DynamicRenders<const float> grad_out, DynamicSamples<float> grad_samples) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    composite_dynamic_batch_ray_backward(r, n_samples, mode, samples, depths, grad_out,
                                         grad_samples);
  }
}

void composite_dynamic_rays_backward(int n_rays, int n_samples, DynamicComposite mode,
                                     const DynamicSamples<const float>& samples,
                                     const float* depths,
                                     const DynamicRenders<const float>& grad_out,
                                     const DynamicSamples<float>& grad_samples,
                                     StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(composite_dynamic_rays_backward_kernel, blocks_for(size_t(n_rays), kRaysPerBlock),
               kRaysPerBlock, 0, stream)
  (n_rays, n_samples, mode, samples, depths, grad_out, grad_samples);
  MVIBR_CUDA_CHECK_LAUNCH();
}

__global__ void ray_mask_kernel(int n_rays, int n_samples, int n_views, const float* sample_mask,
                                RayMaskRule rule, float* ray_mask) {
  for (size_t r = grid_thread_index(); r < size_t(n_rays); r += grid_thread_count()) {
    ray_mask[r] = ray_validity(sample_mask + r * n_samples * n_views, n_samples, n_views,
                               rule.min_views, rule.min_samples);
  }
}

void ray_mask(int n_rays, int n_samples, int n_views, const float* sample_mask, RayMaskRule rule,
              float* ray_mask, StreamHandle stream) {
  if (n_rays <= 0) return;
  MVIBR_LAUNCH(ray_mask_kernel, blocks_for(size_t(n_rays), kRaysPerBlock), kRaysPerBlock, 0, stream)
  (n_rays, n_samples, n_views, sample_mask, rule, ray_mask);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::cuda
