// The IBRNet step on the CPU (see ibrnet_backend.h). One Pass holds everything a coarse or fine
// pass computes, so the backward walks the same buffers in reverse; buffers are members, reused
// from step to step. The training state is the model's host ParameterSet and nn::Adam.
#include <algorithm>
#include <tuple>

#include "ibrnet_backend.h"
#include "mvibr/core/error.h"
#include "mvibr/render/loss.h"
#include "phase_laps.h"

namespace mvibr::train {

namespace {

// Everything one pass (coarse or fine) computes for a batch of rays.
struct Pass {
  int n_samples = 0;
  std::vector<float> depths, rgb_features, ray_diff, mask, rgb, sigma;
  std::vector<float> rgb_map, depth_map, acc_map, weights, ray_mask, loss{0, 0};
  nn::AggregatorWorkspace<float> aggregator;
  // Backward scratch.
  std::vector<float> grad_rgb_map, grad_sigma, grad_rgb, grad_rgb_features;
};

class CpuBackend final : public IbrnetBackend {
 public:
  CpuBackend(const TrainConfig& config, nn::ParameterSet& parameters,
             const IbrnetNetworks& networks)
      : config_(config), parameters_(parameters), networks_(networks) {
    if (config.precision != Precision::kFp32) {
      throw InvalidArgument(std::string("config key 'precision': ") + name_of(config.precision) +
                            " needs the GPU step, and this run has no CUDA device (the CPU "
                            "step is fp32)");
    }
  }

  // The state is the host's own.
  void load_state(const nn::ParameterSet&, const nn::Adam&) override {}
  void store_state(nn::ParameterSet*, nn::Adam*) override {}

  void prepare_sources(const HostSources& sources, bool training) override {
    sources_ = sources;
    std::tie(feature_height_, feature_width_) =
        nn::ResUNet::output_size(sources.height, sources.width);
    const size_t cells = size_t(sources.n_views) * feature_height_ * feature_width_;
    coarse_maps_.resize(cells * size_t(config_.coarse_feat_dim));
    fine_maps_.resize(config_.coarse_only ? 0 : cells * size_t(config_.fine_feat_dim));
    networks_.feature_net.forward(sources.n_views, sources.height, sources.width, sources.images,
                                  &feature_workspace_, coarse_maps_.data(),
                                  config_.coarse_only ? nullptr : fine_maps_.data());
    if (!training) return;
    parameters_.zero_grads();
    // The maps the gather backward of every accumulate adds into.
    grad_coarse_maps_.assign(coarse_maps_.size(), 0.0f);
    grad_fine_maps_.assign(fine_maps_.size(), 0.0f);
  }

  RaySums accumulate(const data::View& target, const float* pixels, const float* target_rgb,
                     int n_rays, RandomKey key, uint32_t first_ray, PhaseTimes* times) override {
    times_ = times;
    laps_.start();
    make_rays(target, pixels, n_rays);
    sample_depths(n_rays, target, key, first_ray);
    laps_.to(&times->sampling);
    run_pass(false, n_rays, target, target_rgb, true, &coarse_);
    if (has_fine()) {
      fine_depths(n_rays, key, first_ray);
      laps_.to(&times->sampling);
      run_pass(true, n_rays, target, target_rgb, true, &fine_);
    }
    RaySums sums;
    const auto take = [](Pass* p, double* squared_error, double* valid) {
      *squared_error = double(p->loss[0]) * double(p->loss[1]);
      *valid = double(std::count(p->ray_mask.begin(), p->ray_mask.end(), 1.0f));
      p->loss[1] = 1.0f;  // the backward of the sum; end_step divides
    };
    take(&coarse_, &sums.squared_error_coarse, &sums.valid_coarse);
    if (has_fine()) take(&fine_, &sums.squared_error_fine, &sums.valid_fine);
    laps_.to(&times->composite_loss);
    backward_pass(false, n_rays, target_rgb, &coarse_);
    if (has_fine()) backward_pass(true, n_rays, target_rgb, &fine_);
    return sums;
  }

