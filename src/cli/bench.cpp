// `mvibr bench <what>`: measurements under the launcher the job will use. `allreduce`: the
// all-reduce bandwidth of the job's communicator from 1 KB to 256 MB as nccl-tests reports it (a
// table on rank 0, or one JSON object per size with --json). `train`: steady-state training
// updates of a config (the real training loop, without validation, checkpoints or files): steps
// and rays per second, the time of each phase, how much all-reduce the backward pass hid, the
// imbalance between ranks and each rank's peak memory. `io`: each rank's shards read through
// ShardReader and the prefetching reader against a plain read of the same files, and the wait
// per sample at a given step time. `kernels`: every render op's median time, GB/s of compulsory
// bytes and GFLOP/s against the copy bandwidth and FMA peak measured in the same run. With --json
// / --out, one JSON object per result (with the build, host, ranks and device), so results of
// many jobs can be put together.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "mvibr/bench/io_benchmark.h"
#include "mvibr/bench/render_ops_benchmark.h"
#include "mvibr/build_info.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
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

// The fields every result carries, so results of many jobs can be put together.
nlohmann::json result_header(const char* bench, const dist::Topology& t) {
  nlohmann::json j;
  j["bench"] = bench;
  j["mvibr"] = std::string(MVIBR_VERSION " (" MVIBR_GIT_REVISION ")");
  j["host"] = t.host;
  j["ranks"] = t.size;
  j["hosts"] = t.hosts;
  return j;
}

// One JSON object per line into --out (when given) and, with --json, onto standard output.
void write_results(const std::vector<nlohmann::json>& results, const std::string& out,
                   bool to_stdout) {
  if (!out.empty()) {
    std::ofstream file(out);
    for (const nlohmann::json& r : results) file << r.dump() << "\n";
    if (!file) throw RuntimeFailure(out + ": cannot write the results");
  }
  if (to_stdout) {
    for (const nlohmann::json& r : results) std::cout << r.dump() << "\n";
  }
}

