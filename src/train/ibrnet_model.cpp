// The IBRNet model (see ibrnet_model.h): the networks, the host copy of the training state and
// the backend that computes; samples become HostSources and rays here, the math is the backend's.
#include "mvibr/train/ibrnet_model.h"

#include <algorithm>
#include <string>

#include "ibrnet_backend.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/render/loss.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/pose_model.h"
#include "phase_laps.h"
#include "state_copies.h"

namespace mvibr::train {

double PhaseTimes::total() const {
  double sum = 0;
  for (const auto& [name, seconds] : named()) sum += seconds;
  return sum;
}

const PhaseLabels kDynibarPhases = {
    "features_forward",   "sampling",        "motion_forward",     "gather_forward",
    "aggregator_forward", "composite_loss",  "composite_backward", "aggregator_backward",
    "gather_backward",    "motion_backward", "features_backward"};
const PhaseLabels kIbrnetPhases = {"features_forward",
                                   "sampling",
                                   nullptr,
                                   "gather_forward",
                                   "aggregator_forward",
                                   "composite_loss",
                                   "composite_backward",
                                   "aggregator_backward",
                                   "gather_backward",
                                   nullptr,
                                   "features_backward"};
// The backbone; the heads (soft-argmax, confidences, fusion, triangulation) in the aggregator's
// slots; the loss and its gradients in the composite's.
const PhaseLabels kPosePhases = {
    "backbone_forward", nullptr,          nullptr, nullptr, "heads_forward",    "loss",
    "loss_backward",    "heads_backward", nullptr, nullptr, "backbone_backward"};

std::vector<std::pair<const char*, double>> PhaseTimes::named() const {
  const double seconds[kPhaseSlots] = {
      features_forward,   sampling,        motion_forward,     gather_forward,
      aggregator_forward, composite_loss,  composite_backward, aggregator_backward,
      gather_backward,    motion_backward, features_backward};
  std::vector<std::pair<const char*, double>> named;
  for (size_t slot = 0; slot < kPhaseSlots; ++slot) {
    if ((*labels)[slot]) named.emplace_back((*labels)[slot], seconds[slot]);
  }
  return named;
}

double StepResult::term(const char* key) const {
  for (const Scalar& t : terms) {
    if (std::string(t.key) == key) return t.value;
  }
  throw InvalidArgument(std::string("StepResult: no loss term '") + key + "'");
}

bool runs_on_device(const TrainConfig& config) {
  return use_cuda_step(config.device);
}

std::unique_ptr<TrainableModel> make_model(const TrainConfig& config) {
  if (config.model == ModelKind::kDynibar) return std::make_unique<DynibarModel>(config);
  if (config.model == ModelKind::kPose) {
    const data::SceneIndex index = data::read_scene_index(config.datadir);
    if (index.scene.skeleton.empty()) {
      throw InvalidArgument(
          "model = pose needs a pose data set (mvibr prep --input "
          "synthetic_pose); " +
          config.datadir + " has no skeleton");
    }
    return std::make_unique<PoseModel>(config, int(index.scene.skeleton.size()),
                                       pose_rig(index.scene));
  }
  return std::make_unique<IbrnetModel>(config);
}

nn::ResUNetOptions feature_net_options(const TrainConfig& config) {
  nn::ResUNetOptions o = nn::ResUNetOptions::preset(config.feature_net);
  o.conv_algorithm = config.conv_algorithm;
  o.coarse_out_ch = config.coarse_feat_dim;
  o.fine_out_ch = config.fine_feat_dim;
  o.coarse_only = config.coarse_only;
  return o;
}

namespace {

nn::AggregatorOptions aggregator_options(const TrainConfig& c, int channels) {
  nn::AggregatorOptions o;
  o.feature_channels = channels;
  o.n_samples_max = c.N_samples + (c.coarse_only ? 0 : c.N_importance);
  o.anti_alias_pooling = c.anti_alias_pooling;
  return o;
}

}  // namespace

struct IbrnetModel::State : WithStateCopies<IbrnetModel::State> {
  TrainConfig config;
  nn::ParameterSet parameters;
  nn::ResUNet feature_net;
  nn::IbrnetAggregator net_coarse;
  std::unique_ptr<nn::IbrnetAggregator> net_fine;
  nn::Adam adam;
  bool on_device;  // the backend the config's `device` picked at construction
  std::unique_ptr<IbrnetBackend> backend;
  // The sample's sources as the backends read them.
  std::vector<PinholeCamera<float>> cameras;
  std::vector<float> images;                          // [V,H,W,3] in [0,1]
  const data::TrainingSample* step_sample = nullptr;  // between begin_step and end_step
  PhaseTimes times;                                   // of the running training step
  PhaseLaps laps;

