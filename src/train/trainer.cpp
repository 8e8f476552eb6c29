// The data-parallel training loop (see trainer.h).
#include "mvibr/train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "metrics_log.h"
#include "mvibr/core/error.h"
#include "mvibr/core/stopwatch.h"
#include "mvibr/core/subnormals.h"
#include "mvibr/data/shards.h"
#include "mvibr/dist/agreement.h"
#include "mvibr/dist/gradient_buckets.h"
#include "mvibr/dist/nccl_communicator.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/render/loss.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/loss_scale.h"
#include "mvibr/train/model.h"
#include "mvibr/train/monitor.h"
#include "mvibr/train/pose_evaluate.h"
#include "mvibr/train/run_directory.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

// The stop reason that a stop request gives: above every signal's number, which it wins over.
constexpr int kStopRequested = 1000;

// Whether the run's stop request, if any, asks to stop after `step`.
bool stop_request_due(const std::string& run_dir, uint64_t step, std::ostream& log) {
  const std::optional<uint64_t> after = read_stop_request(run_dir, log);
  return after && step >= *after;
}

// "signal 10 (SIGUSR1)".
std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return "signal " + std::to_string(signal) +
         (abbreviation ? std::string(" (SIG") + abbreviation + ")" : std::string());
}

// Stops non-zero ranks' logging: rank 0 speaks for the job.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

double lr_factor(const TrainConfig& c, int ranks) {
  if (c.lr_scaling == LrScaling::kLinear) return double(ranks);
  if (c.lr_scaling == LrScaling::kSqrt) return std::sqrt(double(ranks));
  return 1.0;
}

// Which checkpoint to resume from: ckpt_path, else the run's newest unless no_reload.
std::string resume_path(const TrainConfig& c, const std::string& run_dir) {
  if (!c.ckpt_path.empty()) {
    if (!fs::exists(c.ckpt_path)) throw InvalidArgument(c.ckpt_path + ": no such checkpoint");
    return c.ckpt_path;
  }
  return c.no_reload ? "" : train::latest_checkpoint(run_dir);
}

// Runs `work` on rank 0 only and makes its failure every rank's: the error text is broadcast and
// every rank throws it, so no rank is left waiting in the next collective.
void on_root(dist::Communicator& comm, const std::function<void()>& work) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      work();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = dist::broadcast_string(comm, error, 0);
  if (!error.empty()) throw InvalidArgument(error);
}

// Rank 0's values of a float vector on every rank.
void broadcast_floats(dist::Communicator& comm, std::vector<float>* values) {
  comm.broadcast(values->data(), values->size() * sizeof(float), 0);
}

std::vector<data::ReaderCursor> all_cursors(dist::Communicator& comm, data::ReaderCursor mine) {
  return dist::all_gather_value<data::ReaderCursor>(comm, mine);
}

// The parameters, Adam's state and the data cursors every rank starts from: rank 0's
// checkpoint (read by rank 0 alone and broadcast), or rank 0's initialisation.
data::ReaderCursor restore_or_initialize(const TrainConfig& config, const std::string& run_dir,
                                         bool measure_only, dist::Communicator& comm,
                                         TrainableModel* model, std::ostream& log) {
  nn::ParameterSet& params = model->parameters();
  nn::Adam* adam = &model->optimizer();
  train::TrainingState state;
  std::string resume;
  std::string initial;  // init_ckpt, when it gives a new run its weights
  on_root(comm, [&] {
    resume = measure_only ? "" : resume_path(config, run_dir);
    if (!resume.empty()) {
      train::load_checkpoint(resume, &params, adam, &state);
    } else if (!measure_only && !config.init_ckpt.empty()) {
      if (!fs::exists(config.init_ckpt)) {
        throw InvalidArgument(config.init_ckpt + ": no such checkpoint (init_ckpt)");
      }
      train::load_weights(config.init_ckpt, &params);
      initial = config.init_ckpt;
    } else {
      model->initialize(config.seed);
    }
  });
  resume = dist::broadcast_string(comm, resume, 0);
  broadcast_floats(comm, &params.values());
  if (resume.empty()) {
    if (comm.rank() == 0 && !initial.empty()) {
      log << "starting from the weights of " << initial << " (init_ckpt), a fresh optimiser\n";
    }
    return {};
  }

  uint64_t steps = adam->steps();
  comm.broadcast(&steps, sizeof(steps), 0);
  std::array<uint64_t, nn::kParameterGroupCount> group_steps = adam->group_steps();
  comm.broadcast(group_steps.data(), sizeof(group_steps), 0);
  std::vector<float> exp_avg = adam->exp_avg(), exp_avg_sq = adam->exp_avg_sq();
  broadcast_floats(comm, &exp_avg);
  broadcast_floats(comm, &exp_avg_sq);
  adam->restore(steps, std::move(exp_avg), std::move(exp_avg_sq), group_steps);
  uint64_t written_by = state.cursors.size();
  comm.broadcast(&written_by, sizeof(written_by), 0);
  state.cursors.resize(written_by);
  comm.broadcast(state.cursors.data(), written_by * sizeof(data::ReaderCursor), 0);

  log << "resuming from " << resume << " at step " << steps << "\n";
  if (written_by == 0) {
    log << resume << " holds weights without a data position (imported): the data starts from "
        << "the beginning\n";
    return {};
  }
  if (written_by == uint64_t(comm.size())) return state.cursors[size_t(comm.rank())];
  uint64_t epoch = 0;
  for (const data::ReaderCursor& c : state.cursors) epoch = std::max(epoch, c.epoch);
  const StepWork work = model->step_work();
  log << "warning: " << resume << " was written by " << written_by << " rank(s) and this job has "
      << comm.size() << ": the shards are dealt anew and every rank starts its shards at epoch "
      << epoch << ", so the samples differ from a run that kept " << written_by
      << " rank(s); the global batch is now " << work.per_rank_step << " x " << comm.size() << " "
      << work.unit << "\n";
  return {epoch, 0};
}

