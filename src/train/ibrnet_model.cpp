// The IBRNet training step on the CPU backend (see ibrnet_model.h). One Pass holds everything a
// coarse or fine pass computes, so the backward walks the same buffers in reverse; buffers are
// members and reused from step to step.
#include "mvibr/train/ibrnet_model.h"

#include <algorithm>
#include <tuple>

#include "device_step.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/ops/render_ops.h"
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

// The source views of one sample as the rendering core reads them.
struct Sources {
  int n_views = 0, height = 0, width = 0, feature_height = 0, feature_width = 0;
  std::vector<PinholeCamera<float>> cameras;
  std::vector<float> images;                  // [V,H,W,3] in [0,1]
  std::vector<float> coarse_maps, fine_maps;  // [V,Hf,Wf,C]
  std::vector<float> grad_coarse_maps, grad_fine_maps;
};

}  // namespace

double PhaseTimes::total() const {
  double sum = 0;
  for (const auto& [name, seconds] : named()) sum += seconds;
  return sum;
}

std::vector<std::pair<const char*, double>> PhaseTimes::named() const {
  return {{"features_forward", features_forward},       {"sampling", sampling},
          {"gather_forward", gather_forward},           {"aggregator_forward", aggregator_forward},
          {"composite_loss", composite_loss},           {"composite_backward", composite_backward},
          {"aggregator_backward", aggregator_backward}, {"gather_backward", gather_backward},
          {"features_backward", features_backward}};
}

bool runs_on_device(const TrainConfig& config) {
  return use_cuda_step(config.device);
}

nn::ResUNetOptions feature_net_options(const TrainConfig& config) {
  nn::ResUNetOptions o = nn::ResUNetOptions::preset(config.feature_net);
  o.coarse_out_ch = config.coarse_feat_dim;
  o.fine_out_ch = config.fine_feat_dim;
  o.coarse_only = config.coarse_only;
  return o;
}

struct IbrnetModel::State {
  TrainConfig config;
  nn::ParameterSet parameters;
  nn::ResUNet feature_net;
  nn::IbrnetAggregator net_coarse;
  std::unique_ptr<nn::IbrnetAggregator> net_fine;
  nn::ResUNet::Workspace feature_workspace;
  Sources sources;
  Pass coarse, fine;
  std::vector<float> origins, directions;
  std::unique_ptr<DeviceStep> device;       // the step on a CUDA device, when the config picks one
  PhaseTimes times;                         // of the running training step
  const data::View* step_target = nullptr;  // between begin_step and end_step
  PhaseLaps laps;
  static nn::AggregatorOptions aggregator_options(const TrainConfig& c, int channels) {
    nn::AggregatorOptions o;
    o.feature_channels = channels;
    o.n_samples_max = c.N_samples + (c.coarse_only ? 0 : c.N_importance);
    o.anti_alias_pooling = c.anti_alias_pooling;
    return o;
  }

  explicit State(const TrainConfig& c)
      : config(c),
        feature_net(feature_net_options(c), &parameters, "feature_net."),
        net_coarse(parameters, "net_coarse.", aggregator_options(c, c.coarse_feat_dim)) {
    if (!c.coarse_only) {
      net_fine = std::make_unique<nn::IbrnetAggregator>(parameters, "net_fine.",
                                                        aggregator_options(c, c.fine_feat_dim));
    }
    if (runs_on_device(c)) {
      device = make_cuda_step(c, feature_net, net_coarse, net_fine.get());
    } else if (c.precision != Precision::kFp32) {
      throw InvalidArgument(std::string("config key 'precision': ") + name_of(c.precision) +
                            " needs the GPU step, and this run has no CUDA device (the CPU "
                            "step is fp32)");
    }
  }

  // Source images to floats, cameras to float, and the feature network's maps (on the device
  // when there is one; `training` also clears the gradients there).
  void prepare_sources(const data::TrainingSample& sample, bool training) {
    Sources& s = sources;
    s.n_views = int(sample.sources.size());
    if (s.n_views < 1)
      throw InvalidArgument("sample of view " + sample.target.name + " has no sources");
    s.height = sample.target.camera.height;
    s.width = sample.target.camera.width;
    const size_t pixels = size_t(s.height) * s.width * 3;
    s.images.resize(size_t(s.n_views) * pixels);
    s.cameras.clear();
    for (int v = 0; v < s.n_views; ++v) {
      const data::View& view = sample.sources[size_t(v)];
      s.cameras.push_back(camera_cast<float>(view.camera));
      for (size_t i = 0; i < pixels; ++i) s.images[v * pixels + i] = float(view.rgb[i]) / 255.0f;
    }
    if (device) {
      device->prepare_sources(
          parameters, HostSources{s.n_views, s.height, s.width, s.cameras.data(), s.images.data()},
          training);
      return;
    }
    std::tie(s.feature_height, s.feature_width) = nn::ResUNet::output_size(s.height, s.width);
    const size_t cells = size_t(s.n_views) * s.feature_height * s.feature_width;
    s.coarse_maps.resize(cells * size_t(config.coarse_feat_dim));
    s.fine_maps.resize(config.coarse_only ? 0 : cells * size_t(config.fine_feat_dim));
    feature_net.forward(s.n_views, s.height, s.width, s.images.data(), &feature_workspace,
                        s.coarse_maps.data(), config.coarse_only ? nullptr : s.fine_maps.data());
  }

