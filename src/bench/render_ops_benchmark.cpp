#include "mvibr/bench/render_ops_benchmark.h"

#include <memory>
#include <string>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/geom/ray_sampling.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::bench {

namespace {

// Host inputs of every op, float.
struct Problem {
  RenderOpsSize size;
  synthetic::RandomScene scene;
  std::vector<PinholeCamera<float>> cameras;
  std::vector<float> images, features, pixels, origins, directions, depths, weights, fine_depths;
  std::vector<float> grad_rgb_features, sample_mask, sigma, rgb, target, ray_mask, predicted;
  std::vector<float> loss_and_denominator;
  SourceViews<float> views;

  explicit Problem(const RenderOpsSize& s) : size(s) {
    synthetic::RandomSceneSize scene_size;
    scene_size.n_views = s.views;
    scene_size.image_width = s.image_width;
    scene_size.image_height = s.image_height;
    scene_size.feature_width = s.feature_width;
    scene_size.feature_height = s.feature_height;
    scene_size.feature_channels = s.channels;
    scene_size.n_rays = s.rays;
    scene = synthetic::make_random_scene(scene_size, 1);
    cameras = synthetic::cast_cameras<float>(scene.sources);
    images = synthetic::cast_values<float>(scene.images);
    features = synthetic::cast_values<float>(scene.features);
    pixels = synthetic::cast_values<float>(scene.pixels);
    origins.resize(size_t(s.rays) * 3);
    directions.resize(size_t(s.rays) * 3);
    cpu::generate_rays(target_camera(), pixels.data(), s.rays, origins.data(), directions.data());
    depths.resize(size_t(s.rays) * s.samples);
    cpu::sample_coarse_depths(s.rays, coarse_sampling(), {1, 1}, 0, depths.data());
    weights = synthetic::cast_values<float>(synthetic::random_values(depths.size(), 0, 1, 2));
    fine_depths.resize(size_t(s.rays) * fine());
    cpu::sample_importance_depths(s.rays, importance_sampling(), depths.data(), weights.data(),
                                  {1, 1}, 0, fine_depths.data());
    views = synthetic::scene_views(scene, cameras.data(), images.data(), features.data());
    grad_rgb_features = synthetic::cast_values<float>(
        synthetic::random_values(gather_rows() * (3 + s.channels), -1, 1, 3));
    // The ray mask reads the visibility a real gather produces.
    std::vector<float> rgb_features(gather_rows() * (3 + s.channels)), ray_diff(gather_rows() * 4);
    sample_mask.resize(gather_rows());
    cpu::gather_samples(
        s.rays, s.samples, origins.data(), directions.data(), depths.data(), target_center(), views,
        GatherOutputs<float>{rgb_features.data(), ray_diff.data(), sample_mask.data()});
    sigma =
        synthetic::cast_values<float>(synthetic::random_values(size_t(s.rays) * fine(), 0, 2, 4));
    rgb = synthetic::cast_values<float>(
        synthetic::random_values(size_t(s.rays) * fine() * 3, 0, 1, 5));
    target = synthetic::cast_values<float>(synthetic::random_values(size_t(s.rays) * 3, 0, 1, 6));
    predicted =
        synthetic::cast_values<float>(synthetic::random_values(size_t(s.rays) * 3, 0, 1, 7));
    ray_mask.assign(size_t(s.rays), 1.0f);
    loss_and_denominator.resize(2);
    cpu::masked_mse(s.rays, predicted.data(), target.data(), ray_mask.data(),
                    loss_and_denominator.data());
  }

  int fine() const { return size.samples + size.importance; }
  size_t gather_rows() const { return size_t(size.rays) * size.samples * size.views; }
  PinholeCamera<float> target_camera() const { return camera_cast<float>(scene.target); }
  Vec3<float> target_center() const { return target_camera().center(); }
  DepthSampling coarse_sampling() const { return {2.0, 6.0, size.samples, false, false}; }
  ImportanceSampling importance_sampling() const {
    return {size.samples, size.importance, false, false};
  }
};

// Compulsory bytes (float inputs read once, outputs written once) and FLOP estimates per call.
struct Costs {
  OpCost rays, coarse, importance, gather, gather_backward, ray_mask, composite, composite_backward,
      mse, mse_backward;