// Every rank renders a band of the held-out view's rows; rank 0 puts the image together into
// `image` and scores it (the others return a view of -1).
ViewMetrics validate(TrainableModel& model, const data::TrainingSample& sample, RandomKey key,
                     dist::Communicator& comm, RgbImage* image) {
  const int width = sample.target.camera.width, height = sample.target.camera.height;
  const int band = (height + comm.size() - 1) / comm.size();
  const int first_row = std::min(height, comm.rank() * band);
  const int rows = std::min(height, first_row + band) - first_row;
  const std::vector<float> pixels = pixel_rows(width, first_row, rows);
  std::vector<float> rgb, depth;
  model.render(sample, pixels, key, &rgb, &depth);
  rgb.resize(size_t(band) * width * 3);  // every rank sends a whole band
  std::vector<float> all(rgb.size() * size_t(comm.size()));
  comm.all_gather(rgb.data(), rgb.size() * sizeof(float), all.data());
  ViewMetrics m;
  if (comm.rank() != 0) return m;
  *image = {width, height, std::vector<float>(all.begin(), all.begin() + 3 * width * height)};
  const RgbImage truth = view_image(sample.target);
  m.view = sample.target_view;
  m.name = sample.target.name;
  m.psnr = psnr(*image, truth);
  m.ssim = ssim(*image, truth);
  return m;
}

std::string describe_job(const TrainConfig& c, const RankContext& context,
                         const dist::Communicator& world, const StepWork& work, size_t parameters,
                         size_t buckets) {
  std::ostringstream out;
  const dist::Topology& t = context.topology;
  const JobBackend b = job_backend(c, world, t);
  out << "mvibr train: " << b.ranks << " rank(s) on " << t.hosts << " host(s) (" << t.local_size
      << " on " << (t.host.empty() ? "this host" : t.host) << "), backend " << b.reduction << ", "
      << (b.device >= 0 ? "GPU " + std::to_string(b.device) + " (" + b.device_description + ", " +
                              name_of(b.precision) + " GEMMs)"
          : b.precision == Precision::kBf16 ? "CPU (bf16 convolutions)"
                                            : "CPU")
      << "; global batch " << work.per_rank_step * uint64_t(b.ranks) << " " << work.unit << " ("
      << (c.model == ModelKind::kPose ? "pose_batch " + std::to_string(c.pose_batch)
                                      : "N_rand " + std::to_string(c.N_rand))
      << " x " << c.accumulation_steps << " micro-steps x " << b.ranks << " ranks); " << parameters
      << " parameters in " << buckets << " all-reduce bucket(s) of <= " << c.bucket_mb << " MB ("
      << name_of(c.allreduce_dtype) << ")";
  if (c.lr_scaling != LrScaling::kNone) out << "; learning rates x " << lr_factor(c, b.ranks);
  out << "\n";
  return out.str();
}

}  // namespace

