// `mvibr bench <what>`: measurements under the launcher the job will use, one file per
// subcommand (bench_allreduce.cpp, bench_train.cpp, bench_io.cpp, bench_kernels.cpp); here the
// dispatch and what their results share.
#include "bench.h"

#include <fstream>
#include <iostream>

#include "commands.h"
#include "mvibr/build_info.h"
#include "mvibr/core/error.h"

namespace po = boost::program_options;

namespace mvibr::cli {

nlohmann::json result_header(const char* bench, const dist::Topology& topology) {
  nlohmann::json j;
  j["bench"] = bench;
  j["mvibr"] = std::string(MVIBR_VERSION " (" MVIBR_GIT_REVISION ")");
  j["host"] = topology.host;
  j["ranks"] = topology.size;
  j["hosts"] = topology.hosts;
  return j;
}

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
  if (args[0] == "allreduce") return run_allreduce_bench(rest);
  if (args[0] == "train") return run_train_bench(rest);
  if (args[0] == "io") return run_io_bench(rest);
  if (args[0] == "kernels") return run_kernels_bench(rest);
  throw InvalidArgument("mvibr bench: unknown benchmark '" + args[0] +
                        "' (see mvibr bench --help)");
}

}  // namespace mvibr::cli