  SourceViews<float> views(bool use_fine) const {
    SourceViews<float> v;
    v.n_views = sources.n_views;
    v.cameras = sources.cameras.data();
    v.image_height = sources.height;
    v.image_width = sources.width;
    v.images = sources.images.data();
    v.feature_height = sources.feature_height;
    v.feature_width = sources.feature_width;
    v.feature_channels = use_fine ? config.fine_feat_dim : config.coarse_feat_dim;
    v.features = use_fine ? sources.fine_maps.data() : sources.coarse_maps.data();
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
        n_rays, p->n_samples, origins.data(), directions.data(), p->depths.data(), center, v,
        GatherOutputs<float>{p->rgb_features.data(), p->ray_diff.data(), p->mask.data()});
    laps.to(&times.gather_forward);
    p->rgb.resize(rows * 3);
    p->sigma.resize(rows);
    const nn::IbrnetAggregator& net = use_fine ? *net_fine : net_coarse;
    net.forward(n_rays, p->n_samples, v.n_views, p->rgb_features.data(), p->ray_diff.data(),
                p->mask.data(), keep_for_backward ? &p->aggregator : nullptr, p->rgb.data(),
                p->sigma.data());
    laps.to(&times.aggregator_forward);
    p->rgb_map.resize(size_t(n_rays) * 3);
    p->depth_map.resize(n_rays);
    p->acc_map.resize(n_rays);
    p->weights.resize(rows);
    cpu::composite_rays(n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(),
                        directions.data(), composite_options(config), p->rgb_map.data(),
                        p->depth_map.data(), p->acc_map.data(), p->weights.data());
    if (target_rgb) {
      p->ray_mask.resize(n_rays);
      cpu::ray_mask(n_rays, p->n_samples, v.n_views, p->mask.data(), RayMaskRule{},
                    p->ray_mask.data());
      cpu::masked_mse(n_rays, p->rgb_map.data(), target_rgb, p->ray_mask.data(), p->loss.data());
    }
    laps.to(&times.composite_loss);
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
        n_rays, p->n_samples, p->sigma.data(), p->rgb.data(), p->depths.data(), directions.data(),
        composite_options(config), p->grad_rgb_map.data(), static_cast<const float*>(nullptr),
        static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
        p->grad_sigma.data(), p->grad_rgb.data());
    laps.to(&times.composite_backward);
    p->grad_rgb_features.resize(p->rgb_features.size());
    nn::IbrnetAggregator& net = use_fine ? *net_fine : net_coarse;
    net.backward(p->aggregator, p->grad_rgb.data(), p->grad_sigma.data(),
                 p->grad_rgb_features.data());
    laps.to(&times.aggregator_backward);
    std::vector<float>& grad_maps = use_fine ? sources.grad_fine_maps : sources.grad_coarse_maps;
    cpu::gather_samples_backward(n_rays, p->n_samples, origins.data(), directions.data(),
                                 p->depths.data(), v, p->grad_rgb_features.data(),
                                 static_cast<float*>(nullptr), grad_maps.data());
    laps.to(&times.gather_backward);
  }

  void sample_depths(int n_rays, const data::View& target, RandomKey key, uint32_t first_ray) {
    coarse.n_samples = config.N_samples;
    coarse.depths.resize(size_t(n_rays) * config.N_samples);
    cpu::sample_coarse_depths(n_rays,
                              DepthSampling{target.near_depth, target.far_depth, config.N_samples,
                                            config.inv_uniform, config.det},
                              key, first_ray, coarse.depths.data());
  }

  // Importance samples from the coarse weights (a stop-gradient, as IBRNet detaches them).
  void fine_depths(int n_rays, RandomKey key, uint32_t first_ray) {
    fine.n_samples = config.N_samples + config.N_importance;
    fine.depths.resize(size_t(n_rays) * fine.n_samples);
    cpu::sample_importance_depths(
        n_rays,
        ImportanceSampling{config.N_samples, config.N_importance, config.inv_uniform, config.det},
        coarse.depths.data(), coarse.weights.data(), key, first_ray, fine.depths.data());
  }

  void make_rays(const data::View& target, const float* pixels, int n_rays) {
    origins.resize(size_t(n_rays) * 3);
    directions.resize(size_t(n_rays) * 3);
    cpu::generate_rays(camera_cast<float>(target.camera), pixels, n_rays, origins.data(),
                       directions.data());
  }

  bool has_fine() const { return net_fine != nullptr && config.N_importance > 0; }
};