  explicit Costs(const Problem& p) {
    const double R = p.size.rays, S = p.size.samples, I = p.size.importance, F = p.fine();
    const double C = p.size.channels, rows = double(p.gather_rows());
    const double map_bytes = 4.0 * double(p.images.size() + p.features.size());
    rays = {4.0 * R * (2 + 6), 19.0 * R};   // pixel to camera ray (4), rotation (15)
    coarse = {4.0 * R * S, 120.0 * R * S};  // 10 Philox rounds per sample
    importance = {4.0 * R * (2 * S + F), 4.0 * R * S + 20.0 * R * I};
    gather = {4.0 * rows * (3 + C + 4 + 1) + 4.0 * R * S + map_bytes,
              rows * (60.0 + 8.0 * (3 + C))};
    gather_backward = {4.0 * rows * (3 + C) + 2.0 * 4.0 * double(p.features.size()) + 4.0 * R * S,
                       rows * (40.0 + 8.0 * C)};
    ray_mask = {4.0 * (rows + R), rows};  // one compare-and-count per sample and view
    composite = {4.0 * R * F * (1 + 3 + 1 + 1) + 4.0 * R * 5, 12.0 * R * F};
    composite_backward = {4.0 * R * F * (1 + 3 + 1 + 1 + 3) + 4.0 * R * 3, 40.0 * R * F};
    mse = {4.0 * (7 * R + 2), 10.0 * R};  // predicted, target, mask in; loss, denominator out
    mse_backward = {4.0 * (10 * R + 2), 12.0 * R};
  }
};

}  // namespace

void validate_render_ops_size(const RenderOpsSize& s) {
  const auto positive = [](int value, const char* name) {
    if (value < 1)
      throw InvalidArgument(std::string(name) + " must be >= 1, got " + std::to_string(value));
  };
  positive(s.rays, "rays");
  positive(s.views, "views");
  positive(s.channels, "channels");
  positive(s.importance, "importance");
  if (s.samples < 3) {
    throw InvalidArgument("samples must be >= 3 (importance sampling needs an interior bin), got " +
                          std::to_string(s.samples));
  }
  if (s.samples + s.importance > kMaxSamplesPerRay) {
    throw InvalidArgument("samples + importance must be <= " + std::to_string(kMaxSamplesPerRay) +
                          ", got " + std::to_string(s.samples + s.importance));
  }
  if (s.image_width < 2 || s.image_height < 2 || s.feature_width < 2 || s.feature_height < 2) {
    throw InvalidArgument("images and feature maps must be at least 2x2");
  }
}