  void end_step(double coarse_denominator, double fine_denominator,
                const std::vector<ParameterRange>& order,
                const std::function<void(ParameterRange)>& ready, PhaseTimes* times) override {
    laps_.start();
    const auto divide = [](float* values, size_t count, double denominator) {
      const float scale = float(1.0 / denominator);
      for (size_t i = 0; i < count; ++i) values[i] *= scale;
    };
    float* grads = parameters_.grads().data();
    divide(grads + order[0].offset, order[0].count, coarse_denominator);
    if (ready) ready(order[0]);
    if (networks_.net_fine) {
      divide(grads + order[1].offset, order[1].count, fine_denominator);
      if (ready) ready(order[1]);
    }
    divide(grad_coarse_maps_.data(), grad_coarse_maps_.size(), coarse_denominator);
    divide(grad_fine_maps_.data(), grad_fine_maps_.size(), fine_denominator);
    networks_.feature_net.backward(&feature_workspace_, grad_coarse_maps_.data(),
                                   config_.coarse_only ? nullptr : grad_fine_maps_.data());
    laps_.to(&times->features_backward);
    if (ready) ready(order.back());
  }

  float* gradients() override { return parameters_.grads().data(); }

  double gradient_norm() override {
    return nn::global_grad_norm(parameters_.grads().data(), parameters_.size());
  }

  void update(nn::Adam& adam, double gradient_norm) override {
    adam.step(&parameters_, gradient_norm);
  }

  void set_loss_scale(double scale) override {
    if (scale != 1.0) {
      throw InvalidArgument("IbrnetModel: the CPU step has no loss scale (fp32 only)");
    }
  }

  void render(const data::View& target, const float* pixels, int n_rays, RandomKey key,
              uint32_t first_ray, float* rgb, float* depth) override {
    PhaseTimes unused;
    times_ = &unused;
    make_rays(target, pixels, n_rays);
    sample_depths(n_rays, target, key, first_ray);
    run_pass(false, n_rays, target, nullptr, false, &coarse_);
    Pass* last = &coarse_;
    if (has_fine()) {
      fine_depths(n_rays, key, first_ray);
      run_pass(true, n_rays, target, nullptr, false, &fine_);
      last = &fine_;
    }
    std::copy(last->rgb_map.begin(), last->rgb_map.end(), rgb);
    std::copy(last->depth_map.begin(), last->depth_map.end(), depth);
  }

 private:
  bool has_fine() const { return networks_.net_fine != nullptr && config_.N_importance > 0; }

  SourceViews<float> views(bool use_fine) const {
    SourceViews<float> v;
    v.n_views = sources_.n_views;
    v.cameras = sources_.cameras;
    v.image_height = sources_.height;
    v.image_width = sources_.width;
    v.images = sources_.images;
    v.feature_height = feature_height_;
    v.feature_width = feature_width_;
    v.feature_channels = use_fine ? config_.fine_feat_dim : config_.coarse_feat_dim;
    v.features = use_fine ? fine_maps_.data() : coarse_maps_.data();
    return v;
  }

  // Gather → aggregation network → compositing for the pass's depths; with targets, the loss.
  void run_pass(bool use_fine, int n_rays, const data::View& target, const float* target_rgb,
                bool keep_for_backward, Pass* p) {
    const SourceViews<float> v = views(use_fine);
    const size_t rows = size_t(n_rays) * p->n_samples;
    p->rgb_features.resize(rows * v.n_views * (3 + v.feature_channels));
    p->ray_diff.resize(rows * v.n_views * 4);
    p->mask.resize(rows * v.n_views);
    const Vec3<float> center = camera_cast<float>(target.camera).center();
    cpu::gather_samples(
        n_rays, p->n_samples, origins_.data(), directions_.data(), p->depths.data(), center, v,
        GatherOutputs<float>{p->rgb_features.data(), p->ray_diff.data(), p->mask.data()});
    laps_.to(&times_->gather_forward);
    p->rgb.resize(rows * 3);
    p->sigma.resize(rows);
    const nn::IbrnetAggregator& net = use_fine ? *networks_.net_fine : networks_.net_coarse;
    net.forward(n_rays, p->n_samples, v.n_views,
                {p->rgb_features.data(), p->ray_diff.data(), p->mask.data()},
                keep_for_backward ? &p->aggregator : nullptr, p->rgb.data(), p->sigma.data());
    laps_.to(&times_->aggregator_forward);
    p->rgb_map.resize(size_t(n_rays) * 3);
    p->depth_map.resize(n_rays);
    p->acc_map.resize(n_rays);
    p->weights.resize(rows);
    cpu::composite_rays(n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(),
                        directions_.data(), composite_options(config_), p->rgb_map.data(),
                        p->depth_map.data(), p->acc_map.data(), p->weights.data());
    if (target_rgb) {
      p->ray_mask.resize(n_rays);
      cpu::ray_mask(n_rays, p->n_samples, v.n_views, p->mask.data(), RayMaskRule{},
                    p->ray_mask.data());
      cpu::masked_mse(n_rays, p->rgb_map.data(), target_rgb, p->ray_mask.data(), p->loss.data());
    }
    laps_.to(&times_->composite_loss);
  }

