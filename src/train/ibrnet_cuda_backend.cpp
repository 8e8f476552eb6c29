// The IBRNet step on a CUDA device (see ibrnet_backend.h): the CPU backend's calls replaced by
// their device counterparts, on one stream, buffers kept from step to step.
// - Parameters, gradients and Adam's moments live on the device; per step the host sends the
//   sources, the rays' pixels and colours, and reads the loss sums and the gradient norm.
// - Compiled only in a build with the CUDA backend; cuda_unavailable.cpp stands in without.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_precision.h"
#include "device_parameters.h"
#include "ibrnet_backend.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_aggregator.h"
#include "mvibr/nn/cuda_feature_net.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/render/loss.h"
#include "phase_laps.h"

namespace mvibr::train {

namespace {

// What one pass (coarse or fine) computes for a batch of rays, in device memory.
struct DevicePass {
  int n_samples = 0;
  DeviceArray<float> depths, rgb_features, ray_diff, mask, rgb, sigma;
  DeviceArray<float> rgb_map, depth_map, acc_map, weights, ray_mask, loss;
  DeviceArray<float> grad_rgb_map, grad_sigma, grad_rgb, grad_rgb_features;
};

class CudaBackend final : public IbrnetBackend {
 public:
  CudaBackend(const TrainConfig& config, const IbrnetNetworks& networks)
      : config_(config),
        feature_net_(networks.feature_net),
        net_coarse_(networks.net_coarse),
        coarse_offset_(networks.net_coarse.parameter_offset()) {
    if (networks.net_fine) {
      net_fine_ = std::make_unique<nn::cuda::IbrnetAggregator>(*networks.net_fine);
      fine_offset_ = networks.net_fine->parameter_offset();
    }
    context_.set_gemm_precision(gemm_precision(config.precision));
    if (config.optimizer == nn::OptimizerKind::kLamb) {
      throw InvalidArgument(
          "config key 'optimizer': lamb runs on the CPU step only (device = cpu): IBRNet's GPU "
          "step has no per-tensor norms");
    }
  }

  // GradScaler scales the mean loss; the backward here starts from the summed squared error, up to
  // 3 N_rand times larger, so the scale is divided by a power of two at least that (exact, and
  // fp16 GEMM inputs stay as far from 65504 as PyTorch's do). fp32 and bf16 take it as it is.
  void set_loss_scale(double scale) override {
    double mean_divisor = 1;
    if (config_.precision == Precision::kFp16) {
      while (mean_divisor < 3.0 * config_.N_rand) mean_divisor *= 2;
    }
    gradient_scale_ = scale / mean_divisor;
  }

  void load_state(const nn::ParameterSet& parameters, const nn::Adam& adam) override {
    parameters_.load_state(parameters, adam);
  }
  void store_state(nn::ParameterSet* parameters, nn::Adam* adam) override {
    parameters_.store_state(parameters, adam);
  }

  void prepare_sources(const HostSources& sources, bool training) override {
    if (training) parameters_.zero_gradients();
    sources_ = sources;
    const size_t pixels = size_t(sources.n_views) * sources.height * sources.width * 3;
    copy_host_to_device(images_.reserve(pixels), sources.images, pixels * sizeof(float));
    copy_host_to_device(cameras_.reserve(size_t(sources.n_views)), sources.cameras,
                        size_t(sources.n_views) * sizeof(PinholeCamera<float>));
    std::tie(feature_height_, feature_width_) =
        nn::ResUNet::output_size(sources.height, sources.width);
    const size_t cells = size_t(sources.n_views) * feature_height_ * feature_width_;
    float* coarse_maps = coarse_maps_.reserve(cells * size_t(config_.coarse_feat_dim));
    float* fine_maps =
        config_.coarse_only ? nullptr : fine_maps_.reserve(cells * size_t(config_.fine_feat_dim));
    feature_net_.forward(context_, sources.n_views, sources.height, sources.width, images_.data(),
                         parameters_.values(), coarse_maps, fine_maps);
    if (training) {
      grad_coarse_maps_.reserve(cells * size_t(config_.coarse_feat_dim));
      device_memset_zero(grad_coarse_maps_.data(),
                         cells * size_t(config_.coarse_feat_dim) * sizeof(float));
      if (!config_.coarse_only) {
        grad_fine_maps_.reserve(cells * size_t(config_.fine_feat_dim));
        device_memset_zero(grad_fine_maps_.data(),
                           cells * size_t(config_.fine_feat_dim) * sizeof(float));
      }
    }
    device_synchronize();  // the feature network's time is charged to features_forward
  }

