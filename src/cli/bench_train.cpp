// `mvibr bench train`: steady-state training updates of a config (the real training loop, without
// validation, checkpoints or files): steps and rays (the pose model's instants) per second, the
// time of each phase, how much all-reduce the backward pass hid, the imbalance between ranks and
// each rank's peak memory.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "bench.h"
#include "mvibr/core/error.h"
#include "mvibr/train/config.h"
#include "mvibr/train/monitor.h"
#include "mvibr/train/trainer.h"

namespace po = boost::program_options;

namespace mvibr::cli {

int run_train_bench(const std::vector<std::string>& args) {
  int warmup = 3, steps = 10;
  std::string out;
  po::options_description options("mvibr bench train (also every `mvibr train` key)");
  options.add_options()("warmup", po::value(&warmup)->default_value(warmup),
                        "updates before measuring")(
      "steps", po::value(&steps)->default_value(steps), "measured updates")(
      "json", "one JSON object instead of the table")("out", po::value(&out),
                                                      "also write the JSON object to this file");
  po::variables_map vm;
  std::vector<std::string> train_args;
  try {
    const po::parsed_options parsed =
        po::command_line_parser(args).options(options).allow_unregistered().run();
    po::store(parsed, vm);
    po::notify(vm);
    train_args = po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    throw InvalidArgument(std::string("command line: ") + e.what());
  }
  if (std::find(train_args.begin(), train_args.end(), "--help") != train_args.end()) {
    std::cout << "usage: mvibr bench train --config FILE [--key value ...] [options] (under "
                 "mpirun or srun)\n\n"
              << options << "\n";
  }
  train::TrainConfig config;
  if (!train::parse_train_config(train_args, &config)) return 0;
  if (warmup < 0 || steps < 1) throw InvalidArgument("--warmup must be >= 0 and --steps >= 1");
  config.n_iters = warmup + steps;
  config.i_print = config.n_iters;  // one log line, at the end

  dist::MpiSession mpi(nullptr, nullptr);
  const auto comm = mpi.world();
  const dist::Topology& t = mpi.topology();
  train::IntervalTimes measured;
  train::StepWork work{"rays", 0};
  train::RankContext context;
  context.comm = comm.get();
  context.topology = t;
  context.measure_only = true;
  context.on_step = [&](const train::StepReport& r) {
    if (r.step > uint64_t(warmup)) measured.add(r);
    work = r.work;
  };
  std::ostringstream log;
  train::train(config, log, context);

  // Per update: the means of the measured steps, and every rank's busy time (monitor.h).
  const double n = double(std::max<uint64_t>(1, measured.steps));
  const std::vector<double> busy_seconds = dist::all_gather_value(*comm, measured.busy() / n);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::vector<double> peak_mb = dist::all_gather_value(*comm, double(usage.ru_maxrss) / 1024);
  if (t.rank != 0) return 0;

  const train::JobBackend backend = train::job_backend(config, *comm, t);
  const train::Imbalance balance = train::busy_imbalance(busy_seconds);
  const double step = measured.seconds / n;
  // What an update works through: rays, or the pose model's instants (StepWork).
  const std::string unit = work.unit;
  const double batch = double(work.per_rank_step) * t.size;
  const double allreduce = measured.allreduce / n;
  nlohmann::json j = result_header("train", t);
  j["threads_per_rank"] = omp_get_max_threads();
  j["backend"] = backend.reduction;
  j["device"] = backend.device >= 0 ? "cuda " + backend.device_description : "cpu";
  j["precision"] = name_of(backend.precision);
  const bool rays = unit == "rays";
  j["config"] = {{"model", name_of(config.model)},
                 {"accumulation_steps", config.accumulation_steps},
                 {"feature_net", name_of(config.feature_net)},
                 {"datadir", config.datadir}};
  if (rays) {
    j["config"].update({{"N_rand", config.N_rand},
                        {"N_samples", config.N_samples},
                        {"N_importance", config.N_importance},
                        {"num_source_views", config.num_source_views},
                        {"coarse_feat_dim", config.coarse_feat_dim},
                        {"fine_feat_dim", config.fine_feat_dim}});
  } else {
    j["config"]["pose_batch"] = config.pose_batch;
  }
  j["batch_unit"] = unit;
  j["global_batch_" + unit] = batch;
  j["warmup"] = warmup;
  j["steps"] = steps;
  j["step_seconds"] = step;
  j["steps_per_second"] = 1.0 / step;
  j[unit + "_per_second"] = batch / step;
  j[unit + "_per_second_per_rank"] = batch / step / t.size;
  if (rays) j["samples_per_second"] = batch * (config.N_samples + config.N_importance) / step;
  j["phases_rank0"] = nlohmann::json::object();
  for (const auto& [name, seconds] : measured.timed_parts()) j["phases_rank0"][name] = seconds / n;
  j["allreduce_seconds"] = allreduce;
  j["allreduce_hidden_fraction"] = measured.allreduce_hidden_fraction();
  j["busy_seconds_per_rank"] = busy_seconds;
  j["slowest_rank"] = balance.slow_rank;
  j["imbalance"] = balance.imbalance;
  j["peak_rss_mb_per_rank"] = peak_mb;
  write_results({j}, out, vm.count("json") > 0);
  if (vm.count("json")) return 0;
  std::printf(
      "mvibr bench train: %d rank(s) on %d host(s), %d thread(s) each, global batch %.0f "
      "%s, %d measured steps after %d\n",
      t.size, t.hosts, omp_get_max_threads(), batch, unit.c_str(), steps, warmup);
  std::printf(
      "  %.3f steps/s   %.0f %s/s   %.0f %s/s per rank   imbalance %.1f%% (slowest "
      "rank %d)\n",
      1.0 / step, batch / step, unit.c_str(), batch / step / t.size, unit.c_str(),
      100.0 * balance.imbalance, balance.slow_rank);
  std::printf("  rank 0's step, %.4f s:\n", step);
  for (const auto& [name, seconds] : measured.timed_parts()) {
    std::printf("    %-22s %9.4f s  %5.1f%%\n", name.c_str(), seconds / n,
                100.0 * seconds / measured.seconds);
  }
  std::printf("  all-reduce %.4f s per step, %.0f%% hidden behind the backward pass\n", allreduce,
              100.0 * measured.allreduce_hidden_fraction());
  return 0;
}

}  // namespace mvibr::cli