nn::AdamOptions adam_options(const TrainConfig& c, int ranks) {
  nn::AdamOptions o;
  o.lrate_feature = c.lrate_feature * lr_factor(c, ranks);
  o.lrate_mlp = c.lrate_mlp * lr_factor(c, ranks);
  o.lrate_fusion = c.lrate_fusion * lr_factor(c, ranks);
  o.lrate_decay_factor = c.lrate_decay_factor;
  o.lrate_decay_steps = uint64_t(c.lrate_decay_steps);
  o.max_grad_norm = c.grad_clip;
  o.kind = c.optimizer;
  o.weight_decay = c.weight_decay;
  o.weight_decay_1d = c.weight_decay_1d;
  o.lr_schedule = c.lr_schedule;
  o.warmup_steps = uint64_t(c.warmup_steps);
  o.total_steps = uint64_t(c.n_iters);
  o.min_lr_ratio = c.min_lr_ratio;
  return o;
}

data::ReaderOptions reader_options(const TrainConfig& c, int rank, int ranks) {
  data::ReaderOptions o;
  o.data_dir = c.datadir;
  o.rank = rank;
  o.world_size = ranks;
  o.allow_shared_shards = c.allow_shared_shards;
  o.seed = c.seed;
  o.num_source_views = c.num_source_views;
  o.source_pool = c.source_pool;
  o.queue_depth = c.queue_depth;
  o.split = data::Split::kTrain;
  if (c.model == ModelKind::kPose) {
    o.num_source_views = int(data::kMaxNeighbours);  // every camera of the instant, in order
    o.source_pool = 0;
  }
  if (c.model == ModelKind::kDynibar) {
    o.dynibar_sources = true;
    o.dynibar = dynibar_source_options(c);
    const DynibarScheduleOptions schedule = dynibar_schedule_options(c);
    o.anchor_growth_steps = uint64_t(dynibar_decay_steps(schedule));
    o.anchor_growth_start = uint64_t(dynibar_bootstrap_steps(schedule));
  }
  return o;
}

namespace {

// Held-out instants the pose model's validation scores (split over the ranks).
constexpr int kPoseValidationInstants = 32;

// One rank's training run as short named steps, which train() calls in turn: start (the
// constructor), step, log, validate, checkpoint, stop on request, finish.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, std::ostream& rank0_log, const RankContext& context);
  bool finished() const { return model_->updates() >= uint64_t(config_.n_iters); }
  // One update: the sample, the forward and backward passes, the all-reduces and Adam. False
  // when the update was skipped (fp16 overflow, a non-finite loss or gradient).
  bool step();
  void log_if_due();
  void validate_if_due();
  void validate_pose(uint64_t done);
  void checkpoint_if_due();
  // True when a signal or the stop request asked to stop after this step.
  bool stop_if_asked();
  TrainSummary finish();

 private:
  dist::Communicator& communicator(const RankContext& context);
  std::unique_ptr<TrainableModel> start_ranks();
  // The parameters' host copy, as of the last update (fetched from a device on demand).
  const nn::ParameterSet& parameters() const { return std::as_const(*model_).parameters(); }
  void save_checkpoint();

  const TrainConfig& config_;
  const RankContext& context_;
  std::unique_ptr<dist::Communicator> single_;  // a job of one process
  dist::Communicator& comm_;
  const int rank_, ranks_;
  NullBuffer null_buffer_;
  std::ostream null_log_;
  std::ostream& log_;
  // Declared before the watchdog, which aborts it on a stall: it outlives the watchdog's thread.
  std::unique_ptr<dist::Communicator> nccl_;
  std::unique_ptr<dist::Watchdog> watchdog_;
  TrainSummary summary_;
  const bool fp16_;  // fp16 GEMMs scale the loss (1 and never changed otherwise)
  DynamicLossScale loss_scale_;
  int device_ = -1;  // the GPU of this rank, -1 on the CPU
  std::unique_ptr<TrainableModel> model_;
  std::unique_ptr<dist::GradientBuckets> buckets_;
  std::unique_ptr<data::PrefetchReader> reader_;
  // Validation renders one held-out view with a copy of the weights in a model of its own
  // (deterministic samples, its own buffers), so training continues exactly as without it.
  std::optional<data::TrainingSample> heldout_;
  std::vector<data::TrainingSample> pose_heldout_;  // this rank's share of the pose model's
  MeanPose pose_baseline_;
  std::unique_ptr<TrainableModel> validation_model_;
  std::unique_ptr<RunDirectoryLock> run_lock_;
  std::unique_ptr<MetricsLog> metrics_;
  uint64_t work_per_update_ = 0;  // rays or instants, over all ranks
  std::unique_ptr<Progress> progress_;
  IntervalTimes interval_;  // since the last i_print
  uint64_t logged_step_ = 0;
  int consecutive_skips_ = 0;
  // The last update.
  std::string step_name_;
  StepResult result_;
  double grad_norm_ = 0;
  int stop_reason_ = 0;
};

