// `mvibr bench allreduce`: the all-reduce bandwidth of the job's communicator from 1 KB to 256 MB
// as nccl-tests reports it (a table on rank 0, or one JSON object per size with --json).
#include <cstdio>
#include <iostream>
#include <memory>

#include "bench.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/allreduce_benchmark.h"
#include "mvibr/dist/nccl_communicator.h"
#include "mvibr/train/config.h"

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

}  // namespace

int run_allreduce_bench(const std::vector<std::string>& args) {
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

}  // namespace mvibr::cli