  explicit State(const TrainConfig& c)
      : config(c),
        feature_net(feature_net_options(c), &parameters, "feature_net."),
        net_coarse(parameters, "net_coarse.", aggregator_options(c, c.coarse_feat_dim)),
        net_fine(c.coarse_only
                     ? nullptr
                     : std::make_unique<nn::IbrnetAggregator>(
                           parameters, "net_fine.", aggregator_options(c, c.fine_feat_dim))),
        adam(parameters, nn::AdamOptions{}) {
    const IbrnetNetworks networks{feature_net, net_coarse, net_fine.get()};
    on_device = runs_on_device(c);
    backend =
        on_device ? make_cuda_backend(c, networks) : make_cpu_backend(c, parameters, networks);
    if (on_device) {
      copies = StateCopies(backend.get(), &parameters, &adam);  // the CPU backend's is the host's
    }
  }

  // Source images to floats, cameras to float, then the backend's feature network.
  void prepare_sources(const data::TrainingSample& sample, bool training) {
    copies.send();
    const int n_views = int(sample.sources.size());
    if (n_views == 0) {
      throw InvalidArgument("sample of view " + sample.target.name + " has no sources");
    }
    const int height = sample.target.camera.height, width = sample.target.camera.width;
    const size_t pixels = size_t(height) * width * 3;
    images.resize(size_t(n_views) * pixels);
    cameras.clear();
    for (int v = 0; v < n_views; ++v) {
      const data::View& view = sample.sources[size_t(v)];
      cameras.push_back(camera_cast<float>(view.camera));
      for (size_t i = 0; i < pixels; ++i) images[v * pixels + i] = float(view.rgb[i]) / 255.0f;
    }
    backend->prepare_sources(HostSources{n_views, height, width, cameras.data(), images.data()},
                             training);
    if (training) copies.stepped();
  }