dist::Communicator& TrainingRun::communicator(const RankContext& context) {
  if (context.comm) return *context.comm;
  single_ = dist::single_process_communicator();
  return *single_;
}

TrainingRun::TrainingRun(const TrainConfig& config, std::ostream& rank0_log,
                         const RankContext& context)
    : config_(config),
      context_(context),
      comm_(communicator(context)),
      rank_(comm_.rank()),
      ranks_(comm_.size()),
      null_log_(&null_buffer_),
      log_(rank_ == 0 ? rank0_log : null_log_),
      fp16_(config.precision == Precision::kFp16),
      loss_scale_(fp16_ ? config.loss_scale : 1.0, config.loss_scale_window),
      model_(start_ranks()) {
  model_->configure_optimizer(adam_options(config, ranks_));
  data::ReaderCursor cursor;
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the parameter broadcast at start");
    cursor = restore_or_initialize(config_, summary_.run_dir, context_.measure_only, comm_,
                                   model_.get(), log_);
    dist::check_same_parameters(comm_, parameters().values().data(), parameters().size(), "start");
  }
  summary_.first_step = summary_.last_step = model_->updates();

  std::vector<dist::GradientRange> ready_order;
  for (const ParameterRange& r : model_->gradient_ready_order()) {
    ready_order.push_back({r.offset, r.count});
  }
  // Gradients are all-reduced where the model keeps them: with NCCL in device memory, over MPI in
  // host memory.
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the NCCL set-up at start");
    double device_ranks = model_->on_device() ? 1 : 0;
    comm_.all_reduce(&device_ranks, 1, dist::ReduceOp::kSum);
    if (device_ranks != 0 && device_ranks != ranks_) {
      throw InvalidArgument("config key 'device': " + std::to_string(int(device_ranks)) + " of " +
                            std::to_string(ranks_) +
                            " ranks found a CUDA device (device = " + name_of(config_.device) +
                            "); give every rank one, or set device = cpu");
    }
    // One GPU rank too: its reduction is a copy, and single-GPU runs take the multi-GPU path.
    if (model_->on_device()) {
      if (config_.allreduce_dtype != AllreduceDtype::kFp32) {
        throw InvalidArgument(std::string("config key 'allreduce_dtype': ") +
                              name_of(config_.allreduce_dtype) +
                              " is for CPU ranks (MPI on host gradients); GPU ranks reduce their "
                              "gradients on the device with NCCL in fp32");
      }
      nccl_ = dist::make_nccl_communicator(comm_, device_, config_.watchdog_s);
      if (watchdog_) watchdog_->abort_on_stall(nccl_.get());
    }
  }
  dist::Communicator& gradients = nccl_ ? *nccl_ : comm_;
  buckets_ = std::make_unique<dist::GradientBuckets>(
      gradients, ready_order, size_t(config_.bucket_mb * 1024 * 1024), dist::ReduceOp::kSum,
      config_.overlap_allreduce, config_.allreduce_dtype == AllreduceDtype::kBf16);
  log_ << describe_job(config_, context_, comm_, model_->step_work(), parameters().size(),
                       buckets_->buckets().size());

  reader_ = std::make_unique<data::PrefetchReader>(reader_options(config_, rank_, ranks_), cursor);
  if (config_.model == ModelKind::kPose) {
    // The first held-out instants, this rank's share of them, and the baseline beside them.
    if (!context_.measure_only) {
      pose_heldout_ = pose_instants(config_.datadir, data::Split::kTest, kPoseValidationInstants,
                                    ranks_, rank_);
      pose_baseline_ = mean_training_pose(config_.datadir);
    }
  } else if (!context_.measure_only) {
    heldout_ = first_heldout_sample(config_);
  }
  if (heldout_) {
    validation_model_ = make_model(evaluation_config(config_));
  } else if (!context_.measure_only && config_.model != ModelKind::kPose) {
    log_ << "no test or val views in " << config_.datadir << ": no held-out validation\n";
  }

  // The run directory is made only once every rank has checked its inputs (the config, the
  // checkpoint to start from, its shards): a job that fails at start leaves nothing behind.
  if (!context_.measure_only) {
    {
      dist::Watchdog::Scope watch(watchdog_.get(), "the input check at start");
      double ready = 1;
      comm_.all_reduce(&ready, 1, dist::ReduceOp::kSum);
    }
    on_root(comm_, [&] {
      run_lock_ = std::make_unique<RunDirectoryLock>(summary_.run_dir, log_);
      std::ofstream(fs::path(summary_.run_dir) / "config.txt") << config_.to_text();
      metrics_ = std::make_unique<MetricsLog>(summary_.run_dir);
    });
  }
  if (const auto after = run_lock_ ? read_stop_request(summary_.run_dir, log_) : std::nullopt) {
    log_ << "a stop request waits in " << stop_request_path(summary_.run_dir)
         << ": stopping after step " << std::max(*after, summary_.first_step + 1) << "\n";
  }
  const StepWork work = model_->step_work();
  work_per_update_ = work.per_rank_step * uint64_t(ranks_);
  progress_ = std::make_unique<Progress>(log_, rank_ == 0 ? context_.progress_columns : 0,
                                         summary_.first_step, uint64_t(config_.n_iters),
                                         double(work_per_update_), work.unit,
                                         model_->quality(StepResult{}).key);
  logged_step_ = summary_.first_step;
}

