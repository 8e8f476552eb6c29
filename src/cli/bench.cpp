// `mvibr bench <what>`: measurements under the launcher the job will use. `allreduce`: the
// all-reduce bandwidth of the job's communicator from 1 KB to 256 MB as nccl-tests reports it (a
// table on rank 0, or one JSON object per size with --json). `train`: steady-state training
// updates of a config (the real training loop, without validation, checkpoints or files): steps
// and rays per second, the time of each phase, how much all-reduce the backward pass hid, the
// imbalance between ranks and each rank's peak memory; one JSON object with --json / --out, so
// results of many jobs can be put together.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "mvibr/build_info.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/allreduce_benchmark.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/dist/nccl_communicator.h"
#include "mvibr/train/config.h"
#include "mvibr/train/trainer.h"

namespace po = boost::program_options;

namespace mvibr::cli {

namespace {

// "4096", "1K", "256M", "1G" (binary multiples).
size_t parse_bytes(const std::string& text, const std::string& key) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    throw InvalidArgument("--" + key + ": not a size: '" + text + "'");
  }
  const std::string suffix = text.substr(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M")
    scale = 1024.0 * 1024;
  else if (suffix == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    throw InvalidArgument("--" + key + ": unknown unit in '" + text + "'");
  if (!(value > 0)) throw InvalidArgument("--" + key + ": must be positive, got '" + text + "'");
  return size_t(value * scale);
}

int run_allreduce(const std::vector<std::string>& args) {
  std::string min_text = "1K", max_text = "256M", backend = "mpi";
  int warmup = 5, iterations = 20;
  po::options_description options("mvibr bench allreduce");
  options.add_options()("help,h", "print this help")(
      "min_bytes", po::value(&min_text)->default_value(min_text), "smallest message (K, M, G)")(
      "max_bytes", po::value(&max_text)->default_value(max_text), "largest message")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed all-reduces per size")(
      "iters", po::value(&iterations)->default_value(iterations), "timed all-reduces per size")(
      "backend", po::value(&backend)->default_value(backend),
      "mpi (host memory) | nccl (device memory, one GPU per rank)")(
      "json", "one JSON object per size instead of the table");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(std::string("command line: ") + e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: mvibr bench allreduce [options] (under mpirun or srun)\n\n" << options;
    return 0;
  }
  const size_t min_bytes = parse_bytes(min_text, "min_bytes");
  const size_t max_bytes = parse_bytes(max_text, "max_bytes");

  if (backend != "mpi" && backend != "nccl") {
    throw InvalidArgument("--backend must be mpi or nccl, got '" + backend + "'");
  }

  dist::MpiSession mpi(nullptr, nullptr);
  const auto world = mpi.world();
  const dist::Topology& t = mpi.topology();
  std::unique_ptr<dist::Communicator> nccl;
  if (backend == "nccl") nccl = dist::make_nccl_communicator(*world, dist::select_device(t));
  dist::Communicator* comm = nccl ? nccl.get() : world.get();
  const std::vector<dist::AllReduceResult> results = dist::benchmark_all_reduce(
      *comm, *world, min_bytes, max_bytes, warmup, iterations, nccl != nullptr);
  size_t wrong = 0;
  for (const dist::AllReduceResult& r : results) wrong += r.wrong;
  if (t.rank != 0) return wrong == 0 ? 0 : 1;
  const bool json = vm.count("json") > 0;
  if (!json) {
    std::printf(
        "# mvibr bench allreduce: %d ranks on %d host(s), backend %s, float sum in place, "
        "%d iterations after %d warm-up\n",
        t.size, t.hosts, comm->backend().c_str(), iterations, warmup);
    std::printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "#wrong");
  }
  for (const dist::AllReduceResult& r : results) {
    if (json) {
      std::printf(
          "{\"bench\": \"allreduce\", \"ranks\": %d, \"hosts\": %d, \"backend\": \"%s\", "
          "\"bytes\": %zu, \"seconds\": %.9g, \"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, "
          "\"wrong\": %zu}\n",
          t.size, t.hosts, comm->backend().c_str(), r.bytes, r.seconds, r.algbw_gbs, r.busbw_gbs,
          r.wrong);
    } else {
      std::printf("  %12zu %12zu %12.2f %12.3f %12.3f %8zu\n", r.bytes, r.bytes / sizeof(float),
                  r.seconds * 1e6, r.algbw_gbs, r.busbw_gbs, r.wrong);
    }
  }
  if (wrong > 0) {
    std::fprintf(stderr, "mvibr bench allreduce: %zu wrong sums\n", wrong);
    return 1;
  }
  return 0;
}

// Mean of each phase over the measured steps, and the step's other parts, by name.
struct StepMeans {
  std::vector<std::pair<std::string, double>> phases;
  double seconds = 0;
};

StepMeans step_means(const std::vector<train::StepReport>& reports) {
  StepMeans m;
  if (reports.empty()) return m;
  const double n = double(reports.size());
  for (const train::StepReport& r : reports) {
    std::vector<std::pair<std::string, double>> parts = {{"data_wait", r.data_wait}};
    for (const auto& [name, seconds] : r.phases.named()) parts.emplace_back(name, seconds);
    parts.insert(parts.end(), {{"loss_allreduce", r.loss_allreduce},
                               {"allreduce_exposed", r.allreduce_exposed},
                               {"optimizer", r.optimizer}});
    if (m.phases.empty()) {
      for (const auto& [name, seconds] : parts) m.phases.emplace_back(name, 0.0);
    }
    for (size_t i = 0; i < parts.size(); ++i) m.phases[i].second += parts[i].second / n;
    m.seconds += r.seconds / n;
  }
  return m;
}

