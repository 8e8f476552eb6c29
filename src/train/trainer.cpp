// The data-parallel training loop (see trainer.h).
#include "mvibr/train/trainer.h"

#include <algorithm>
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

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/core/stopwatch.h"
#include "mvibr/dist/agreement.h"
#include "mvibr/dist/gradient_buckets.h"
#include "mvibr/dist/nccl_communicator.h"
#include "mvibr/nn/checkpoint.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/render/loss.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/loss_scale.h"
#include "mvibr/train/monitor.h"
#include "mvibr/train/run_directory.h"
#include "mvibr/train/tensorboard.h"

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
  return c.no_reload ? "" : nn::latest_checkpoint(run_dir);
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
                                         IbrnetModel* model, nn::Adam* adam, std::ostream& log) {
  nn::ParameterSet& params = model->parameters();
  nn::TrainingState state;
  std::string resume;
  std::string initial;  // init_ckpt, when it gives a new run its weights
  on_root(comm, [&] {
    resume = measure_only ? "" : resume_path(config, run_dir);
    if (!resume.empty()) {
      nn::load_checkpoint(resume, &params, adam, &state);
    } else if (!measure_only && !config.init_ckpt.empty()) {
      if (!fs::exists(config.init_ckpt)) {
        throw InvalidArgument(config.init_ckpt + ": no such checkpoint (init_ckpt)");
      }
      nn::load_weights(config.init_ckpt, &params);
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
  std::vector<float> exp_avg = adam->exp_avg(), exp_avg_sq = adam->exp_avg_sq();
  broadcast_floats(comm, &exp_avg);
  broadcast_floats(comm, &exp_avg_sq);
  adam->restore(steps, std::move(exp_avg), std::move(exp_avg_sq));
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
  log << "warning: " << resume << " was written by " << written_by << " rank(s) and this job has "
      << comm.size() << ": the shards are dealt anew and every rank starts its shards at epoch "
      << epoch << ", so the samples differ from a run that kept " << written_by
      << " rank(s); the global batch is now " << config.N_rand * config.accumulation_steps << " x "
      << comm.size() << " rays\n";
  return {epoch, 0};
}

// Every rank renders a band of the held-out view's rows; rank 0 puts the image together into
// `image` and scores it (the others return a view of -1).
ViewMetrics validate(IbrnetModel& model, const data::TrainingSample& sample, RandomKey key,
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
                         const dist::Communicator& comm, int device, size_t parameters,
                         size_t buckets) {
  std::ostringstream out;
  const dist::Topology& t = context.topology;
  out << "mvibr train: " << comm.size() << " rank(s) on " << t.hosts << " host(s) (" << t.local_size
      << " on " << (t.host.empty() ? "this host" : t.host) << "), backend "
      << (comm.size() > 1 || comm.backend() == "nccl" ? comm.backend() : "none") << ", "
      << (device >= 0 ? "GPU " + std::to_string(device) + " (" + cuda_device_description(device) +
                            ", " + name_of(c.precision) + " GEMMs)"
                      : std::string("CPU"))
      << "; global batch " << c.N_rand * c.accumulation_steps * comm.size() << " rays (N_rand "
      << c.N_rand << " x " << c.accumulation_steps << " micro-steps x " << comm.size()
      << " ranks); " << parameters << " parameters in " << buckets
      << " all-reduce bucket(s) of <= " << c.bucket_mb << " MB (" << name_of(c.allreduce_dtype)
      << ")";
  if (c.lr_scaling != LrScaling::kNone) out << "; learning rates x " << lr_factor(c, comm.size());
  out << "\n";
  return out.str();
}

// Busy times of ranks differing by more than this fraction of the fastest one's get a warning.
constexpr double kImbalanceWarning = 0.2;

// One monitored value: its TensorBoard tag and its metrics.jsonl key.
struct Scalar {
  const char* tag;
  const char* key;
  double value;
};

// Rank 0's record of the run: metrics.jsonl (one JSON object per line) and the event files, both
// written with every value, so scripts and TensorBoard see the same numbers.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& run_dir)
      : jsonl_(fs::path(run_dir) / "metrics.jsonl", std::ios::app),
        events_((fs::path(run_dir) / "tb").string()) {
    // Every digit of a double, so a script reads back the value that was logged.
    jsonl_.precision(17);
  }

  // `extra`: values for the JSON line alone (counts, not curves).
  void write(uint64_t step, const std::vector<Scalar>& scalars,
             const std::vector<std::pair<std::string, double>>& extra = {}) {
    std::vector<std::pair<std::string, double>> tagged;
    jsonl_ << "{\"step\": " << step;
    for (const Scalar& s : scalars) {
      jsonl_ << ", \"" << s.key << "\": " << s.value;
      tagged.emplace_back(s.tag, s.value);
    }
    for (const auto& [key, value] : extra) jsonl_ << ", \"" << key << "\": " << value;
    jsonl_ << "}\n" << std::flush;
    events_.scalars(step, tagged);
  }

  void image(const std::string& tag, uint64_t step, const RgbImage& image) {
    events_.image(tag, step, image);
  }

 private:
  std::ofstream jsonl_;
  EventWriter events_;
};

// The ranks' busy parts of an interval (every rank calls it), per update, on every rank.
std::vector<std::vector<std::pair<std::string, double>>> gather_busy_parts(
    dist::Communicator& comm, const IntervalTimes& interval) {
  std::vector<std::pair<std::string, double>> mine = interval.busy_parts();
  for (auto& part : mine) part.second /= double(std::max<uint64_t>(1, interval.steps));
  std::vector<double> values;
  for (const auto& part : mine) values.push_back(part.second);
  std::vector<double> all(values.size() * size_t(comm.size()));
  comm.all_gather(values.data(), values.size() * sizeof(double), all.data());
  std::vector<std::vector<std::pair<std::string, double>>> parts(size_t(comm.size()), mine);
  for (size_t r = 0; r < parts.size(); ++r) {
    for (size_t k = 0; k < mine.size(); ++k) parts[r][k].second = all[r * mine.size() + k];
  }
  return parts;
}

}  // namespace

nn::AdamOptions adam_options(const TrainConfig& c, int ranks) {
  nn::AdamOptions o;
  o.lrate_feature = c.lrate_feature * lr_factor(c, ranks);
  o.lrate_mlp = c.lrate_mlp * lr_factor(c, ranks);
  o.lrate_decay_factor = c.lrate_decay_factor;
  o.lrate_decay_steps = uint64_t(c.lrate_decay_steps);
  o.max_grad_norm = c.grad_clip;
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
  return o;
}

TrainSummary train(const TrainConfig& config, std::ostream& rank0_log, const RankContext& context) {
  std::unique_ptr<dist::Communicator> single;
  dist::Communicator* comm = context.comm;
  if (!comm) {
    single = dist::single_process_communicator();
    comm = single.get();
  }
  const int rank = comm->rank(), ranks = comm->size();
  NullBuffer null_buffer;
  std::ostream null_log(&null_buffer);
  std::ostream& log = rank == 0 ? rank0_log : null_log;

  // Declared before the watchdog, which aborts it on a stall: it outlives the watchdog's thread.
  std::unique_ptr<dist::Communicator> nccl;
  std::unique_ptr<dist::Watchdog> watchdog;
  if (context.on_stall && ranks > 1) {
    const std::string who = "rank " + std::to_string(rank) +
                            (context.topology.host.empty() ? "" : " on " + context.topology.host);
    watchdog = std::make_unique<dist::Watchdog>(
        config.watchdog_s,
        [who, handler = context.on_stall](const std::string& what) { handler(who + ": " + what); });
  }
  {
    dist::Watchdog::Scope watch(watchdog.get(), "the config check at start");
    dist::check_same_config(*comm, config.to_text());
  }

  TrainSummary summary;
  summary.run_dir = (fs::path(config.basedir) / config.expname).string();
  // fp16 GEMMs scale the loss (1 and never changed otherwise).
  const bool fp16 = config.precision == Precision::kFp16;
  DynamicLossScale loss_scale(fp16 ? config.loss_scale : 1.0, config.loss_scale_window);
  // A GPU rank drives device local_rank % devices, chosen before the model allocates on it.
  const int device = runs_on_device(config) ? dist::select_device(context.topology) : -1;
  IbrnetModel model(config);
  nn::ParameterSet& params = model.parameters();
  nn::Adam adam(params, adam_options(config, ranks));
  data::ReaderCursor cursor;
  {
    dist::Watchdog::Scope watch(watchdog.get(), "the parameter broadcast at start");
    cursor = restore_or_initialize(config, summary.run_dir, context.measure_only, *comm, &model,
                                   &adam, log);
    dist::check_same_parameters(*comm, params.values().data(), params.size(), "start");
  }
  summary.first_step = summary.last_step = adam.steps();

  std::vector<dist::GradientRange> ready_order;
  for (const ParameterRange& r : model.gradient_ready_order()) {
    ready_order.push_back({r.offset, r.count});
  }
  // GPU ranks all-reduce their gradients where they are, with NCCL on the device; the CPU ones,
  // and GPU ones asked for bf16 all-reduce (converted on the host), over MPI on the host.
  {
    dist::Watchdog::Scope watch(watchdog.get(), "the NCCL set-up at start");
    double device_ranks = model.on_device() ? 1 : 0;
    comm->all_reduce(&device_ranks, 1, dist::ReduceOp::kSum);
    if (device_ranks != 0 && device_ranks != ranks) {
      throw InvalidArgument("config key 'device': " + std::to_string(int(device_ranks)) + " of " +
                            std::to_string(ranks) + " ranks found a CUDA device (device = " +
                            name_of(config.device) + "); give every rank one, or set device = cpu");
    }
    // One GPU rank too: its reduction is a copy, and single-GPU runs take the multi-GPU path.
    if (model.on_device() && config.allreduce_dtype == AllreduceDtype::kFp32) {
      nccl = dist::make_nccl_communicator(*comm, device, config.watchdog_s);
      if (watchdog) watchdog->abort_on_stall(nccl.get());
    }
  }
  dist::GradientBuckets buckets(nccl ? *nccl : *comm, ready_order,
                                size_t(config.bucket_mb * 1024 * 1024), dist::ReduceOp::kSum,
                                config.overlap_allreduce,
                                config.allreduce_dtype == AllreduceDtype::kBf16);
  log << describe_job(config, context, nccl ? *nccl : *comm, device, params.size(),
                      buckets.buckets().size());

  data::PrefetchReader reader(reader_options(config, rank, ranks), cursor);
  // Validation renders one held-out view with a copy of the weights in a model of its own
  // (deterministic samples, its own buffers), so training continues exactly as without it.
  const std::optional<data::TrainingSample> heldout =
      context.measure_only ? std::nullopt : first_heldout_sample(config);
  std::unique_ptr<IbrnetModel> validation_model;
  if (heldout) {
    validation_model = std::make_unique<IbrnetModel>(evaluation_config(config));
  } else if (!context.measure_only) {
    log << "no test or val views in " << config.datadir << ": no held-out validation\n";
  }

  // The run directory is made only once every rank has checked its inputs (the config, the
  // checkpoint to start from, its shards): a job that fails at start leaves nothing behind.
  std::unique_ptr<RunDirectoryLock> run_lock;
  std::unique_ptr<MetricsLog> metrics;
  if (!context.measure_only) {
    {
      dist::Watchdog::Scope watch(watchdog.get(), "the input check at start");
      double ready = 1;
      comm->all_reduce(&ready, 1, dist::ReduceOp::kSum);
    }
    on_root(*comm, [&] {
      run_lock = std::make_unique<RunDirectoryLock>(summary.run_dir, log);
      std::ofstream(fs::path(summary.run_dir) / "config.txt") << config.to_text();
      metrics = std::make_unique<MetricsLog>(summary.run_dir);
    });
  }
  if (const auto after = run_lock ? read_stop_request(summary.run_dir, log) : std::nullopt) {
    log << "a stop request waits in " << stop_request_path(summary.run_dir) << ": stopping after "
        << "step " << std::max(*after, summary.first_step + 1) << "\n";
  }

  const uint64_t rays_per_update =
      uint64_t(config.N_rand) * uint64_t(config.accumulation_steps) * uint64_t(ranks);
  Progress progress(log, rank == 0 ? context.progress_columns : 0, summary.first_step,
                    uint64_t(config.n_iters), double(rays_per_update));
  IntervalTimes interval;  // since the last i_print
  uint64_t logged_step = summary.first_step;
  int consecutive_skips = 0;
  while (adam.steps() < uint64_t(config.n_iters)) {
    const uint64_t step = adam.steps();
    const std::string step_name = "step " + std::to_string(step + 1);
    const RandomKey key{config.seed, step};
    StepReport report;
    const auto step_start = std::chrono::steady_clock::now();
    const double waited_before = reader.wait_seconds();
    const data::TrainingSample sample = reader.next();
    report.data_wait = reader.wait_seconds() - waited_before;
    params.zero_grads();
    model.set_loss_scale(loss_scale.scale());
    model.begin_step(sample);
    RaySums sums;
    for (int m = 0; m < config.accumulation_steps; ++m) {
      const uint32_t first_ray = uint32_t((rank * config.accumulation_steps + m) * config.N_rand);
      const RayBatch rays = select_rays(sample.target, config.N_rand, config.sample_mode,
                                        config.center_ratio, key, first_ray);
      sums += model.accumulate(rays, key, first_ray);
    }
    // The loss sums, and whether a rank was asked to stop: by a signal (its number) or, on rank
    // 0, by a stop request due after this step (kStopRequested, above every signal's number).
    const int signal = context.stop_signal ? context.stop_signal->load() : 0;
    const bool requested = run_lock && stop_request_due(summary.run_dir, step + 1, log);
    double global[5] = {sums.squared_error_coarse, sums.squared_error_fine, sums.valid_coarse,
                        sums.valid_fine, double(requested ? kStopRequested : signal)};
    {
      dist::Watchdog::Scope watch(watchdog.get(), "the loss all-reduce of " + step_name);
      const auto reduce_start = std::chrono::steady_clock::now();
      comm->all_reduce(global, 4, dist::ReduceOp::kSum);
      comm->all_reduce(global + 4, 1, dist::ReduceOp::kMax);
      report.loss_allreduce = seconds_since(reduce_start);
    }
    const int stop_reason = int(global[4]);
    const double coarse_denominator = masked_mse_denominator(global[2]);
    const double fine_denominator = masked_mse_denominator(global[3]);
    const auto mark_ready = [&](ParameterRange r) { buckets.mark_ready(r.offset, r.count); };
    {
      // Without overlap the buckets are reduced inline, in the backward pass: watched with it.
      dist::Watchdog::Scope watch(config.overlap_allreduce ? nullptr : watchdog.get(),
                                  "the backward pass and gradient all-reduce of " + step_name);
      if (nccl) {
        buckets.begin(model.device_gradients());
        model.end_step_on_device(coarse_denominator, fine_denominator, mark_ready);
      } else {
        buckets.begin(params.grads().data());
        model.end_step(coarse_denominator, fine_denominator, mark_ready);
      }
    }
    {
      dist::Watchdog::Scope watch(config.overlap_allreduce ? watchdog.get() : nullptr,
                                  "the gradient all-reduce of " + step_name);
      buckets.finish();
    }
    if (nccl) model.gradients_to_host();
    report.allreduce = buckets.communication_seconds();
    report.allreduce_exposed = buckets.exposed_seconds();
    const auto optimizer_start = std::chrono::steady_clock::now();

    StepResult result;
    result.mse_coarse = global[0] / coarse_denominator;
    result.mse_fine = global[1] / fine_denominator;
    result.loss = result.mse_coarse + result.mse_fine;
    const bool fine = !config.coarse_only && config.N_importance > 0;
    result.psnr = mse_to_psnr(fine ? result.mse_fine : result.mse_coarse);
    result.valid_rays = int(fine ? global[3] : global[2]);
    // Every rank holds the same summed loss and gradients, so all decide alike.
    const double norm = nn::global_grad_norm(params.grads().data(), params.size());
    // fp16: gradients that overflowed at this loss scale skip the update at half the scale, as
    // GradScaler does; below a scale of 1 they are not an overflow but a failure.
    if (fp16 && std::isfinite(result.loss) && !std::isfinite(norm) && loss_scale.scale() >= 1) {
      loss_scale.update(false);
      progress.print("note: " + step_name + ": fp16 gradients overflowed; update skipped, loss " +
                     "scale now " + std::to_string(loss_scale.scale()) + "\n");
      continue;
    }
    if (fp16) loss_scale.update(std::isfinite(norm));
    if (!std::isfinite(result.loss) || !std::isfinite(norm)) {
      const std::string what = step_name + ": the " +
                               (std::isfinite(result.loss) ? "gradient" : "loss") +
                               " is not finite (loss " + std::to_string(result.loss) +
                               ", gradient norm " + std::to_string(norm) + ")";
      if (config.nan_policy == NanPolicy::kStop) {
        nn::TrainingState state{config.to_text(), all_cursors(*comm, reader.cursor()), config.seed};
        std::string written;
        on_root(*comm, [&] {
          written =
              nn::save_checkpoint(summary.run_dir, params, adam, state, config.keep_checkpoints);
        });
        throw RuntimeFailure(what + "; stopped after writing the last good state to " +
                             (rank == 0 ? written : "rank 0's run directory"));
      }
      ++summary.skipped_steps;
      progress.print("warning: " + what + "; update skipped\n");
      if (++consecutive_skips >= 10) {
        throw RuntimeFailure(what + "; 10 updates in a row skipped, stopping");
      }
      continue;
    }
    consecutive_skips = 0;
    adam.step(&params, norm);
    const uint64_t done = adam.steps();
    report.step = done;
    report.optimizer = seconds_since(optimizer_start);
    report.seconds = seconds_since(step_start);
    report.phases = model.phase_times();
    report.loss = result.loss;
    report.psnr = result.psnr;
    if (context.on_step) context.on_step(report);
    interval.add(report);
    progress.update(done, result.loss, result.psnr);
    summary.last_step = done;
    summary.last_loss = result.loss;
    summary.last_psnr = result.psnr;

    if (done % uint64_t(config.i_print) == 0 || done == uint64_t(config.n_iters)) {
      {
        dist::Watchdog::Scope watch(watchdog.get(), "the parameter check of " + step_name);
        dist::check_same_parameters(*comm, params.values().data(), params.size(), step_name);
      }
      std::vector<std::vector<std::pair<std::string, double>>> parts;
      {
        dist::Watchdog::Scope watch(watchdog.get(), "the time gathering of " + step_name);
        parts = gather_busy_parts(*comm, interval);
      }
      const Imbalance balance = assess_imbalance(parts);
      double data_wait = 0;  // the rank that waited longest for its reader
      for (const auto& rank_parts : parts) data_wait = std::max(data_wait, rank_parts[0].second);
      const double steps = double(interval.steps);
      const double step_seconds = interval.seconds / steps;
      const double rays_per_second = double(rays_per_update) / step_seconds;
      const double data_wait_fraction = data_wait / step_seconds;
      const double allreduce_fraction = interval.allreduce / interval.seconds;
      const double hidden =
          interval.allreduce > 0
              ? 1.0 - std::min(1.0, interval.allreduce_exposed / interval.allreduce)
              : 0;
      if (!progress.in_place()) {
        char line[320];
        std::snprintf(line, sizeof(line),
                      "step %llu/%d  loss %.5f  psnr %.2f  rays/s %.0f  data wait %.1f%%  "
                      "all-reduce %.1f%% (%.0f%% hidden)  eta %.0f s\n",
                      (unsigned long long)done, config.n_iters, result.loss, result.psnr,
                      rays_per_second, 100.0 * data_wait_fraction, 100.0 * allreduce_fraction,
                      100.0 * hidden, progress.eta_seconds(done));
        log << line << std::flush;
      }
      const std::string warning =
          imbalance_warning(balance, kImbalanceWarning, logged_step + 1, done);
      if (!warning.empty()) progress.print(warning);
      if (metrics) {
        metrics->write(
            done,
            {{"loss/total", "loss", result.loss},
             {"loss/coarse", "mse_coarse", result.mse_coarse},
             {"loss/fine", "mse_fine", result.mse_fine},
             {"train/psnr", "psnr", result.psnr},
             {"train/grad_norm", "grad_norm", norm},
             {"lr/feature", "lr_feature", adam.learning_rate(nn::ParameterGroup::kFeature)},
             {"lr/mlp", "lr_mlp", adam.learning_rate(nn::ParameterGroup::kMlp)},
             {"throughput/rays_per_second", "rays_per_second", rays_per_second},
             {"throughput/steps_per_second", "steps_per_second", 1.0 / step_seconds},
             {"time/step_seconds", "step_seconds", step_seconds},
             {"time/data_wait_fraction", "data_wait_fraction", data_wait_fraction},
             {"time/busy_seconds_min", "busy_seconds_min", balance.busy_min},
             {"time/busy_seconds_max", "busy_seconds_max", balance.busy_max},
             {"time/imbalance", "imbalance", balance.imbalance},
             {"allreduce/seconds", "allreduce_seconds", interval.allreduce / steps},
             {"allreduce/exposed_seconds", "allreduce_exposed_seconds",
              interval.allreduce_exposed / steps},
             {"allreduce/hidden_fraction", "allreduce_hidden_fraction", hidden}},
            {{"valid_rays", result.valid_rays},
             {"ranks", ranks},
             {"slowest_rank", balance.slow_rank},
             {"interval_steps", steps}});
      }
      interval = IntervalTimes{};
      logged_step = done;
    }
    if (heldout && done % uint64_t(config.i_img) == 0) {
      validation_model->parameters().values() = params.values();
      progress.print("step " + std::to_string(done) + "/" + std::to_string(config.n_iters) +
                     "  validating (every i_img = " + std::to_string(config.i_img) +
                     " steps): rendering held-out view " + std::to_string(heldout->target_view) +
                     ", " + std::to_string(heldout->target.camera.width) + "x" +
                     std::to_string(heldout->target.camera.height) + " pixels\n");
      ViewMetrics m;
      RgbImage rendered;
      {
        dist::Watchdog::Scope watch(watchdog.get(), "the validation of " + step_name);
        m = validate(*validation_model, *heldout, RandomKey{config.seed, 0}, *comm, &rendered);
      }
      if (rank == 0) {
        summary.heldout_psnr = m.psnr;
        summary.heldout_ssim = m.ssim;
        char line[256];
        std::snprintf(line, sizeof(line), "step %llu/%d  held-out view %d  psnr %.2f  ssim %.4f\n",
                      (unsigned long long)done, config.n_iters, m.view, m.psnr, m.ssim);
        progress.print(line);
        metrics->write(done, {{"heldout/psnr", "heldout_psnr", m.psnr},
                              {"heldout/ssim", "heldout_ssim", m.ssim}});
        metrics->image("heldout/rgb", done, rendered);
      }
    }
    if (!context.measure_only && (stop_reason != 0 || done % uint64_t(config.i_weights) == 0 ||
                                  done == uint64_t(config.n_iters))) {
      dist::Watchdog::Scope watch(watchdog.get(), "the checkpoint of " + step_name);
      const nn::TrainingState state{config.to_text(), all_cursors(*comm, reader.cursor()),
                                    config.seed};
      on_root(*comm, [&] {
        summary.last_checkpoint =
            nn::save_checkpoint(summary.run_dir, params, adam, state, config.keep_checkpoints);
      });
    }
    if (stop_reason != 0 && done < uint64_t(config.n_iters)) {
      summary.stopped_by = stop_reason == kStopRequested
                               ? "the stop request " + stop_request_path(summary.run_dir)
                               : signal_name(stop_reason);
      progress.print("stopping at step " + std::to_string(done) + " on " + summary.stopped_by +
                     "; checkpoint " + summary.last_checkpoint + "\n");
      break;
    }
  }
  // The request is answered: the run stopped on it, or ended while it was due.
  if (run_lock && stop_request_due(summary.run_dir, summary.last_step, log)) {
    clear_stop_request(summary.run_dir);
  }
  return summary;
}

}  // namespace mvibr::train