// The watchdog, the same config on every rank, and the rank's device, before the model is made.
std::unique_ptr<TrainableModel> TrainingRun::start_ranks() {
  if (context_.on_stall && ranks_ > 1) {
    const std::string who = "rank " + std::to_string(rank_) +
                            (context_.topology.host.empty() ? "" : " on " + context_.topology.host);
    watchdog_ = std::make_unique<dist::Watchdog>(
        config_.watchdog_s, [who, handler = context_.on_stall](const std::string& what) {
          handler(who + ": " + what);
        });
  }
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the config check at start");
    dist::check_same_config(comm_, config_.to_text());
  }
  summary_.run_dir = (fs::path(config_.basedir) / config_.expname).string();
  // A GPU rank drives device local_rank % devices, chosen before the model allocates on it.
  device_ = runs_on_device(config_) ? dist::select_device(context_.topology) : -1;
  return make_model(config_);
}

bool TrainingRun::step() {
  const uint64_t index = model_->updates();
  step_name_ = "step " + std::to_string(index + 1);
  const RandomKey key{config_.seed, index};
  StepReport report;
  const auto step_start = std::chrono::steady_clock::now();
  const double waited_before = reader_->wait_seconds();
  std::vector<data::TrainingSample> samples(model_->samples_per_step());
  for (data::TrainingSample& sample : samples) sample = reader_->next();
  report.data_wait = reader_->wait_seconds() - waited_before;
  model_->set_loss_scale(loss_scale_.scale());
  model_->begin_step(samples);
  LossSums sums(model_->loss_sums_size(), 0.0);
  for (int m = 0; m < config_.accumulation_steps; ++m) {
    const LossSums batch = model_->accumulate(key, rank_ * config_.accumulation_steps + m);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += batch[i];
  }
  // The loss sums, and whether a rank was asked to stop: by a signal (its number) or, on rank
  // 0, by a stop request due after this step (kStopRequested, above every signal's number).
  const int signal = context_.stop_signal ? context_.stop_signal->load() : 0;
  const bool requested = run_lock_ && stop_request_due(summary_.run_dir, index + 1, log_);
  double stop = double(requested ? kStopRequested : signal);
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the loss all-reduce of " + step_name_);
    const auto reduce_start = std::chrono::steady_clock::now();
    comm_.all_reduce(sums.data(), sums.size(), dist::ReduceOp::kSum);
    comm_.all_reduce(&stop, 1, dist::ReduceOp::kMax);
    report.loss_allreduce = seconds_since(reduce_start);
  }
  stop_reason_ = int(stop);
  dist::GradientBuckets& buckets = *buckets_;
  {
    // Without overlap the buckets are reduced inline, in the backward pass: watched with it.
    dist::Watchdog::Scope watch(config_.overlap_allreduce ? nullptr : watchdog_.get(),
                                "the backward pass and gradient all-reduce of " + step_name_);
    buckets.begin(model_->gradients());
    result_ =
        model_->end_step(sums, [&](ParameterRange r) { buckets.mark_ready(r.offset, r.count); });
  }
  {
    dist::Watchdog::Scope watch(config_.overlap_allreduce ? watchdog_.get() : nullptr,
                                "the gradient all-reduce of " + step_name_);
    buckets.finish();
  }
  report.allreduce = buckets.communication_seconds();
  report.allreduce_exposed = buckets.exposed_seconds();
  const auto optimizer_start = std::chrono::steady_clock::now();

  const StepResult& result = result_;
  // Every rank holds the same summed loss and gradients, so all decide alike.
  const double norm = model_->gradient_norm();
  grad_norm_ = norm;
  // fp16: gradients that overflowed at this loss scale skip the update at half the scale, as
  // GradScaler does; below a scale of 1 they are not an overflow but a failure.
  if (fp16_ && std::isfinite(result.loss) && !std::isfinite(norm) && loss_scale_.scale() >= 1) {
    loss_scale_.update(false);
    progress_->print("note: " + step_name_ + ": fp16 gradients overflowed; update skipped, loss " +
                     "scale now " + std::to_string(loss_scale_.scale()) + "\n");
    return false;
  }
  if (fp16_) loss_scale_.update(std::isfinite(norm));
  if (!std::isfinite(result.loss) || !std::isfinite(norm)) {
    const std::string what = step_name_ + ": the " +
                             (std::isfinite(result.loss) ? "gradient" : "loss") +
                             " is not finite (loss " + std::to_string(result.loss) +
                             ", gradient norm " + std::to_string(norm) + ")";
    if (config_.nan_policy == NanPolicy::kStop) {
      save_checkpoint();
      throw RuntimeFailure(what + "; stopped after writing the last good state to " +
                           (rank_ == 0 ? summary_.last_checkpoint : "rank 0's run directory"));
    }
    ++summary_.skipped_steps;
    progress_->print("warning: " + what + "; update skipped\n");
    if (++consecutive_skips_ >= 10) {
      throw RuntimeFailure(what + "; 10 updates in a row skipped, stopping");
    }
    return false;
  }
  consecutive_skips_ = 0;
  model_->update(norm);
  const uint64_t done = model_->updates();
  report.step = done;
  report.optimizer = seconds_since(optimizer_start);
  report.seconds = seconds_since(step_start);
  report.phases = model_->phase_times();
  report.loss = result.loss;
  report.psnr = result.psnr;
  report.work = model_->step_work();
  if (context_.on_step) context_.on_step(report);
  interval_.add(report);
  progress_->update(done, result.loss, model_->quality(result).value);
  summary_.last_step = done;
  summary_.last_loss = result.loss;
  summary_.last_psnr = result.psnr;
  summary_.last_quality = model_->quality(result);
  return true;
}

