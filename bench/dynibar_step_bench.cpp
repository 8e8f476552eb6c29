// mvibr's side of bench/dynibar_step_vs_pytorch.sh: DynIBaR's training step (forward and
// backward of one micro-batch: begin_step, accumulate, end_step) on one sample of a prepared
// video, repeated from the same weights, with the median seconds of the step and of every phase
// (PhaseTimes). Prints one JSON object. The model starts at update --step (default: the first of
// the main loop, where every part trains). `--write_case DIR` first writes the step's case folder
// (test/reference/dynibar_model_case.h) for bench/dynibar_torch_step.py.
//   dynibar_step_bench --config FILE [--key value ...] [--warmup W] [--steps N] [--step S]
//                      [--write_case DIR]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dynibar_model_case.h"
#include "mvibr/core/error.h"
#include "mvibr/core/stopwatch.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/train/config.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/trainer.h"
#include "step_bench.h"

namespace mvibr {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int warmup = 1, steps = 5;
  long long step = -1;  // -1: the main loop's first update
  std::string case_dir;
};

// Takes this program's own options out of `args`; the rest are the training config's.
BenchOptions take_bench_options(std::vector<std::string>* args) {
  BenchOptions o;
  if (const auto v = bench::take_option(args, "--warmup")) o.warmup = std::stoi(*v);
  if (const auto v = bench::take_option(args, "--steps")) o.steps = std::stoi(*v);
  if (const auto v = bench::take_option(args, "--step")) o.step = std::stoll(*v);
  if (const auto v = bench::take_option(args, "--write_case")) o.case_dir = *v;
  if (o.warmup < 0 || o.steps < 1) throw InvalidArgument("--warmup >= 0 and --steps >= 1");
  return o;
}

// The first training sample of the video whose six dynamic sources are all there.
data::TrainingSample full_sample(const train::TrainConfig& c) {
  data::ReaderOptions o = train::reader_options(c, 0, 1);
  o.queue_depth = 1;
  o.shuffle = false;
  data::PrefetchReader reader(o);
  for (size_t i = 0; i < reader.samples_per_epoch(); ++i) {
    data::TrainingSample s = reader.next();
    if (std::count(s.dynibar->dynamic.begin(), s.dynibar->dynamic.end(), -1) == 0) return s;
  }
  throw InvalidArgument(c.datadir + ": no target has all six dynamic sources");
}

int run(std::vector<std::string> args) {
  const BenchOptions bench = take_bench_options(&args);
  train::TrainConfig parsed;
  if (!train::parse_train_config(args, &parsed)) return 0;  // --help
  if (parsed.model != train::ModelKind::kDynibar) {
    throw InvalidArgument("the config must train DynIBaR (model = dynibar)");
  }
  const train::TrainConfig config = train::with_video_frames(parsed);
  const data::TrainingSample sample = full_sample(config);
  const RandomKey key{config.seed, 0};
  train::DynibarModel model(config);
  model.initialize(config.seed);
  const uint64_t step =
      bench.step >= 0 ? uint64_t(bench.step)
                      : uint64_t(dynibar_bootstrap_steps(train::dynibar_schedule_options(config)));
  nn::Adam& adam = model.optimizer();
  adam.restore(step, adam.exp_avg(), adam.exp_avg_sq());
  if (!bench.case_dir.empty()) test::write_dynibar_case(config, model, sample, key, bench.case_dir);

  std::map<std::string, std::vector<double>> phases;
  std::vector<double> step_seconds;
  double loss = 0;
  int valid_rays = 0;
  for (int i = 0; i < bench.warmup + bench.steps; ++i) {
    const Clock::time_point start = Clock::now();
    model.begin_step(sample);
    const train::LossSums sums = model.accumulate(key, 0);
    const train::StepResult result = model.end_step(sums, {});
    const double seconds = seconds_since(start);
    loss = result.loss;
    valid_rays = result.valid_rays;
    if (i < bench.warmup) continue;
    step_seconds.push_back(seconds);
    for (const auto& [name, s] : result.times.named()) phases[name].push_back(s);
  }
  nlohmann::ordered_json phase_medians;
  for (const char* name : train::kDynibarPhases) phase_medians[name] = bench::median(phases[name]);
  const double median_step = bench::median(step_seconds);
  nlohmann::ordered_json described = bench::case_json(config, sample);
  described["sources"] = int(sample.sources.size());
  const nlohmann::ordered_json out = {{"impl", "mvibr"},
                                      {"threads", omp_get_max_threads()},
                                      {"update", step},
                                      {"warmup", bench.warmup},
                                      {"steps", bench.steps},
                                      {"step_seconds", median_step},
                                      {"rays_per_second", config.N_rand / median_step},
                                      {"phases", phase_medians},
                                      {"loss", loss},
                                      {"valid_rays", valid_rays},
                                      {"config", described}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace mvibr

int main(int argc, char** argv) {
  return mvibr::bench::run_main("dynibar_step_bench", argc, argv, mvibr::run);
}