double mean_of(const std::vector<train::StepReport>& reports, double train::StepReport::*field) {
  double sum = 0;
  for (const train::StepReport& r : reports) sum += r.*field;
  return reports.empty() ? 0 : sum / double(reports.size());
}

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
  std::vector<train::StepReport> reports;
  train::RankContext context;
  context.comm = comm.get();
  context.topology = t;
  context.measure_only = true;
  context.on_step = [&](const train::StepReport& r) {
    if (r.step > uint64_t(warmup)) reports.push_back(r);
  };
  std::ostringstream log;
  train::train(config, log, context);

  // Ranks wait for each other in the all-reduces, so every rank's step takes as long as the
  // slowest one's; what differs between ranks is the time they were busy outside those waits.
  const StepMeans means = step_means(reports);
  const double busy = means.seconds - mean_of(reports, &train::StepReport::loss_allreduce) -
                      mean_of(reports, &train::StepReport::allreduce_exposed);
  const std::vector<double> busy_seconds = dist::all_gather_value(*comm, busy);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::vector<double> peak_mb = dist::all_gather_value(*comm, double(usage.ru_maxrss) / 1024);
  if (t.rank != 0) return 0;

  const auto slowest = std::max_element(busy_seconds.begin(), busy_seconds.end());
  const double fastest = *std::min_element(busy_seconds.begin(), busy_seconds.end());
  const int slow_rank = int(slowest - busy_seconds.begin());
  const double step = means.seconds;
  const double rays = double(config.N_rand) * config.accumulation_steps * t.size;
  const double allreduce = mean_of(reports, &train::StepReport::allreduce);
  const double exposed = mean_of(reports, &train::StepReport::allreduce_exposed);
  nlohmann::json j;
  j["bench"] = "train";
  j["mvibr"] = std::string(MVIBR_VERSION " (" MVIBR_GIT_REVISION ")");
  j["host"] = t.host;
  j["ranks"] = t.size;
  j["hosts"] = t.hosts;
  j["threads_per_rank"] = omp_get_max_threads();
  j["backend"] = t.size > 1 ? comm->backend() : "none";
  j["device"] = "cpu";
  j["config"] = {{"N_rand", config.N_rand},
                 {"accumulation_steps", config.accumulation_steps},
                 {"N_samples", config.N_samples},
                 {"N_importance", config.N_importance},
                 {"num_source_views", config.num_source_views},
                 {"feature_net", config.feature_net},
                 {"coarse_feat_dim", config.coarse_feat_dim},
                 {"fine_feat_dim", config.fine_feat_dim},
                 {"datadir", config.datadir}};
  j["global_batch_rays"] = rays;
  j["warmup"] = warmup;
  j["steps"] = steps;
  j["step_seconds"] = step;
  j["steps_per_second"] = 1.0 / step;
  j["rays_per_second"] = rays / step;
  j["rays_per_second_per_rank"] = rays / step / t.size;
  j["samples_per_second"] = rays * (config.N_samples + config.N_importance) / step;
  j["phases_rank0"] = nlohmann::json::object();
  for (const auto& [name, seconds] : means.phases) j["phases_rank0"][name] = seconds;
  j["allreduce_seconds"] = allreduce;
  j["allreduce_hidden_fraction"] = allreduce > 0 ? std::max(0.0, 1.0 - exposed / allreduce) : 0.0;
  j["busy_seconds_per_rank"] = busy_seconds;
  j["slowest_rank"] = slow_rank;
  j["imbalance"] = fastest > 0 ? *slowest / fastest - 1.0 : 0.0;
  j["peak_rss_mb_per_rank"] = peak_mb;
  const std::string text = j.dump();
  if (!out.empty()) {
    std::ofstream file(out);
    file << text << "\n";
    if (!file) throw RuntimeFailure(out + ": cannot write the result");
  }
  if (vm.count("json")) {
    std::cout << text << "\n";
    return 0;
  }
  std::printf(
      "mvibr bench train: %d rank(s) on %d host(s), %d thread(s) each, global batch %.0f "
      "rays, %d measured steps after %d\n",
      t.size, t.hosts, omp_get_max_threads(), rays, steps, warmup);
  std::printf(
      "  %.3f steps/s   %.0f rays/s   %.0f rays/s per rank   imbalance %.1f%% (slowest "
      "rank %d)\n",
      1.0 / step, rays / step, rays / step / t.size, 100.0 * j["imbalance"].get<double>(),
      slow_rank);
  std::printf("  rank 0's step, %.4f s:\n", means.seconds);
  for (const auto& [name, seconds] : means.phases) {
    std::printf("    %-22s %9.4f s  %5.1f%%\n", name.c_str(), seconds,
                100.0 * seconds / means.seconds);
  }
  std::printf("  all-reduce %.4f s per step, %.0f%% hidden behind the backward pass\n", allreduce,
              100.0 * j["allreduce_hidden_fraction"].get<double>());
  return 0;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: mvibr bench <what> [options]\n\n"
                 "  allreduce   all-reduce bandwidth (algbw, busbw as nccl-tests) of the job's\n"
                 "              communicator, 1 KB to 256 MB; run it under mpirun or srun\n"
                 "  train       steady-state training steps: steps/s, rays/s, time per phase,\n"
                 "              all-reduce hidden, imbalance and memory per rank\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "allreduce") return run_allreduce(rest);
  if (args[0] == "train") return run_train_bench(rest);
  throw InvalidArgument("mvibr bench: unknown benchmark '" + args[0] +
                        "' (see mvibr bench --help)");
}

}  // namespace mvibr::cli