// Every i_print steps and at the end: the ranks' parameters compared, the interval's times
// gathered, a log line (or the progress line), an imbalance warning, the metrics.
void TrainingRun::log_if_due() {
  const uint64_t done = model_->updates();
  if (done % uint64_t(config_.i_print) != 0 && done != uint64_t(config_.n_iters)) return;
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the parameter check of " + step_name_);
    dist::check_same_parameters(comm_, parameters().values().data(), parameters().size(),
                                step_name_);
  }
  std::vector<std::vector<std::pair<std::string, double>>> parts;
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the time gathering of " + step_name_);
    parts = gather_busy_parts(comm_, interval_);
  }
  const Imbalance balance = assess_imbalance(parts);
  double data_wait = 0;  // the rank that waited longest for its reader
  for (const auto& rank_parts : parts) data_wait = std::max(data_wait, rank_parts[0].second);
  const IntervalTimes& interval = interval_;
  const StepResult& result = result_;
  const double steps = double(interval.steps);
  const double step_seconds = interval.seconds / steps;
  const StepWork work = model_->step_work();
  const double work_per_second = double(work_per_update_) / step_seconds;
  const Scalar quality = model_->quality(result);
  const double data_wait_fraction = data_wait / step_seconds;
  const double allreduce_fraction = interval.allreduce / interval.seconds;
  const double hidden = interval.allreduce_hidden_fraction();
  if (!progress_->in_place()) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "step %llu/%d  loss %.5f  %s %.2f  %s/s %.0f  data wait %.1f%%  "
                  "all-reduce %.1f%% (%.0f%% hidden)  eta %.0f s\n",
                  (unsigned long long)done, config_.n_iters, result.loss, quality.key,
                  quality.value, work.unit, work_per_second, 100.0 * data_wait_fraction,
                  100.0 * allreduce_fraction, 100.0 * hidden, progress_->eta_seconds(done));
    log_ << line << std::flush;
  }
  const std::string warning = imbalance_warning(balance, kImbalanceWarning, logged_step_ + 1, done);
  if (!warning.empty()) progress_->print(warning);
  if (metrics_) {
    const std::string work_key = std::string(work.unit) + "_per_second";
    const std::string work_tag = "throughput/" + work_key;
    std::vector<Scalar> scalars = {{"loss/total", "loss", result.loss}};
    scalars.insert(scalars.end(), result.terms.begin(), result.terms.end());
    scalars.insert(
        scalars.end(),
        {quality,
         {"train/grad_norm", "grad_norm", grad_norm_},
         {"lr/feature", "lr_feature", model_->learning_rate(nn::ParameterGroup::kFeature)},
         {"lr/mlp", "lr_mlp", model_->learning_rate(nn::ParameterGroup::kMlp)},
         {work_tag.c_str(), work_key.c_str(), work_per_second},
         {"throughput/steps_per_second", "steps_per_second", 1.0 / step_seconds},
         {"time/step_seconds", "step_seconds", step_seconds},
         {"time/data_wait_fraction", "data_wait_fraction", data_wait_fraction},
         {"time/busy_seconds_min", "busy_seconds_min", balance.busy_min},
         {"time/busy_seconds_max", "busy_seconds_max", balance.busy_max},
         {"time/imbalance", "imbalance", balance.imbalance},
         {"allreduce/seconds", "allreduce_seconds", interval.allreduce / steps},
         {"allreduce/exposed_seconds", "allreduce_exposed_seconds",
          interval.allreduce_exposed / steps},
         {"allreduce/hidden_fraction", "allreduce_hidden_fraction", hidden}});
    if (config_.model == ModelKind::kDynibar) {  // its groups at their own rates
      scalars.insert(scalars.end(),
                     {{"lr/static_feature", "lr_static_feature",
                       model_->learning_rate(nn::ParameterGroup::kStaticFeature)},
                      {"lr/static_mlp", "lr_static_mlp",
                       model_->learning_rate(nn::ParameterGroup::kStaticMlp)},
                      {"lr/trajectory_basis", "lr_trajectory_basis",
                       model_->learning_rate(nn::ParameterGroup::kTrajectoryBasis)}});
    }
    if (config_.model == ModelKind::kPose && config_.cross_view_fusion) {
      scalars.push_back(
          {"lr/fusion", "lr_fusion", model_->learning_rate(nn::ParameterGroup::kFusion)});
    }
    metrics_->write(done, scalars,
                    {{"valid_rays", result.valid_rays},
                     {"ranks", ranks_},
                     {"slowest_rank", balance.slow_rank},
                     {"interval_steps", steps}});
  }
  interval_ = IntervalTimes{};
  logged_step_ = done;
}