  RaySums accumulate(const data::View& target, const float* pixels, const float* target_rgb,
                     int n_rays, RandomKey key, uint32_t first_ray, PhaseTimes* times) override {
    PhaseLaps laps;
    copy_host_to_device(target_rgb_.reserve(size_t(n_rays) * 3), target_rgb,
                        size_t(n_rays) * 3 * sizeof(float));
    make_rays(target, pixels, n_rays);
    sample_coarse(target, n_rays, key, first_ray);
    lap(laps, &times->sampling);
    RaySums sums;
    run_pass(false, n_rays, target, true, &coarse_, laps, times);
    take_sums(&coarse_, &sums.squared_error_coarse, &sums.valid_coarse);
    if (has_fine()) {
      sample_fine(n_rays, key, first_ray);
      lap(laps, &times->sampling);
      run_pass(true, n_rays, target, true, &fine_, laps, times);
      take_sums(&fine_, &sums.squared_error_fine, &sums.valid_fine);
    }
    lap(laps, &times->composite_loss);
    backward_pass(false, n_rays, &coarse_, laps, times);
    if (has_fine()) backward_pass(true, n_rays, &fine_, laps, times);
    return sums;
  }

  void end_step(double coarse_denominator, double fine_denominator,
                const std::vector<ParameterRange>& order,
                const std::function<void(ParameterRange)>& ready, PhaseTimes* times) override {
    PhaseLaps laps;
    // The gradients of the summed loss times gradient_scale_, back to those of the loss.
    const auto divide = [&](float* values, size_t count, double denominator) {
      nn::cuda::scale(count, float(1.0 / (denominator * gradient_scale_)), values,
                      context_.stream());
    };
    // The aggregation networks' ranges come first in `order`, the feature network's last. This
    // stream only: the NCCL stream's all-reduces of earlier ranges go on meanwhile.
    const auto publish = [&](const ParameterRange& range) {
      if (!ready) return;
      context_.synchronize();
      ready(range);
    };
    divide(parameters_.grads() + coarse_offset_, order[0].count, coarse_denominator);
    publish(order[0]);
    if (net_fine_) {
      divide(parameters_.grads() + fine_offset_, order[1].count, fine_denominator);
      publish(order[1]);
    }
    const size_t cells = size_t(sources_.n_views) * feature_height_ * feature_width_;
    divide(grad_coarse_maps_.data(), cells * size_t(config_.coarse_feat_dim), coarse_denominator);
    if (!config_.coarse_only) {
      divide(grad_fine_maps_.data(), cells * size_t(config_.fine_feat_dim), fine_denominator);
    }
    feature_net_.backward(context_, parameters_.values(), parameters_.grads(),
                          grad_coarse_maps_.data(),
                          config_.coarse_only ? nullptr : grad_fine_maps_.data());
    publish(order.back());
    lap(laps, &times->features_backward);
  }

  float* gradients() override { return parameters_.grads(); }

  // Waits for the gradients' all-reduce (another stream) through the device.
  double gradient_norm() override { return parameters_.gradient_norm(context_); }

  void update(nn::Adam& adam, double gradient_norm) override {
    parameters_.update(context_, adam, gradient_norm);
  }

  void render(const data::View& target, const float* pixels, int n_rays, RandomKey key,
              uint32_t first_ray, float* rgb, float* depth) override {
    PhaseLaps laps;
    PhaseTimes unused;
    make_rays(target, pixels, n_rays);
    sample_coarse(target, n_rays, key, first_ray);
    run_pass(false, n_rays, target, false, &coarse_, laps, &unused);
    DevicePass* last = &coarse_;
    if (has_fine()) {
      sample_fine(n_rays, key, first_ray);
      run_pass(true, n_rays, target, false, &fine_, laps, &unused);
      last = &fine_;
    }
    copy_device_to_host(rgb, last->rgb_map.data(), size_t(n_rays) * 3 * sizeof(float));
    copy_device_to_host(depth, last->depth_map.data(), size_t(n_rays) * sizeof(float));
  }

 private:
  bool has_fine() const { return net_fine_ != nullptr && config_.N_importance > 0; }