  bool has_fine() const { return net_fine != nullptr && config.N_importance > 0; }
};

IbrnetModel::IbrnetModel(const TrainConfig& config) : state_(std::make_unique<State>(config)) {}
IbrnetModel::~IbrnetModel() = default;

const nn::ParameterSet& IbrnetModel::parameters() const {
  return state_->fetch().parameters;
}

nn::ParameterSet& IbrnetModel::parameters() {
  return state_->edit().parameters;
}

const nn::Adam& IbrnetModel::optimizer() const {
  return state_->fetch().adam;
}

nn::Adam& IbrnetModel::optimizer() {
  return state_->edit().adam;
}

void IbrnetModel::configure_optimizer(const nn::AdamOptions& options) {
  State& s = state_->edit();
  s.adam = nn::Adam(s.parameters, options);
}

void IbrnetModel::initialize(uint64_t seed) {
  State& s = state_->edit();
  nn::Initializer init(seed);
  s.feature_net.initialize(init);
  s.net_coarse.initialize(init);
  if (s.net_fine) s.net_fine->initialize(init);
}

uint64_t IbrnetModel::updates() const {
  return state_->adam.steps();  // the step count is the host's on every backend
}

double IbrnetModel::learning_rate(nn::ParameterGroup group) const {
  return state_->adam.learning_rate(group);
}

bool IbrnetModel::on_device() const {
  return state_->on_device;
}

StepWork IbrnetModel::step_work() const {
  const TrainConfig& c = state_->config;
  return {"rays", uint64_t(c.N_rand) * uint64_t(c.accumulation_steps)};
}

size_t IbrnetModel::loss_sums_size() const {
  return 4;
}

std::vector<ParameterRange> IbrnetModel::gradient_ready_order() const {
  const State& s = *state_;
  std::vector<ParameterRange> order = {
      {s.net_coarse.parameter_offset(), s.net_coarse.parameter_count()}};
  if (s.net_fine) order.push_back({s.net_fine->parameter_offset(), s.net_fine->parameter_count()});
  order.push_back({0, s.net_coarse.parameter_offset()});  // the feature network comes first
  return order;
}

void IbrnetModel::set_loss_scale(double scale) {
  state_->backend->set_loss_scale(scale);
}

void IbrnetModel::begin_step(const data::TrainingSample& sample) {
  State& s = *state_;
  s.times = PhaseTimes{};
  s.times.labels = &kIbrnetPhases;
  s.laps.start();
  s.prepare_sources(sample, true);
  s.step_sample = &sample;
  s.laps.to(&s.times.features_forward);
}

RaySums IbrnetModel::accumulate_rays(const RayBatch& rays, RandomKey key, uint32_t first_ray) {
  State& s = *state_;
  if (!s.step_sample) throw InvalidArgument("IbrnetModel::accumulate before begin_step");
  return s.backend->accumulate(s.step_sample->target, rays.pixels.data(), rays.target_rgb.data(),
                               int(rays.pixels.size() / 2), key, first_ray, &s.times);
}

LossSums IbrnetModel::accumulate(RandomKey key, int batch) {
  State& s = *state_;
  if (!s.step_sample) throw InvalidArgument("IbrnetModel::accumulate before begin_step");
  const TrainConfig& c = s.config;
  const uint32_t first_ray = uint32_t(batch * c.N_rand);
  const RayBatch rays =
      select_rays(s.step_sample->target, c.N_rand, c.sample_mode, c.center_ratio, key, first_ray);
  return accumulate_rays(rays, key, first_ray).values();
}

StepResult IbrnetModel::end_step(const LossSums& global,
                                 const std::function<void(ParameterRange)>& ready) {
  State& s = *state_;
  if (global.size() != loss_sums_size()) {
    throw InvalidArgument("IbrnetModel::end_step: " + std::to_string(global.size()) +
                          " loss sums, expected " + std::to_string(loss_sums_size()));
  }
  const double coarse_denominator = masked_mse_denominator(global[2]);
  const double fine_denominator = masked_mse_denominator(global[3]);
  s.backend->end_step(coarse_denominator, fine_denominator, gradient_ready_order(), ready,
                      &s.times);
  s.step_sample = nullptr;
  StepResult result;
  const double mse_coarse = global[0] / coarse_denominator;
  const double mse_fine = s.has_fine() ? global[1] / fine_denominator : 0.0;
  result.loss = mse_coarse + mse_fine;
  result.psnr = mse_to_psnr(s.has_fine() ? mse_fine : mse_coarse);
  result.valid_rays = int(s.has_fine() ? global[3] : global[2]);
  result.terms = {{"loss/coarse", "mse_coarse", mse_coarse}, {"loss/fine", "mse_fine", mse_fine}};
  result.times = s.times;
  return result;
}

float* IbrnetModel::gradients() {
  return state_->backend->gradients();
}

double IbrnetModel::gradient_norm() {
  return state_->backend->gradient_norm();
}

void IbrnetModel::update(double gradient_norm) {
  State& s = *state_;
  s.copies.send();
  s.backend->update(s.adam, gradient_norm);
  s.copies.stepped();
}

const PhaseTimes& IbrnetModel::phase_times() const {
  return state_->times;
}

StepResult IbrnetModel::train_step(const data::TrainingSample& sample, const RayBatch& rays,
                                   RandomKey key, uint32_t first_ray) {
  begin_step(sample);
  return end_step(accumulate_rays(rays, key, first_ray).values(), {});
}

void IbrnetModel::render(const data::TrainingSample& sample, const std::vector<float>& pixels,
                         RandomKey key, std::vector<float>* rgb, std::vector<float>* depth,
                         const std::function<void(int, int)>& on_chunk, RenderedParts* parts) {
  State& s = *state_;
  if (parts) *parts = {};  // one network: no parts
  const int total = int(pixels.size() / 2);
  rgb->resize(size_t(total) * 3);
  depth->resize(total);
  s.prepare_sources(sample, false);
  for (int first = 0; first < total; first += s.config.chunk_size) {
    const int n_rays = std::min(s.config.chunk_size, total - first);
    s.backend->render(sample.target, pixels.data() + 2 * size_t(first), n_rays, key,
                      uint32_t(first), rgb->data() + 3 * size_t(first), depth->data() + first);
    if (on_chunk) on_chunk(first + n_rays, total);
  }
}

}  // namespace mvibr::train