std::vector<OpCase> cpu_render_op_cases(const RenderOpsSize& size) {
  validate_render_ops_size(size);
  // Inputs shared by the cases; each case owns its outputs.
  const auto p = std::make_shared<const Problem>(size);
  const Costs cost(*p);
  const int R = size.rays, S = size.samples, F = p->fine();
  using Floats = std::vector<float>;
  const auto out = [](size_t n) { return std::make_shared<Floats>(n); };
  std::vector<OpCase> cases;
  {
    auto o = out(size_t(R) * 3), d = out(size_t(R) * 3);
    cases.push_back({"generate_rays", cost.rays, [p, o, d, R] {
                       cpu::generate_rays(p->target_camera(), p->pixels.data(), R, o->data(),
                                          d->data());
                     }});
  }
  {
    auto depths = out(p->depths.size());
    cases.push_back(
        {"sample_coarse_depths", cost.coarse, [p, depths, R] {
           cpu::sample_coarse_depths(R, p->coarse_sampling(), {1, 2}, 0, depths->data());
         }});
  }
  {
    auto merged = out(p->fine_depths.size());
    cases.push_back({"sample_importance_depths", cost.importance, [p, merged, R] {
                       cpu::sample_importance_depths(R, p->importance_sampling(), p->depths.data(),
                                                     p->weights.data(), {1, 2}, 0, merged->data());
                     }});
  }
  {
    auto rgb_features = out(p->grad_rgb_features.size()), ray_diff = out(p->gather_rows() * 4),
         mask = out(p->gather_rows());
    cases.push_back({"gather_samples", cost.gather, [p, rgb_features, ray_diff, mask, R, S] {
                       cpu::gather_samples(R, S, p->origins.data(), p->directions.data(),
                                           p->depths.data(), p->target_center(), p->views,
                                           GatherOutputs<float>{rgb_features->data(),
                                                                ray_diff->data(), mask->data()});
                     }});
  }
  {
    auto grad_features = out(p->features.size());
    cases.push_back({"gather_samples_backward", cost.gather_backward, [p, grad_features, R, S] {
                       cpu::gather_samples_backward(
                           R, S, p->origins.data(), p->directions.data(), p->depths.data(),
                           p->views, p->grad_rgb_features.data(), static_cast<float*>(nullptr),
                           grad_features->data());
                     }});
  }
  {
    auto mask = out(size_t(R));
    cases.push_back({"ray_mask", cost.ray_mask, [p, mask, R, S] {
                       cpu::ray_mask(R, S, p->size.views, p->sample_mask.data(), RayMaskRule{},
                                     mask->data());
                     }});
  }
  {
    auto rgb_map = out(size_t(R) * 3), depth = out(size_t(R)), acc = out(size_t(R)),
         weights = out(size_t(R) * F);
    cases.push_back({"composite_rays", cost.composite, [p, rgb_map, depth, acc, weights, R, F] {
                       cpu::composite_rays(R, F, p->sigma.data(), p->rgb.data(),
                                           p->fine_depths.data(), p->directions.data(), {},
                                           rgb_map->data(), depth->data(), acc->data(),
                                           weights->data());
                     }});
  }
  {
    auto grad_sigma = out(size_t(R) * F), grad_rgb = out(size_t(R) * F * 3);
    cases.push_back(
        {"composite_rays_backward", cost.composite_backward, [p, grad_sigma, grad_rgb, R, F] {
           cpu::composite_rays_backward(
               R, F, p->sigma.data(), p->rgb.data(), p->fine_depths.data(), p->directions.data(),
               {}, p->target.data(), static_cast<const float*>(nullptr),
               static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
               grad_sigma->data(), grad_rgb->data());
         }});
  }
  {
    auto loss = out(2);
    cases.push_back({"masked_mse", cost.mse, [p, loss, R] {
                       cpu::masked_mse(R, p->predicted.data(), p->target.data(), p->ray_mask.data(),
                                       loss->data());
                     }});
  }
  {
    auto grad = out(size_t(R) * 3);
    cases.push_back({"masked_mse_backward", cost.mse_backward, [p, grad, R] {
                       cpu::masked_mse_backward(R, p->predicted.data(), p->target.data(),
                                                p->ray_mask.data(), p->loss_and_denominator.data(),
                                                1.0f, grad->data());
                     }});
  }
  return cases;
}

#if MVIBR_HAVE_CUDA

namespace {

// Device copies of the problem's inputs.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& p)
      : cameras(p.cameras),
        images(p.images),
        features(p.features),
        pixels(p.pixels),
        origins(p.origins),
        directions(p.directions),
        depths(p.depths),
        weights(p.weights),
        fine_depths(p.fine_depths),
        grad_rgb_features(p.grad_rgb_features),
        sample_mask(p.sample_mask),
        sigma(p.sigma),
        rgb(p.rgb),
        target(p.target),
        predicted(p.predicted),
        ray_mask(p.ray_mask),
        loss_and_denominator(p.loss_and_denominator),
        views(synthetic::scene_views(p.scene, cameras.data(), images.data(), features.data())) {}
  DeviceArray<PinholeCamera<float>> cameras;
  DeviceArray<float> images, features, pixels, origins, directions, depths, weights, fine_depths,
      grad_rgb_features, sample_mask, sigma, rgb, target, predicted, ray_mask, loss_and_denominator;
  SourceViews<float> views;
};

}  // namespace

