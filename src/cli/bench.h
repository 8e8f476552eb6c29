// `mvibr bench`'s subcommands, one file each, and what their results share.
// - Each subcommand takes the arguments after its name and returns the exit code.
// - Results are JSON objects opening with result_header's fields, so results of many jobs can be
//   put together.
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/dist/mpi_session.h"

namespace mvibr::cli {

int run_allreduce_bench(const std::vector<std::string>& args);
int run_train_bench(const std::vector<std::string>& args);
int run_io_bench(const std::vector<std::string>& args);
int run_kernels_bench(const std::vector<std::string>& args);

// The fields every result opens with: the bench, mvibr's version, the host, ranks and hosts.
nlohmann::json result_header(const char* bench, const dist::Topology& topology);

// One JSON object per line into --out (when given) and, with --json, onto standard output.
void write_results(const std::vector<nlohmann::json>& results, const std::string& out,
                   bool to_stdout);

// A bad command line is an InvalidArgument.
boost::program_options::variables_map parse_options(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options);

}  // namespace mvibr::cli
