// The end-to-end check chain of toy_pipeline.h on the CPU backend.
#include "mvibr/synthetic/toy_pipeline.h"

#include <cmath>

namespace mvibr::synthetic {

namespace {

// Fixed projection vector of the toy density: alternating signs, so sigma is not trivially 0.
template <typename T>
T toy_density_weight(int c) {
  return T(0.5) * (c % 2 ? T(-1) : T(1)) / T(1 + c % 3);
}

template <typename T>
struct Pass {
  int n_samples = 0;
  std::vector<T> depths, rgb_features, ray_diff, mask, sigma, rgb, rgb_map, depth_map, acc_map,
      weights, ray_mask, loss;
  std::vector<T> feature_dot;  // [R,S]: mean over visible views of features . a
};

template <typename T>
void toy_network(int n_rays, int n_views, int channels, Pass<T>* p) {
  const int S = p->n_samples, width = 3 + channels;
  p->sigma.assign(size_t(n_rays) * S, T(0));
  p->rgb.assign(size_t(n_rays) * S * 3, T(0));
  p->feature_dot.assign(size_t(n_rays) * S, T(0));
  for (size_t rs = 0; rs < size_t(n_rays) * S; ++rs) {
    T dot = T(0), r = T(0), g = T(0), b = T(0);
    for (int v = 0; v < n_views; ++v) {
      const T m = p->mask[rs * n_views + v];
      const T* row = &p->rgb_features[(rs * n_views + v) * width];
      r += m * row[0];
      g += m * row[1];
      b += m * row[2];
      for (int c = 0; c < channels; ++c) dot += m * row[3 + c] * toy_density_weight<T>(c);
    }
    const T inv_views = T(1) / T(n_views);
    p->feature_dot[rs] = dot * inv_views;
    p->sigma[rs] = p->feature_dot[rs] * p->feature_dot[rs];
    p->rgb[3 * rs] = r * inv_views;
    p->rgb[3 * rs + 1] = g * inv_views;
    p->rgb[3 * rs + 2] = b * inv_views;
  }
}

template <typename T>
void toy_network_backward(int n_rays, int n_views, int channels, const Pass<T>& p,
                          const std::vector<T>& grad_sigma, const std::vector<T>& grad_rgb,
                          std::vector<T>* grad_rgb_features) {
  const int S = p.n_samples, width = 3 + channels;
  grad_rgb_features->assign(size_t(n_rays) * S * n_views * width, T(0));
  const T inv_views = T(1) / T(n_views);
  for (size_t rs = 0; rs < size_t(n_rays) * S; ++rs) {
    const T grad_dot = grad_sigma[rs] * T(2) * p.feature_dot[rs] * inv_views;
    for (int v = 0; v < n_views; ++v) {
      const T m = p.mask[rs * n_views + v];
      T* row = &(*grad_rgb_features)[(rs * n_views + v) * width];
      for (int c = 0; c < 3; ++c) row[c] = m * grad_rgb[3 * rs + c] * inv_views;
      for (int c = 0; c < channels; ++c) row[3 + c] = m * grad_dot * toy_density_weight<T>(c);
    }
  }
}

template <typename T>
void forward_pass(const RandomScene& scene, const SourceViews<T>& views, const T* origins,
                  const T* directions, Vec3<T> target_center, const std::vector<T>& target_rgb,
                  const CompositeOptions& composite, Pass<T>* p) {
  const int R = scene.size.n_rays, S = p->n_samples, V = views.n_views;
  const int width = 3 + views.feature_channels;
  p->rgb_features.resize(size_t(R) * S * V * width);
  p->ray_diff.resize(size_t(R) * S * V * 4);
  p->mask.resize(size_t(R) * S * V);
  cpu::gather_samples(R, S, origins, directions, p->depths.data(), target_center, views,
                      GatherOutputs<T>{p->rgb_features.data(), p->ray_diff.data(), p->mask.data()});
  toy_network(R, V, views.feature_channels, p);
  p->rgb_map.resize(size_t(R) * 3);
  p->depth_map.resize(R);
  p->acc_map.resize(R);
  p->weights.resize(size_t(R) * S);
  cpu::composite_rays(R, S, p->sigma.data(), p->rgb.data(), p->depths.data(), directions, composite,
                      p->rgb_map.data(), p->depth_map.data(), p->acc_map.data(), p->weights.data());
  p->ray_mask.resize(R);
  cpu::ray_mask(R, S, V, p->mask.data(), RayMaskRule{1, 1}, p->ray_mask.data());
  p->loss.resize(2);
  cpu::masked_mse(R, p->rgb_map.data(), target_rgb.data(), p->ray_mask.data(), p->loss.data());
}

template <typename T>
void backward_pass(const RandomScene& scene, const SourceViews<T>& views, const T* origins,
                   const T* directions, const std::vector<T>& target_rgb,
                   const CompositeOptions& composite, const Pass<T>& p, T* grad_features) {
  const int R = scene.size.n_rays, S = p.n_samples, V = views.n_views;
  std::vector<T> grad_rgb_map(size_t(R) * 3), grad_sigma(size_t(R) * S),
      grad_rgb(size_t(R) * S * 3), grad_rgb_features;
  cpu::masked_mse_backward(R, p.rgb_map.data(), target_rgb.data(), p.ray_mask.data(), p.loss.data(),
                           T(1), grad_rgb_map.data());
  cpu::composite_rays_backward(R, S, p.sigma.data(), p.rgb.data(), p.depths.data(), directions,
                               composite, grad_rgb_map.data(), static_cast<const T*>(nullptr),
                               static_cast<const T*>(nullptr), static_cast<const T*>(nullptr),
                               grad_sigma.data(), grad_rgb.data());
  toy_network_backward(R, V, views.feature_channels, p, grad_sigma, grad_rgb, &grad_rgb_features);
  cpu::gather_samples_backward(R, S, origins, directions, p.depths.data(), views,
                               grad_rgb_features.data(), static_cast<T*>(nullptr), grad_features);
}

}  // namespace

template <typename T>
ToyPipelineResult<T> run_toy_pipeline(const RandomScene& scene, const std::vector<T>& features,
                                      const std::vector<T>& target_rgb,
                                      const ToyPipelineOptions& options, bool with_backward,
                                      const std::vector<T>* frozen_fine_depths) {
  const RandomSceneSize& size = scene.size;
  const int R = size.n_rays;
  const std::vector<PinholeCamera<T>> cameras = cast_cameras<T>(scene.sources);
  const std::vector<T> images = cast_values<T>(scene.images);
  const SourceViews<T> views = scene_views(scene, cameras.data(), images.data(), features.data());

  const PinholeCamera<T> target = camera_cast<T>(scene.target);
  const std::vector<T> pixels = cast_values<T>(scene.pixels);
  std::vector<T> origins(size_t(R) * 3), directions(size_t(R) * 3);
  cpu::generate_rays(target, pixels.data(), R, origins.data(), directions.data());

  Pass<T> coarse, fine;
  coarse.n_samples = options.n_samples;
  coarse.depths.resize(size_t(R) * options.n_samples);
  DepthSampling sampling{scene.near_depth, scene.far_depth, options.n_samples, options.inv_uniform,
                         options.deterministic};
  cpu::sample_coarse_depths(R, sampling, options.key, 0, coarse.depths.data());
  forward_pass(scene, views, origins.data(), directions.data(), target.center(), target_rgb,
               options.composite, &coarse);

  fine.n_samples = options.n_samples + options.n_importance;
  fine.depths.resize(size_t(R) * fine.n_samples);
  ImportanceSampling importance{options.n_samples, options.n_importance, options.inv_uniform,
                                options.deterministic};
  cpu::sample_importance_depths(R, importance, coarse.depths.data(), coarse.weights.data(),
                                options.key, 0, fine.depths.data());
  if (frozen_fine_depths) fine.depths = *frozen_fine_depths;
  forward_pass(scene, views, origins.data(), directions.data(), target.center(), target_rgb,
               options.composite, &fine);

  ToyPipelineResult<T> result;
  result.loss = coarse.loss[0] + fine.loss[0];
  result.rgb_map = fine.rgb_map;
  result.fine_depths = fine.depths;
  if (with_backward) {
    result.grad_features.assign(features.size(), T(0));
    backward_pass(scene, views, origins.data(), directions.data(), target_rgb, options.composite,
                  coarse, result.grad_features.data());
    backward_pass(scene, views, origins.data(), directions.data(), target_rgb, options.composite,
                  fine, result.grad_features.data());
  }
  return result;
}

template ToyPipelineResult<float> run_toy_pipeline(const RandomScene&, const std::vector<float>&,
                                                   const std::vector<float>&,
                                                   const ToyPipelineOptions&, bool,
                                                   const std::vector<float>*);
template ToyPipelineResult<double> run_toy_pipeline(const RandomScene&, const std::vector<double>&,
                                                    const std::vector<double>&,
                                                    const ToyPipelineOptions&, bool,
                                                    const std::vector<double>*);

}  // namespace mvibr::synthetic