std::vector<OpCase> cuda_render_op_cases(const RenderOpsSize& size) {
  validate_render_ops_size(size);
  if (cuda_device_count() == 0) throw RuntimeFailure("no CUDA device");
  const auto p = std::make_shared<const Problem>(size);
  const auto d = std::make_shared<const DeviceProblem>(*p);
  const Costs cost(*p);
  const int R = size.rays, S = size.samples, F = p->fine();
  using Floats = DeviceArray<float>;
  const auto out = [](size_t n) { return std::make_shared<Floats>(n); };
  // Wall time of launch and synchronisation: at these sizes a launch is a few microseconds
  // against kernels of tens to hundreds.
  const auto synchronised = [](std::function<void()> launch) {
    return [launch] {
      launch();
      device_synchronize();
    };
  };
  std::vector<OpCase> cases;
  {
    auto o = out(size_t(R) * 3), dir = out(size_t(R) * 3);
    cases.push_back({"generate_rays", cost.rays, synchronised([p, d, o, dir, R] {
                       cuda::generate_rays(p->target_camera(), d->pixels.data(), R, o->data(),
                                           dir->data(), nullptr);
                     })});
  }
  {
    auto depths = out(p->depths.size());
    cases.push_back(
        {"sample_coarse_depths", cost.coarse, synchronised([p, depths, R] {
           cuda::sample_coarse_depths(R, p->coarse_sampling(), {1, 2}, 0, depths->data(), nullptr);
         })});
  }
  {
    auto merged = out(p->fine_depths.size());
    cases.push_back({"sample_importance_depths", cost.importance, synchronised([p, d, merged, R] {
                       cuda::sample_importance_depths(R, p->importance_sampling(), d->depths.data(),
                                                      d->weights.data(), {1, 2}, 0, merged->data(),
                                                      nullptr);
                     })});
  }
  {
    auto rgb_features = out(p->grad_rgb_features.size()), ray_diff = out(p->gather_rows() * 4),
         mask = out(p->gather_rows());
    cases.push_back(
        {"gather_samples", cost.gather, synchronised([p, d, rgb_features, ray_diff, mask, R, S] {
           cuda::gather_samples(
               R, S, d->origins.data(), d->directions.data(), d->depths.data(), p->target_center(),
               d->views, GatherOutputs<float>{rgb_features->data(), ray_diff->data(), mask->data()},
               nullptr);
         })});
  }
  {
    auto grad_features = out(p->features.size());
    grad_features->zero();
    cases.push_back(
        {"gather_samples_backward", cost.gather_backward, synchronised([d, grad_features, R, S] {
           cuda::gather_samples_backward(R, S, d->origins.data(), d->directions.data(),
                                         d->depths.data(), d->views, d->grad_rgb_features.data(),
                                         nullptr, grad_features->data(), nullptr);
         })});
  }
  {
    auto mask = out(size_t(R));
    cases.push_back({"ray_mask", cost.ray_mask, synchronised([p, d, mask, R, S] {
                       cuda::ray_mask(R, S, p->size.views, d->sample_mask.data(), RayMaskRule{},
                                      mask->data(), nullptr);
                     })});
  }
  {
    auto rgb_map = out(size_t(R) * 3), depth = out(size_t(R)), acc = out(size_t(R)),
         weights = out(size_t(R) * F);
    cases.push_back(
        {"composite_rays", cost.composite, synchronised([d, rgb_map, depth, acc, weights, R, F] {
           cuda::composite_rays(R, F, d->sigma.data(), d->rgb.data(), d->fine_depths.data(),
                                d->directions.data(), {}, rgb_map->data(), depth->data(),
                                acc->data(), weights->data(), nullptr);
         })});
  }
  {
    auto grad_sigma = out(size_t(R) * F), grad_rgb = out(size_t(R) * F * 3);
    cases.push_back({"composite_rays_backward", cost.composite_backward,
                     synchronised([d, grad_sigma, grad_rgb, R, F] {
                       cuda::composite_rays_backward(
                           R, F, d->sigma.data(), d->rgb.data(), d->fine_depths.data(),
                           d->directions.data(), {}, d->target.data(), nullptr, nullptr, nullptr,
                           grad_sigma->data(), grad_rgb->data(), nullptr);
                     })});
  }
  {
    auto loss = out(2);
    cases.push_back({"masked_mse", cost.mse, synchronised([d, loss, R] {
                       cuda::masked_mse(R, d->predicted.data(), d->target.data(),
                                        d->ray_mask.data(), loss->data(), nullptr);
                     })});
  }
  {
    auto grad = out(size_t(R) * 3);
    cases.push_back({"masked_mse_backward", cost.mse_backward, synchronised([d, grad, R] {
                       cuda::masked_mse_backward(R, d->predicted.data(), d->target.data(),
                                                 d->ray_mask.data(), d->loss_and_denominator.data(),
                                                 1.0f, grad->data(), nullptr);
                     })});
  }
  return cases;
}

#else

std::vector<OpCase> cuda_render_op_cases(const RenderOpsSize&) {
  throw RuntimeFailure("this mvibr was built without CUDA (configure with MVIBR_CUDA=ON)");
}

#endif  // MVIBR_HAVE_CUDA

}  // namespace mvibr::bench