IbrnetModel::IbrnetModel(const TrainConfig& config) : state_(std::make_unique<State>(config)) {}
IbrnetModel::~IbrnetModel() = default;

nn::ParameterSet& IbrnetModel::parameters() {
  return state_->parameters;
}
const nn::ParameterSet& IbrnetModel::parameters() const {
  return state_->parameters;
}

void IbrnetModel::initialize(uint64_t seed) {
  nn::Initializer init(seed);
  state_->feature_net.initialize(init);
  state_->net_coarse.initialize(init);
  if (state_->net_fine) state_->net_fine->initialize(init);
}

RaySums& RaySums::operator+=(const RaySums& o) {
  squared_error_coarse += o.squared_error_coarse;
  squared_error_fine += o.squared_error_fine;
  valid_coarse += o.valid_coarse;
  valid_fine += o.valid_fine;
  return *this;
}

void IbrnetModel::begin_step(const data::TrainingSample& sample) {
  State& s = *state_;
  s.times = PhaseTimes{};
  s.laps.start();
  s.prepare_sources(sample, true);
  s.step_target = &sample.target;
  // The maps the gather backward of every accumulate adds into.
  s.sources.grad_coarse_maps.assign(s.sources.coarse_maps.size(), 0.0f);
  s.sources.grad_fine_maps.assign(s.sources.fine_maps.size(), 0.0f);
  s.laps.to(&s.times.features_forward);
}

RaySums IbrnetModel::accumulate(const RayBatch& rays, RandomKey key, uint32_t first_ray) {
  State& s = *state_;
  if (!s.step_target) throw InvalidArgument("IbrnetModel::accumulate before begin_step");
  const data::View& target = *s.step_target;
  const int n_rays = int(rays.pixels.size() / 2);
  const float* target_rgb = rays.target_rgb.data();
  if (s.device) {
    return s.device->accumulate(target, rays.pixels.data(), target_rgb, n_rays, key, first_ray,
                                &s.times);
  }
  s.laps.start();
  s.make_rays(target, rays.pixels.data(), n_rays);
  s.sample_depths(n_rays, target, key, first_ray);
  s.laps.to(&s.times.sampling);
  s.run_pass(false, n_rays, target, target_rgb, true, &s.coarse);
  if (s.has_fine()) {
    s.fine_depths(n_rays, key, first_ray);
    s.laps.to(&s.times.sampling);
    s.run_pass(true, n_rays, target, target_rgb, true, &s.fine);
  }
  RaySums sums;
  const auto take = [](Pass* p, double* squared_error, double* valid) {
    *squared_error = double(p->loss[0]) * double(p->loss[1]);
    *valid = double(std::count(p->ray_mask.begin(), p->ray_mask.end(), 1.0f));
    p->loss[1] = 1.0f;  // the backward of the sum; end_step divides
  };
  take(&s.coarse, &sums.squared_error_coarse, &sums.valid_coarse);
  if (s.has_fine()) take(&s.fine, &sums.squared_error_fine, &sums.valid_fine);
  s.laps.to(&s.times.composite_loss);
  s.backward_pass(false, n_rays, target_rgb, &s.coarse);
  if (s.has_fine()) s.backward_pass(true, n_rays, target_rgb, &s.fine);
  return sums;
}

std::vector<ParameterRange> IbrnetModel::gradient_ready_order() const {
  const State& s = *state_;
  std::vector<ParameterRange> order = {
      {s.net_coarse.parameter_offset(), s.net_coarse.parameter_count()}};
  if (s.net_fine) order.push_back({s.net_fine->parameter_offset(), s.net_fine->parameter_count()});
  order.push_back({0, s.net_coarse.parameter_offset()});  // the feature network comes first
  return order;
}

