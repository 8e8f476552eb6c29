// `mvibr bench kernels`: every render op's median time, GB/s of compulsory bytes and GFLOP/s
// against the copy bandwidth and FMA peak measured in the same run, on the CPU or a CUDA device.
#include <omp.h>

#include <cstdio>
#include <iostream>

#include "bench.h"
#include "commands.h"
#include "mvibr/bench/render_ops_benchmark.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/nccl_communicator.h"

namespace po = boost::program_options;

namespace mvibr::cli {

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

}  // namespace mvibr::cli
