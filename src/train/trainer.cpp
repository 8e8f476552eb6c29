// The single-process training loop (see trainer.h).
#include "mvibr/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>

#include "mvibr/core/error.h"
#include "mvibr/nn/checkpoint.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/ibrnet_model.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

nn::AdamOptions adam_options(const TrainConfig& c) {
  nn::AdamOptions o;
  o.lrate_feature = c.lrate_feature;
  o.lrate_mlp = c.lrate_mlp;
  o.lrate_decay_factor = c.lrate_decay_factor;
  o.lrate_decay_steps = uint64_t(c.lrate_decay_steps);
  o.max_grad_norm = c.grad_clip;
  return o;
}

data::ReaderOptions reader_options(const TrainConfig& c) {
  data::ReaderOptions o;
  o.data_dir = c.datadir;
  o.seed = c.seed;
  o.num_source_views = c.num_source_views;
  o.source_pool = c.source_pool;
  o.queue_depth = c.queue_depth;
  o.split = data::Split::kTrain;
  return o;
}

// Which checkpoint to resume from: ckpt_path, else the run's newest unless no_reload.
std::string resume_path(const TrainConfig& c, const std::string& run_dir) {
  if (!c.ckpt_path.empty()) {
    if (!fs::exists(c.ckpt_path)) throw InvalidArgument(c.ckpt_path + ": no such checkpoint");
    return c.ckpt_path;
  }
  return c.no_reload ? "" : nn::latest_checkpoint(run_dir);
}

}  // namespace

TrainSummary train(const TrainConfig& config, std::ostream& log) {
  TrainSummary summary;
  summary.run_dir = (fs::path(config.basedir) / config.expname).string();
  fs::create_directories(summary.run_dir);
  std::ofstream(fs::path(summary.run_dir) / "config.txt") << config.to_text();

  IbrnetModel model(config);
  nn::ParameterSet& params = model.parameters();
  nn::Adam adam(params, adam_options(config));
  nn::TrainingState state;
  data::ReaderCursor cursor;
  const std::string resume = resume_path(config, summary.run_dir);
  if (resume.empty()) {
    model.initialize(config.seed);
  } else {
    nn::load_checkpoint(resume, &params, &adam, &state);
    if (state.cursors.size() != 1) {
      throw InvalidArgument(resume + ": written by " + std::to_string(state.cursors.size()) +
                            " ranks; this run has 1");
    }
    cursor = state.cursors[0];
    log << "resuming from " << resume << " at step " << adam.steps() << "\n";
  }
  summary.first_step = summary.last_step = adam.steps();

  data::PrefetchReader reader(reader_options(config), cursor);
  std::ofstream metrics(fs::path(summary.run_dir) / "metrics.jsonl", std::ios::app);
  // Validation renders one held-out view with a copy of the weights in a model of its own
  // (deterministic samples, its own buffers), so training continues exactly as without it.
  const std::optional<data::TrainingSample> heldout = first_heldout_sample(config);
  std::unique_ptr<IbrnetModel> validation_model;
  if (heldout) {
    validation_model = std::make_unique<IbrnetModel>(evaluation_config(config));
  } else {
    log << "no test or val views in " << config.datadir << ": no held-out validation\n";
  }
  const auto start = std::chrono::steady_clock::now();
  while (adam.steps() < uint64_t(config.n_iters)) {
    const uint64_t step = adam.steps();
    const RandomKey key{config.seed, step};
    const data::TrainingSample sample = reader.next();
    const RayBatch rays =
        select_rays(sample.target, config.N_rand, config.sample_mode, config.center_ratio, key, 0);
    params.zero_grads();
    const StepResult result = model.train_step(sample, rays, key, 0);
    if (!std::isfinite(result.loss)) {
      throw RuntimeFailure("step " + std::to_string(step + 1) + ": the loss is not finite");
    }
    const double grad_norm = adam.step(&params);
    const uint64_t done = adam.steps();
    summary.last_step = done;
    summary.last_loss = result.loss;
    summary.last_psnr = result.psnr;

    if (done % uint64_t(config.i_print) == 0 || done == uint64_t(config.n_iters)) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double steps_per_second = double(done - summary.first_step) / seconds;
      const double eta = double(uint64_t(config.n_iters) - done) / steps_per_second;
      char line[256];
      std::snprintf(line, sizeof(line),
                    "step %llu/%d  loss %.5f  psnr %.2f  rays/s %.0f  data wait %.1f%%  "
                    "eta %.0f s\n",
                    (unsigned long long)done, config.n_iters, result.loss, result.psnr,
                    steps_per_second * config.N_rand, 100.0 * reader.wait_seconds() / seconds, eta);
      log << line << std::flush;
      metrics << "{\"step\": " << done << ", \"loss\": " << result.loss
              << ", \"mse_coarse\": " << result.mse_coarse << ", \"mse_fine\": " << result.mse_fine
              << ", \"psnr\": " << result.psnr << ", \"grad_norm\": " << grad_norm
              << ", \"lr_feature\": " << adam.learning_rate(nn::ParameterGroup::kFeature)
              << ", \"lr_mlp\": " << adam.learning_rate(nn::ParameterGroup::kMlp)
              << ", \"rays_per_second\": " << steps_per_second * config.N_rand
              << ", \"valid_rays\": " << result.valid_rays << "}\n"
              << std::flush;
    }
    if (heldout && (done % uint64_t(config.i_img) == 0 || done == uint64_t(config.n_iters))) {
      validation_model->parameters().values() = params.values();
      const ViewMetrics m = evaluate_view(*validation_model, *heldout, RandomKey{config.seed, 0});
      summary.heldout_psnr = m.psnr;
      summary.heldout_ssim = m.ssim;
      char line[256];
      std::snprintf(line, sizeof(line), "step %llu/%d  held-out view %d  psnr %.2f  ssim %.4f\n",
                    (unsigned long long)done, config.n_iters, m.view, m.psnr, m.ssim);
      log << line << std::flush;
      metrics << "{\"step\": " << done << ", \"heldout_psnr\": " << m.psnr
              << ", \"heldout_ssim\": " << m.ssim << "}\n"
              << std::flush;
    }
    if (done % uint64_t(config.i_weights) == 0 || done == uint64_t(config.n_iters)) {
      state.config = config.to_text();
      state.cursors = {reader.cursor()};
      state.random_seed = config.seed;
      summary.last_checkpoint =
          nn::save_checkpoint(summary.run_dir, params, adam, state, config.keep_checkpoints);
    }
  }
  return summary;
}

}  // namespace mvibr::train
