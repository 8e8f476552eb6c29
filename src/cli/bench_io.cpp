// `mvibr bench io`: each rank's shards read through ShardReader and the prefetching reader against
// a plain read of the same files, and the wait per sample at a given step time; one JSON object
// per rank and one for the job.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "bench.h"
#include "commands.h"
#include "mvibr/bench/io_benchmark.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"

namespace po = boost::program_options;

namespace mvibr::cli {

namespace {

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

}  // namespace

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

}  // namespace mvibr::cli