// Every i_img steps: the held-out view rendered by all ranks, scored and logged by rank 0.
void TrainingRun::validate_if_due() {
  const uint64_t done = model_->updates();
  if (done % uint64_t(config_.i_img) != 0) return;
  if (config_.model == ModelKind::kPose) {
    validate_pose(done);
    return;
  }
  if (!heldout_) return;
  validation_model_->parameters().values() = parameters().values();
  progress_->print("step " + std::to_string(done) + "/" + std::to_string(config_.n_iters) +
                   "  validating (every i_img = " + std::to_string(config_.i_img) +
                   " steps): rendering held-out view " + std::to_string(heldout_->target_view) +
                   ", " + std::to_string(heldout_->target.camera.width) + "x" +
                   std::to_string(heldout_->target.camera.height) + " pixels\n");
  ViewMetrics m;
  RgbImage rendered;
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the validation of " + step_name_);
    m = validate(*validation_model_, *heldout_, RandomKey{config_.seed, 0}, comm_, &rendered);
  }
  if (rank_ != 0) return;
  summary_.heldout_psnr = m.psnr;
  summary_.heldout_ssim = m.ssim;
  char line[256];
  std::snprintf(line, sizeof(line), "step %llu/%d  held-out view %d  psnr %.2f  ssim %.4f\n",
                (unsigned long long)done, config_.n_iters, m.view, m.psnr, m.ssim);
  progress_->print(line);
  metrics_->write(
      done, {{"heldout/psnr", "heldout_psnr", m.psnr}, {"heldout/ssim", "heldout_ssim", m.ssim}});
  metrics_->image("heldout/rgb", done, rendered);
}