  // d loss / d parameters of one pass, into the parameter grads and the pass's feature maps.
  void backward_pass(bool use_fine, int n_rays, const float* target_rgb, Pass* p) {
    const SourceViews<float> v = views(use_fine);
    const size_t rows = size_t(n_rays) * p->n_samples;
    p->grad_rgb_map.resize(size_t(n_rays) * 3);
    cpu::masked_mse_backward(n_rays, p->rgb_map.data(), target_rgb, p->ray_mask.data(),
                             p->loss.data(), 1.0f, p->grad_rgb_map.data());
    p->grad_sigma.resize(rows);
    p->grad_rgb.resize(rows * 3);
    cpu::composite_rays_backward(
        n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(), directions_.data(),
        composite_options(config_), p->grad_rgb_map.data(), static_cast<const float*>(nullptr),
        static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
        p->grad_sigma.data(), p->grad_rgb.data());
    laps_.to(&times_->composite_backward);
    p->grad_rgb_features.resize(p->rgb_features.size());
    nn::IbrnetAggregator& net = use_fine ? *networks_.net_fine : networks_.net_coarse;
    net.backward(p->aggregator, p->grad_rgb.data(), p->grad_sigma.data(),
                 p->grad_rgb_features.data());
    laps_.to(&times_->aggregator_backward);
    std::vector<float>& grad_maps = use_fine ? grad_fine_maps_ : grad_coarse_maps_;
    cpu::gather_samples_backward(n_rays, p->n_samples, origins_.data(), directions_.data(),
                                 p->depths.data(), v, p->grad_rgb_features.data(),
                                 static_cast<float*>(nullptr), grad_maps.data());
    laps_.to(&times_->gather_backward);
  }

  void sample_depths(int n_rays, const data::View& target, RandomKey key, uint32_t first_ray) {
    coarse_.n_samples = config_.N_samples;
    coarse_.depths.resize(size_t(n_rays) * config_.N_samples);
    cpu::sample_coarse_depths(n_rays,
                              DepthSampling{target.near_depth, target.far_depth, config_.N_samples,
                                            config_.inv_uniform, config_.det},
                              key, first_ray, coarse_.depths.data());
  }

  // Importance samples from the coarse weights (a stop-gradient, as IBRNet detaches them).
  void fine_depths(int n_rays, RandomKey key, uint32_t first_ray) {
    fine_.n_samples = config_.N_samples + config_.N_importance;
    fine_.depths.resize(size_t(n_rays) * fine_.n_samples);
    cpu::sample_importance_depths(n_rays,
                                  ImportanceSampling{config_.N_samples, config_.N_importance,
                                                     config_.inv_uniform, config_.det},
                                  coarse_.depths.data(), coarse_.weights.data(), key, first_ray,
                                  fine_.depths.data());
  }

  void make_rays(const data::View& target, const float* pixels, int n_rays) {
    origins_.resize(size_t(n_rays) * 3);
    directions_.resize(size_t(n_rays) * 3);
    cpu::generate_rays(camera_cast<float>(target.camera), pixels, n_rays, origins_.data(),
                       directions_.data());
  }

  TrainConfig config_;
  nn::ParameterSet& parameters_;
  IbrnetNetworks networks_;
  nn::ResUNet::Workspace feature_workspace_;
  HostSources sources_;
  int feature_height_ = 0, feature_width_ = 0;
  std::vector<float> coarse_maps_, fine_maps_, grad_coarse_maps_, grad_fine_maps_;
  Pass coarse_, fine_;
  std::vector<float> origins_, directions_;
  PhaseLaps laps_;
  PhaseTimes* times_ = nullptr;  // the running call's
};

}  // namespace

std::unique_ptr<IbrnetBackend> make_cpu_backend(const TrainConfig& config,
                                                nn::ParameterSet& parameters,
                                                const IbrnetNetworks& networks) {
  return std::make_unique<CpuBackend>(config, parameters, networks);
}

}  // namespace mvibr::train