po::variables_map parse_options(const std::vector<std::string>& args,
                                const po::options_description& options) {
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InvalidArgument(std::string("command line: ") + e.what());
  }
  return vm;
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
  const po::variables_map vm = parse_options(args, options);
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
  if (backend == "nccl") {
    // A stalled peer ends the benchmark as it ends a training job (the watchdog_s default).
    nccl = dist::make_nccl_communicator(*world, dist::select_device(t),
                                        train::TrainConfig{}.watchdog_s);
  }
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
  nlohmann::json j = result_header("train", t);
  j["threads_per_rank"] = omp_get_max_threads();
  // The trainer's choices: GPU ranks reduce gradients with NCCL unless they travel as bf16.
  const bool on_device = train::runs_on_device(config);
  j["backend"] = on_device && config.allreduce_dtype == train::AllreduceDtype::kFp32 ? "nccl"
                 : t.size > 1 ? comm->backend()
                              : "none";
  j["device"] = on_device ? "cuda " + cuda_device_description(0) : "cpu";
  j["precision"] = name_of(config.precision);
  j["config"] = {{"N_rand", config.N_rand},
                 {"accumulation_steps", config.accumulation_steps},
                 {"N_samples", config.N_samples},
                 {"N_importance", config.N_importance},
                 {"num_source_views", config.num_source_views},
                 {"feature_net", name_of(config.feature_net)},
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
  write_results({j}, out, vm.count("json") > 0);
  if (vm.count("json")) return 0;
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

nlohmann::json rate_json(const bench::ReadRate& r, bool frames) {
  nlohmann::json j = {{"bytes", r.bytes}, {"seconds", r.seconds}, {"gbs", r.gbs()}};
  if (frames) {
    j["frames"] = r.frames;
    j["frames_per_second"] = r.frames_per_second();
  }
  return j;
}

// The ranks read at the same time (a barrier before each measurement), so the job's rate is
// every rank's bytes over the longest rank's time.
nlohmann::json total_rate(const std::vector<nlohmann::json>& ranks, const char* key, bool frames) {
  bench::ReadRate total;
  for (const nlohmann::json& r : ranks) {
    total.bytes += r[key]["bytes"].get<double>();
    total.seconds = std::max(total.seconds, r[key]["seconds"].get<double>());
    if (frames) total.frames += r[key]["frames"].get<long long>();
  }
  return rate_json(total, frames);
}

void add_fraction_of_plain(nlohmann::json& j) {
  const double plain = j["plain_read"]["gbs"].get<double>();
  for (const char* key : {"shard_reader", "prefetch_reader"}) {
    j[key]["fraction_of_plain"] = plain > 0 ? j[key]["gbs"].get<double>() / plain : 0.0;
  }
}

int run_io_bench(const std::vector<std::string>& args) {
  std::string datadir, out;
  double seconds = 2, step_ms = 50;
  int num_source_views = 10, queue_depth = 4;
  bool allow_shared = false;
  po::options_description options("mvibr bench io");
  options.add_options()("help,h", "print this help")("datadir", po::value(&datadir),
                                                     "a folder `mvibr prep` wrote (required)")(
      "seconds", po::value(&seconds)->default_value(seconds),
      "time of each measurement (whole passes over the rank's shards)")(
      "step_ms", po::value(&step_ms)->default_value(step_ms),
      "simulated training step per sample for the prefetching reader's wait")(
      "num_source_views", po::value(&num_source_views)->default_value(num_source_views),
      "source views per sample (prefetching reader)")(
      "queue_depth", po::value(&queue_depth)->default_value(queue_depth),
      "samples the prefetching reader reads ahead")(
      "allow_shared_shards", po::bool_switch(&allow_shared),
      "let ranks share shards when there are fewer shards than ranks")(
      "json", "one JSON object per rank and one for the job instead of the table")(
      "out", po::value(&out), "also write the JSON objects to this file");
  const po::variables_map vm = parse_options(args, options);
  if (vm.count("help")) {
    std::cout << "usage: mvibr bench io --datadir DIR [options] (under mpirun or srun)\n\n"
              << options;
    return 0;
  }
  if (datadir.empty()) throw InvalidArgument("--datadir is required (a folder mvibr prep wrote)");
  for (const auto& [key, value] : {std::pair{"seconds", seconds}, std::pair{"step_ms", step_ms}}) {
    if (!(value > 0) || !std::isfinite(value)) {
      throw InvalidArgument(std::string("--") + key + " must be positive, got " +
                            nlohmann::json(value).dump());
    }
  }

  dist::MpiSession mpi(nullptr, nullptr);
  const auto world = mpi.world();
  const dist::Topology& t = mpi.topology();
  std::string rank_result;
  on_this_rank("mvibr bench io", t, [&] {
    const data::SceneIndex index = data::read_scene_index(datadir);
    const std::vector<int> shards =
        data::shards_for_rank(index.n_shards, t.rank, t.size, allow_shared);
    std::vector<std::string> files;
    double file_bytes = 0;
    for (int s : shards) {
      files.push_back(
          (std::filesystem::path(datadir) / data::shard_file_name(s, index.n_shards)).string());
      file_bytes += double(std::filesystem::file_size(files.back()));
    }
    data::ReaderOptions reader;
    reader.data_dir = datadir;
    reader.rank = t.rank;
    reader.world_size = t.size;
    reader.num_source_views = num_source_views;
    reader.queue_depth = queue_depth;
    reader.allow_shared_shards = allow_shared;

    // Without root the page cache cannot be dropped, so the files are read once first and every
    // measurement reads from memory: what is compared is the readers' cost, not the disk's.
    const double resident_before = bench::page_cache_resident_fraction(files);
    bench::plain_read(files, 0);
    const double resident_after = bench::page_cache_resident_fraction(files);
    world->barrier();
    const bench::ReadRate plain = bench::plain_read(files, seconds);
    world->barrier();
    const bench::ReadRate shard = bench::shard_read(files, seconds);
    world->barrier();
    const bench::ReadRate prefetch = bench::prefetch_read(reader, seconds);
    world->barrier();
    const int samples = std::max(3, int(std::lround(seconds * 1e3 / step_ms)));
    const bench::PrefetchWait wait = bench::prefetch_wait(reader, step_ms / 1e3, samples);

    nlohmann::json j = result_header("io", t);
    j["scope"] = "rank";
    j["rank"] = t.rank;
    j["device"] = "cpu";
    j["shards"] = shards;
    j["file_bytes"] = file_bytes;
    j["page_cache"] = {
        {"resident_before", resident_before},
        {"resident_after", resident_after},
        {"warm", resident_after >= 0.99},
        {"note",
         "files read once before measuring (dropping the page cache needs root): every "
         "read below is from memory unless resident_after < 1"}};
    j["plain_read"] = rate_json(plain, false);
    j["shard_reader"] = rate_json(shard, true);
    j["prefetch_reader"] = rate_json(prefetch, true);
    j["prefetch_wait"] = {{"step_ms", step_ms},
                          {"samples", wait.samples},
                          {"first_sample_ms", 1e3 * wait.first_sample_seconds},
                          {"wait_ms_per_sample", 1e3 * wait.wait_seconds_per_sample}};
    add_fraction_of_plain(j);
    rank_result = j.dump();
  });
  const std::vector<std::string> gathered = dist::all_gather_strings(*world, rank_result);
  if (t.rank != 0) return 0;

  std::vector<nlohmann::json> results;
  for (const std::string& text : gathered) results.push_back(nlohmann::json::parse(text));
  nlohmann::json config = {{"datadir", datadir},         {"seconds", seconds},
                           {"step_ms", step_ms},         {"num_source_views", num_source_views},
                           {"queue_depth", queue_depth}, {"allow_shared_shards", allow_shared}};
  nlohmann::json total = result_header("io", t);
  total["scope"] = "total";
  total["device"] = "cpu";
  double file_bytes = 0, wait_sum = 0, wait_max = 0, resident_min = 1;
  bool warm = true;
  for (nlohmann::json& r : results) {
    r["config"] = config;
    file_bytes += r["file_bytes"].get<double>();
    const double w = r["prefetch_wait"]["wait_ms_per_sample"].get<double>();
    wait_sum += w;
    wait_max = std::max(wait_max, w);
    resident_min = std::min(resident_min, r["page_cache"]["resident_after"].get<double>());
    warm = warm && r["page_cache"]["warm"].get<bool>();
  }
  total["config"] = config;
  total["file_bytes"] = file_bytes;
  total["page_cache"] = {{"resident_after_min", resident_min}, {"warm", warm}};
  total["plain_read"] = total_rate(results, "plain_read", false);
  total["shard_reader"] = total_rate(results, "shard_reader", true);
  total["prefetch_reader"] = total_rate(results, "prefetch_reader", true);
  total["prefetch_wait"] = {{"step_ms", step_ms},
                            {"wait_ms_per_sample", wait_sum / double(results.size())},
                            {"wait_ms_per_sample_max", wait_max}};
  add_fraction_of_plain(total);
  results.push_back(total);
  write_results(results, out, vm.count("json") > 0);
  if (vm.count("json")) return 0;

  std::printf(
      "mvibr bench io: %s, %d rank(s) on %d host(s), %.1f MB of shard files; %s page cache (files "
      "read once first, %.0f%% resident after)\n",
      datadir.c_str(), t.size, t.hosts, file_bytes / 1e6, warm ? "warm" : "PARTLY COLD",
      100.0 * resident_min);
  std::printf("  %-5s %10s %12s %10s %8s %12s %8s %8s %14s\n", "rank", "plain GB/s", "shard fr/s",
              "GB/s", "of plain", "prefetch fr/s", "GB/s", "of plain", "wait ms/sample");
  for (const nlohmann::json& r : results) {
    const std::string who = r["scope"] == "total" ? "all" : std::to_string(r["rank"].get<int>());
    std::printf("  %-5s %10.3f %12.1f %10.3f %7.0f%% %12.1f %8.3f %7.0f%% %14.3f\n", who.c_str(),
                r["plain_read"]["gbs"].get<double>(),
                r["shard_reader"]["frames_per_second"].get<double>(),
                r["shard_reader"]["gbs"].get<double>(),
                100 * r["shard_reader"]["fraction_of_plain"].get<double>(),
                r["prefetch_reader"]["frames_per_second"].get<double>(),
                r["prefetch_reader"]["gbs"].get<double>(),
                100 * r["prefetch_reader"]["fraction_of_plain"].get<double>(),
                r["prefetch_wait"]["wait_ms_per_sample"].get<double>());
  }
  std::printf("  (wait: per sample of a consumer busy %.0f ms per sample; \"all\": mean)\n",
              step_ms);
  return 0;
}

int run_kernels_bench(const std::vector<std::string>& args) {
  bench::RenderOpsSize size;
  std::string backend = "cpu", out;
  int warmup = 3, repeats = 20;
  po::options_description options("mvibr bench kernels");
  options.add_options()("help,h", "print this help")(
      "rays", po::value(&size.rays)->default_value(size.rays), "rays per call")(
      "samples", po::value(&size.samples)->default_value(size.samples), "coarse samples per ray")(
      "importance", po::value(&size.importance)->default_value(size.importance),
      "importance samples per ray")("views", po::value(&size.views)->default_value(size.views),
                                    "source views")(
      "channels", po::value(&size.channels)->default_value(size.channels), "feature channels")(
      "backend", po::value(&backend)->default_value(backend), "cpu | cuda")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed calls per op")(
      "repeats", po::value(&repeats)->default_value(repeats), "timed calls per op (median)")(
      "json", "one JSON object per op instead of the table")(
      "out", po::value(&out), "also write the JSON objects to this file");
  const po::variables_map vm = parse_options(args, options);
  if (vm.count("help")) {
    std::cout << "usage: mvibr bench kernels [options] (under mpirun or srun: every rank "
                 "measures at once)\n\n"
              << options;
    return 0;
  }
  if (backend != "cpu" && backend != "cuda") {
    throw InvalidArgument("--backend must be cpu or cuda, got '" + backend + "'");
  }
  if (warmup < 0 || repeats < 1) throw InvalidArgument("--warmup must be >= 0 and --repeats >= 1");
  bench::validate_render_ops_size(size);
  if (backend == "cuda" && !cuda_backend_built()) {
    throw InvalidArgument(
        "--backend cuda: this mvibr was built without CUDA (configure with -DMVIBR_CUDA=ON)");
  }

  dist::MpiSession mpi(nullptr, nullptr);
  const auto world = mpi.world();
  const dist::Topology& t = mpi.topology();
  const bool cuda = backend == "cuda";
  std::vector<std::string> rank_results;
  on_this_rank("mvibr bench kernels", t, [&] {
    if (cuda && cuda_device_count() == 0) {
      throw RuntimeFailure("--backend cuda: no CUDA device on " + t.host);
    }
    const std::string device =
        cuda ? cuda_device_description(dist::select_device(t))
             : bench::cpu_model_name() + ", " + std::to_string(omp_get_max_threads()) + " threads";
    // References measured in the same run, under the same load: a copy far beyond the caches,
    // and (on the CPU) the FMA peak of the instruction set this build uses.
    const bench::OpCase copy =
        cuda ? bench::cuda_copy_case(size_t(1) << 30) : bench::cpu_copy_case(size_t(256) << 20);
    world->barrier();
    const double copy_gbs =
        copy.cost.bytes / bench::time_runs(copy.run, 1, 10).median_seconds / 1e9;
    world->barrier();
    const double peak_gflops = cuda ? 0 : bench::measure_fma_peak_flops(0.6) / 1e9;
    const nlohmann::json config = {{"rays", size.rays},
                                   {"samples", size.samples},
                                   {"importance", size.importance},
                                   {"views", size.views},
                                   {"channels", size.channels},
                                   {"image_size", {size.image_width, size.image_height}},
                                   {"feature_size", {size.feature_width, size.feature_height}},
                                   {"warmup", warmup},
                                   {"repeats", repeats}};
    for (const bench::OpCase& op :
         cuda ? bench::cuda_render_op_cases(size) : bench::cpu_render_op_cases(size)) {
      world->barrier();  // the ranks of a host measure each op at the same time, as they train
      const bench::Timing timing = bench::time_runs(op.run, warmup, repeats);
      nlohmann::json j = result_header("kernels", t);
      j["rank"] = t.rank;
      j["backend"] = backend;
      j["device"] = device;
      j["threads"] = cuda ? 0 : omp_get_max_threads();
      j["config"] = config;
      j["op"] = op.name;
      j["seconds"] = timing.median_seconds;
      j["min_seconds"] = timing.min_seconds;
      j["bytes"] = op.cost.bytes;
      j["flops"] = op.cost.flops;
      const double gbs = op.cost.bytes / timing.median_seconds / 1e9;
      const double gflops = op.cost.flops / timing.median_seconds / 1e9;
      j["gbs"] = gbs;
      j["gflops"] = gflops;
      j["copy_gbs"] = copy_gbs;
      j["fraction_of_copy"] = gbs / copy_gbs;
      if (peak_gflops > 0) {
        j["fma_peak_gflops"] = peak_gflops;
        j["fraction_of_fma_peak"] = gflops / peak_gflops;
      }
      rank_results.push_back(j.dump());
    }
  });
  // Every rank has the same ops, so rank 0 gathers them op by op.
  std::vector<nlohmann::json> results;
  for (const std::string& text : rank_results) {
    for (const std::string& r : dist::all_gather_strings(*world, text)) {
      results.push_back(nlohmann::json::parse(r));
    }
  }
  if (t.rank != 0) return 0;
  write_results(results, out, vm.count("json") > 0);
  if (vm.count("json")) return 0;

  const nlohmann::json& first = results.front();
  std::printf(
      "mvibr bench kernels: %s on %s, %d rank(s); %d rays x %d + %d samples, %d views, %d "
      "channels; median of %d calls after %d\n",
      backend.c_str(), first["device"].get<std::string>().c_str(), t.size, size.rays, size.samples,
      size.importance, size.views, size.channels, repeats, warmup);
  std::printf("  copy bandwidth %.2f GB/s", first["copy_gbs"].get<double>());
  if (first.contains("fma_peak_gflops")) {
    std::printf(", AVX2 FMA peak %.1f GFLOP/s", first["fma_peak_gflops"].get<double>());
  }
  std::printf(" (rank 0, measured now)\n");
  std::printf("  %-4s %-26s %12s %10s %8s %10s %8s\n", "rank", "op", "time (us)", "GB/s", "of copy",
              "GFLOP/s", "of peak");
  for (const nlohmann::json& r : results) {
    std::printf("  %-4d %-26s %12.2f %10.3f %7.1f%% %10.3f", r["rank"].get<int>(),
                r["op"].get<std::string>().c_str(), 1e6 * r["seconds"].get<double>(),
                r["gbs"].get<double>(), 100 * r["fraction_of_copy"].get<double>(),
                r["gflops"].get<double>());
    if (r.contains("fraction_of_fma_peak")) {
      std::printf(" %7.1f%%", 100 * r["fraction_of_fma_peak"].get<double>());
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: mvibr bench <what> [options]\n\n"
                 "  allreduce   all-reduce bandwidth (algbw, busbw as nccl-tests) of the job's\n"
                 "              communicator, 1 KB to 256 MB; run it under mpirun or srun\n"
                 "  train       steady-state training steps: steps/s, rays/s, time per phase,\n"
                 "              all-reduce hidden, imbalance and memory per rank\n"
                 "  io          each rank's shards read through the shard and prefetching readers\n"
                 "              against a plain read of the same files, and the data wait\n"
                 "  kernels     every render op's time, GB/s and GFLOP/s against the measured\n"
                 "              copy bandwidth and FMA peak (--backend cpu|cuda)\n";
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "allreduce") return run_allreduce(rest);
  if (args[0] == "train") return run_train_bench(rest);
  if (args[0] == "io") return run_io_bench(rest);
  if (args[0] == "kernels") return run_kernels_bench(rest);
  throw InvalidArgument("mvibr bench: unknown benchmark '" + args[0] +
                        "' (see mvibr bench --help)");
}

}  // namespace mvibr::cli