  // Waits for the device so that the lap charges its work to the phase that queued it.
  void lap(PhaseLaps& laps, double* phase) {
    device_synchronize();
    laps.to(phase);
  }

  SourceViews<float> views(bool use_fine) {
    SourceViews<float> v;
    v.n_views = sources_.n_views;
    v.cameras = cameras_.data();
    v.image_height = sources_.height;
    v.image_width = sources_.width;
    v.images = images_.data();
    v.feature_height = feature_height_;
    v.feature_width = feature_width_;
    v.feature_channels = use_fine ? config_.fine_feat_dim : config_.coarse_feat_dim;
    v.features = use_fine ? fine_maps_.data() : coarse_maps_.data();
    return v;
  }

  void make_rays(const data::View& target, const float* pixels, int n_rays) {
    copy_host_to_device(pixels_.reserve(size_t(n_rays) * 2), pixels,
                        size_t(n_rays) * 2 * sizeof(float));
    cuda::generate_rays(camera_cast<float>(target.camera), pixels_.data(), n_rays,
                        origins_.reserve(size_t(n_rays) * 3),
                        directions_.reserve(size_t(n_rays) * 3), context_.stream());
  }

  void sample_coarse(const data::View& target, int n_rays, RandomKey key, uint32_t first_ray) {
    coarse_.n_samples = config_.N_samples;
    cuda::sample_coarse_depths(n_rays,
                               DepthSampling{target.near_depth, target.far_depth, config_.N_samples,
                                             config_.inv_uniform, config_.det},
                               key, first_ray,
                               coarse_.depths.reserve(size_t(n_rays) * config_.N_samples),
                               context_.stream());
  }

  // Importance samples from the coarse weights (a stop-gradient, as IBRNet detaches them).
  void sample_fine(int n_rays, RandomKey key, uint32_t first_ray) {
    fine_.n_samples = config_.N_samples + config_.N_importance;
    cuda::sample_importance_depths(n_rays,
                                   ImportanceSampling{config_.N_samples, config_.N_importance,
                                                      config_.inv_uniform, config_.det},
                                   coarse_.depths.data(), coarse_.weights.data(), key, first_ray,
                                   fine_.depths.reserve(size_t(n_rays) * fine_.n_samples),
                                   context_.stream());
  }

  // Gather → aggregation network → compositing; with `with_loss`, the ray mask and the loss.
  void run_pass(bool use_fine, int n_rays, const data::View& target, bool with_loss, DevicePass* p,
                PhaseLaps& laps, PhaseTimes* times) {
    const SourceViews<float> v = views(use_fine);
    const size_t rows = size_t(n_rays) * p->n_samples;
    const size_t view_rows = rows * size_t(v.n_views);
    const GatherOutputs<float> gathered{
        p->rgb_features.reserve(view_rows * size_t(3 + v.feature_channels)),
        p->ray_diff.reserve(view_rows * 4), p->mask.reserve(view_rows)};
    const Vec3<float> center = camera_cast<float>(target.camera).center();
    cuda::gather_samples(n_rays, p->n_samples, origins_.data(), directions_.data(),
                         p->depths.data(), center, v, gathered, context_.stream());
    lap(laps, &times->gather_forward);
    nn::cuda::IbrnetAggregator& net = use_fine ? *net_fine_ : net_coarse_;
    const float* params = parameters_.values() + (use_fine ? fine_offset_ : coarse_offset_);
    float* rgb = p->rgb.reserve(rows * 3);
    float* sigma = p->sigma.reserve(rows);
    // Training keeps the activations for the backward; rendering needs none (chunks of them).
    const nn::AggregatorInputs<float> inputs{p->rgb_features.data(), p->ray_diff.data(),
                                             p->mask.data()};
    if (with_loss) {
      net.forward(context_, n_rays, p->n_samples, v.n_views, params, inputs, rgb, sigma);
    } else {
      net.infer(context_, n_rays, p->n_samples, v.n_views, params, inputs, rgb, sigma);
    }
    lap(laps, &times->aggregator_forward);
    cuda::composite_rays(n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(),
                         directions_.data(), composite_options(config_),
                         p->rgb_map.reserve(size_t(n_rays) * 3),
                         p->depth_map.reserve(size_t(n_rays)), p->acc_map.reserve(size_t(n_rays)),
                         p->weights.reserve(rows), context_.stream());
    if (with_loss) {
      cuda::ray_mask(n_rays, p->n_samples, v.n_views, p->mask.data(), RayMaskRule{},
                     p->ray_mask.reserve(size_t(n_rays)), context_.stream());
      cuda::masked_mse(n_rays, p->rgb_map.data(), target_rgb_.data(), p->ray_mask.data(),
                       p->loss.reserve(2), context_.stream());
    }
    lap(laps, &times->composite_loss);
  }