// The pose model's MPJPE over the held-out instants, each rank scoring its share.
void TrainingRun::validate_pose(uint64_t done) {
  if (pose_baseline_.absolute.empty()) return;
  PoseEvalReport r;
  {
    dist::Watchdog::Scope watch(watchdog_.get(), "the validation of " + step_name_);
    r = evaluate_pose(static_cast<PoseModel&>(*model_), pose_heldout_, pose_baseline_, &comm_);
  }
  if (rank_ != 0 || r.instants == 0) return;
  summary_.heldout_mpjpe_mm = r.mpjpe_mm;
  summary_.heldout_mpjpe_relative_mm = r.mpjpe_relative_mm;
  char line[256];
  std::snprintf(line, sizeof(line),
                "step %llu/%d  held-out %d instants  mpjpe %.1f mm (root-relative %.1f; mean "
                "pose %.1f, %.1f)  pck %.3f\n",
                (unsigned long long)done, config_.n_iters, r.instants, r.mpjpe_mm,
                r.mpjpe_relative_mm, r.baseline_mpjpe_mm, r.baseline_mpjpe_relative_mm, r.pck);
  progress_->print(line);
  std::vector<Scalar> scores = {
      {"heldout/mpjpe_mm", "heldout_mpjpe_mm", r.mpjpe_mm},
      {"heldout/mpjpe_relative_mm", "heldout_mpjpe_relative_mm", r.mpjpe_relative_mm},
      {"heldout/pck", "heldout_pck", r.pck}};
  if (r.cross_view_fusion) {
    std::snprintf(line, sizeof(line),
                  "step %llu/%d  held-out without fusion  mpjpe %.1f mm (root-relative %.1f)  "
                  "pck %.3f\n",
                  (unsigned long long)done, config_.n_iters, r.mpjpe_without_fusion_mm,
                  r.mpjpe_relative_without_fusion_mm, r.pck_without_fusion);
    progress_->print(line);
    scores.push_back({"heldout/mpjpe_without_fusion_mm", "heldout_mpjpe_without_fusion_mm",
                      r.mpjpe_without_fusion_mm});
    scores.push_back({"heldout/mpjpe_relative_without_fusion_mm",
                      "heldout_mpjpe_relative_without_fusion_mm",
                      r.mpjpe_relative_without_fusion_mm});
    scores.push_back(
        {"heldout/pck_without_fusion", "heldout_pck_without_fusion", r.pck_without_fusion});
  }
  metrics_->write(done, scores);
}

// Every i_weights steps, at the end, and when asked to stop.
void TrainingRun::checkpoint_if_due() {
  const uint64_t done = model_->updates();
  if (context_.measure_only || (stop_reason_ == 0 && done % uint64_t(config_.i_weights) != 0 &&
                                done != uint64_t(config_.n_iters))) {
    return;
  }
  dist::Watchdog::Scope watch(watchdog_.get(), "the checkpoint of " + step_name_);
  save_checkpoint();
}

// Rank 0 writes the parameters, Adam's state and every rank's data cursor.
void TrainingRun::save_checkpoint() {
  const train::TrainingState state{config_.to_text(), all_cursors(comm_, reader_->cursor()),
                                   config_.seed};
  on_root(comm_, [&] {
    summary_.last_checkpoint =
        train::save_checkpoint(summary_.run_dir, parameters(), std::as_const(*model_).optimizer(),
                               state, config_.keep_checkpoints);
  });
}

bool TrainingRun::stop_if_asked() {
  const uint64_t done = model_->updates();
  if (stop_reason_ == 0 || done >= uint64_t(config_.n_iters)) return false;
  summary_.stopped_by = stop_reason_ == kStopRequested
                            ? "the stop request " + stop_request_path(summary_.run_dir)
                            : signal_name(stop_reason_);
  progress_->print("stopping at step " + std::to_string(done) + " on " + summary_.stopped_by +
                   "; checkpoint " + summary_.last_checkpoint + "\n");
  return true;
}

TrainSummary TrainingRun::finish() {
  // The request is answered: the run stopped on it, or ended while it was due.
  if (run_lock_ && stop_request_due(summary_.run_dir, summary_.last_step, log_)) {
    clear_stop_request(summary_.run_dir);
  }
  return summary_;
}

}  // namespace

TrainSummary train(const TrainConfig& config, std::ostream& rank0_log, const RankContext& context) {
  const TrainConfig resolved = with_video_frames(config);
  std::optional<FlushSubnormals> flush;
  if (resolved.flush_subnormals) flush.emplace();
  TrainingRun run(resolved, rank0_log, context);
  while (!run.finished()) {
    if (!run.step()) continue;
    run.log_if_due();
    run.validate_if_due();
    run.checkpoint_if_due();
    if (run.stop_if_asked()) break;
  }
  return run.finish();
}

}  // namespace mvibr::train
