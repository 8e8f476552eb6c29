// mvibr's side of bench/train_step_vs_pytorch.sh: IBRNet's whole training step (train_step and
// Adam's step) on one sample of a prepared data set and one ray batch, repeated, with the
// median seconds of every phase (PhaseTimes) and of the optimizer. Prints one JSON object.
// `--write_case DIR` first writes the step's case folder (test/reference/ibrnet_model_case.h)
// for bench/ibrnet_torch_step.py, which then runs the identical steps in PyTorch.
//   train_step_bench --config FILE [--key value ...] [--warmup W] [--steps N] [--write_case DIR]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ibrnet_model_case.h"
#include "mvibr/core/error.h"
#include "mvibr/core/stopwatch.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/config.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/ray_batch.h"
#include "mvibr/train/trainer.h"
#include "step_bench.h"

namespace mvibr {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int warmup = 1, steps = 5;
  std::string case_dir;
};

// Takes this program's own options out of `args`; the rest are the training config's.
BenchOptions take_bench_options(std::vector<std::string>* args) {
  BenchOptions o;
  if (const auto v = bench::take_option(args, "--warmup")) o.warmup = std::stoi(*v);
  if (const auto v = bench::take_option(args, "--steps")) o.steps = std::stoi(*v);
  if (const auto v = bench::take_option(args, "--write_case")) o.case_dir = *v;
  if (o.warmup < 0 || o.steps < 1) throw InvalidArgument("--warmup >= 0 and --steps >= 1");
  return o;
}

// The first training sample of the config's data set, as `mvibr train` reads it.
data::TrainingSample first_sample(const train::TrainConfig& c) {
  data::ReaderOptions o = train::reader_options(c, 0, 1);
  o.queue_depth = 1;
  data::PrefetchReader reader(o);
  return reader.next();
}

int run(std::vector<std::string> args) {
  const BenchOptions bench = take_bench_options(&args);
  train::TrainConfig config;
  if (!train::parse_train_config(args, &config)) return 0;  // --help
  const data::TrainingSample sample = first_sample(config);
  const RandomKey key{config.seed, 0};
  const train::RayBatch rays = train::select_rays(sample.target, config.N_rand, config.sample_mode,
                                                  config.center_ratio, key, 0);
  train::IbrnetModel model(config);
  model.initialize(config.seed);
  if (!bench.case_dir.empty()) {
    test::write_model_case(config, model, sample, rays, key, bench.case_dir);
  }
  model.configure_optimizer(train::adam_options(config, 1));

  std::map<std::string, std::vector<double>> phases;
  std::vector<double> step_seconds;
  double loss_first = 0, loss_last = 0;
  int valid_rays = 0;
  for (int i = 0; i < bench.warmup + bench.steps; ++i) {
    // As `mvibr train` runs a step: the model zeroes its gradients in the step, then the
    // optimizer takes the gradient norm and updates where the state lives.
    const Clock::time_point start = Clock::now();
    const train::StepResult result = model.train_step(sample, rays, key, 0);
    const Clock::time_point optimizer_start = Clock::now();
    model.update(model.gradient_norm());
    const double optimizer = seconds_since(optimizer_start);
    const double step = seconds_since(start);
    if (i == 0) loss_first = result.loss;
    loss_last = result.loss;
    valid_rays = result.valid_rays;
    if (i < bench.warmup) continue;
    step_seconds.push_back(step);
    for (const auto& [name, seconds] : result.times.named()) phases[name].push_back(seconds);
    phases["optimizer"].push_back(optimizer);
  }

  nlohmann::ordered_json phase_medians;
  for (const char* name : train::kIbrnetPhases) {
    if (name) phase_medians[name] = bench::median(phases[name]);
  }
  phase_medians["optimizer"] = bench::median(phases["optimizer"]);
  const double step = bench::median(step_seconds);
  nlohmann::ordered_json described = bench::case_json(config, sample);
  described["num_source_views"] = int(sample.sources.size());
  described["fine_feat_dim"] = config.fine_feat_dim;
  described["N_importance"] = config.N_importance;
  described["inv_uniform"] = config.inv_uniform;
  nlohmann::ordered_json out = {{"impl", "mvibr"},
                                {"threads", omp_get_max_threads()},
                                {"device", model.on_device() ? "cuda" : "cpu"},
                                {"precision", name_of(config.precision)},
                                {"warmup", bench.warmup},
                                {"steps", bench.steps},
                                {"step_seconds", step},
                                {"steps_per_second", 1.0 / step},
                                {"rays_per_second", config.N_rand / step},
                                {"phases", phase_medians},
                                {"loss_first", loss_first},
                                {"loss_last", loss_last},
                                {"valid_rays", valid_rays},
                                {"config", described}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace mvibr

int main(int argc, char** argv) {
  return mvibr::bench::run_main("train_step_bench", argc, argv, mvibr::run);
}