  // The pass's squared error and valid rays; then the loss's denominator becomes 1, so that the
  // backward gives the gradient of the sum (end_step divides by the global batch's).
  void take_sums(DevicePass* p, double* squared_error, double* valid) {
    float loss[2];
    copy_device_to_host(loss, p->loss.data(), sizeof loss);
    *squared_error = double(loss[0]) * double(loss[1]);
    // The denominator is float(3 valid + 1e-6): exact in float for fewer than 2^21 rays.
    *valid = double(std::lround(double(loss[1]) / 3.0));
    const float one = 1.0f;
    copy_host_to_device(p->loss.data() + 1, &one, sizeof one);
  }

  // d loss / d parameters of one pass, into the device gradients and the pass's feature maps.
  void backward_pass(bool use_fine, int n_rays, DevicePass* p, PhaseLaps& laps, PhaseTimes* times) {
    const SourceViews<float> v = views(use_fine);
    const size_t rows = size_t(n_rays) * p->n_samples;
    cuda::masked_mse_backward(n_rays, p->rgb_map.data(), target_rgb_.data(), p->ray_mask.data(),
                              p->loss.data(), float(gradient_scale_),
                              p->grad_rgb_map.reserve(size_t(n_rays) * 3), context_.stream());
    cuda::composite_rays_backward(
        n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(), directions_.data(),
        composite_options(config_), p->grad_rgb_map.data(), nullptr, nullptr, nullptr,
        p->grad_sigma.reserve(rows), p->grad_rgb.reserve(rows * 3), context_.stream());
    lap(laps, &times->composite_backward);
    nn::cuda::IbrnetAggregator& net = use_fine ? *net_fine_ : net_coarse_;
    const size_t offset = use_fine ? fine_offset_ : coarse_offset_;
    net.backward(context_, parameters_.values() + offset, parameters_.grads() + offset,
                 p->grad_rgb.data(), p->grad_sigma.data(),
                 p->grad_rgb_features.reserve(p->rgb_features.size()));
    lap(laps, &times->aggregator_backward);
    cuda::gather_samples_backward(n_rays, p->n_samples, origins_.data(), directions_.data(),
                                  p->depths.data(), v, p->grad_rgb_features.data(), nullptr,
                                  use_fine ? grad_fine_maps_.data() : grad_coarse_maps_.data(),
                                  context_.stream());
    lap(laps, &times->gather_backward);
  }

  TrainConfig config_;
  nn::cuda::Context context_;
  nn::cuda::ResUNet feature_net_;
  nn::cuda::IbrnetAggregator net_coarse_;
  std::unique_ptr<nn::cuda::IbrnetAggregator> net_fine_;
  size_t coarse_offset_ = 0, fine_offset_ = 0;
  double gradient_scale_ = 1;  // what the backward's first gradient is multiplied by

  DeviceParameters parameters_;  // values, gradients and Adam's moments
  HostSources sources_;          // sizes only after prepare_sources: the host arrays may be gone
  int feature_height_ = 0, feature_width_ = 0;
  DeviceArray<float> images_;
  DeviceArray<PinholeCamera<float>> cameras_;
  DeviceArray<float> coarse_maps_, fine_maps_, grad_coarse_maps_, grad_fine_maps_;
  DeviceArray<float> pixels_, target_rgb_, origins_, directions_;
  DevicePass coarse_, fine_;
};

}  // namespace

std::unique_ptr<IbrnetBackend> make_cuda_backend(const TrainConfig& config,
                                                 const IbrnetNetworks& networks) {
  if (cuda_device_count() == 0) {
    throw RuntimeFailure("device = cuda, but no CUDA device is visible to this process");
  }
  return std::make_unique<CudaBackend>(config, networks);
}

bool use_cuda_step(Device device) {
  if (device == Device::kCpu) return false;
  const bool available = cuda_device_count() > 0;
  if (device == Device::kCuda && !available) {
    throw InvalidArgument("config key 'device': cuda, but no CUDA device is visible");
  }
  return available;
}

}  // namespace mvibr::train