void IbrnetModel::end_step(double coarse_denominator, double fine_denominator,
                           const std::function<void(ParameterRange)>& ready) {
  State& s = *state_;
  if (s.device) {
    s.device->end_step(coarse_denominator, fine_denominator, gradient_ready_order(), s.parameters,
                       ready, false, &s.times);
    s.step_target = nullptr;
    return;
  }
  s.laps.start();
  const auto divide = [](float* values, size_t count, double denominator) {
    const float scale = float(1.0 / denominator);
    for (size_t i = 0; i < count; ++i) values[i] *= scale;
  };
  const std::vector<ParameterRange> order = gradient_ready_order();
  float* grads = s.parameters.grads().data();
  divide(grads + order[0].offset, order[0].count, coarse_denominator);
  if (ready) ready(order[0]);
  if (s.net_fine) {
    divide(grads + order[1].offset, order[1].count, fine_denominator);
    if (ready) ready(order[1]);
  }
  divide(s.sources.grad_coarse_maps.data(), s.sources.grad_coarse_maps.size(), coarse_denominator);
  divide(s.sources.grad_fine_maps.data(), s.sources.grad_fine_maps.size(), fine_denominator);
  s.feature_net.backward(&s.feature_workspace, s.sources.grad_coarse_maps.data(),
                         s.config.coarse_only ? nullptr : s.sources.grad_fine_maps.data());
  s.laps.to(&s.times.features_backward);
  if (ready) ready(order.back());
  s.step_target = nullptr;
}

void IbrnetModel::end_step_on_device(double coarse_denominator, double fine_denominator,
                                     const std::function<void(ParameterRange)>& ready) {
  State& s = *state_;
  if (!s.device) throw InvalidArgument("IbrnetModel::end_step_on_device on the CPU step");
  s.device->end_step(coarse_denominator, fine_denominator, gradient_ready_order(), s.parameters,
                     ready, true, &s.times);
  s.step_target = nullptr;
}

float* IbrnetModel::device_gradients() {
  return state_->device ? state_->device->device_gradients() : nullptr;
}

void IbrnetModel::gradients_to_host() {
  if (!state_->device) throw InvalidArgument("IbrnetModel::gradients_to_host on the CPU step");
  state_->device->gradients_to_host(state_->parameters);
}

void IbrnetModel::set_loss_scale(double scale) {
  if (state_->device) {
    state_->device->set_loss_scale(scale);
  } else if (scale != 1.0) {
    throw InvalidArgument("IbrnetModel: the CPU step has no loss scale (fp32 only)");
  }
}

bool IbrnetModel::on_device() const {
  return state_->device != nullptr;
}

const PhaseTimes& IbrnetModel::phase_times() const {
  return state_->times;
}

StepResult IbrnetModel::train_step(const data::TrainingSample& sample, const RayBatch& rays,
                                   RandomKey key, uint32_t first_ray) {
  begin_step(sample);
  const RaySums sums = accumulate(rays, key, first_ray);
  const double coarse_denominator = masked_mse_denominator(sums.valid_coarse);
  const double fine_denominator = masked_mse_denominator(sums.valid_fine);
  end_step(coarse_denominator, fine_denominator, {});
  StepResult result;
  result.mse_coarse = sums.squared_error_coarse / coarse_denominator;
  result.mse_fine = state_->has_fine() ? sums.squared_error_fine / fine_denominator : 0.0;
  result.loss = result.mse_coarse + result.mse_fine;
  result.psnr = mse_to_psnr(state_->has_fine() ? result.mse_fine : result.mse_coarse);
  result.valid_rays = int(state_->has_fine() ? sums.valid_fine : sums.valid_coarse);
  result.times = state_->times;
  return result;
}

void IbrnetModel::render(const data::TrainingSample& sample, const std::vector<float>& pixels,
                         RandomKey key, std::vector<float>* rgb, std::vector<float>* depth,
                         const std::function<void(int, int)>& on_chunk) {
  State& s = *state_;
  const int total = int(pixels.size() / 2);
  rgb->resize(size_t(total) * 3);
  depth->resize(total);
  s.prepare_sources(sample, false);
  for (int first = 0; first < total; first += s.config.chunk_size) {
    const int n_rays = std::min(s.config.chunk_size, total - first);
    if (s.device) {
      s.device->render(sample.target, pixels.data() + 2 * size_t(first), n_rays, key,
                       uint32_t(first), rgb->data() + 3 * size_t(first), depth->data() + first);
      if (on_chunk) on_chunk(first + n_rays, total);
      continue;
    }
    s.make_rays(sample.target, pixels.data() + 2 * size_t(first), n_rays);
    s.sample_depths(n_rays, sample.target, key, uint32_t(first));
    s.run_pass(false, n_rays, sample.target, nullptr, false, &s.coarse);
    Pass* last = &s.coarse;
    if (s.has_fine()) {
      s.fine_depths(n_rays, key, uint32_t(first));
      s.run_pass(true, n_rays, sample.target, nullptr, false, &s.fine);
      last = &s.fine;
    }
    std::copy(last->rgb_map.begin(), last->rgb_map.end(), rgb->begin() + 3 * size_t(first));
    std::copy(last->depth_map.begin(), last->depth_map.end(), depth->begin() + first);
    if (on_chunk) on_chunk(first + n_rays, total);
  }
}

}  // namespace mvibr::train
