// What every subcommand that runs on the ranks of a job shares: an error on one rank must end the
// whole job, since the others may be waiting for it in a collective (see commands.h).
#include <boost/program_options.hpp>
#include <iostream>

#include "commands.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/nccl_communicator.h"
#include "mvibr/train/model.h"

namespace mvibr::cli {

void on_this_rank(const std::string& command, const dist::Topology& topology,
                  const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    if (topology.size == 1) throw;  // main prints it
    const bool bad_input = dynamic_cast<const InvalidArgument*>(&e) != nullptr ||
                           dynamic_cast<const boost::program_options::error*>(&e) != nullptr;
    std::cerr << command << ": rank " << topology.rank << " on " << topology.host << ": "
              << (bad_input ? "" : "error: ") << e.what() << "\n"
              << std::flush;
    dist::MpiSession::abort_job(bad_input ? 2 : 1);
  }
}

int run_on_ranks(const std::string& command,
                 const std::function<int(dist::Communicator&, const dist::Topology&)>& body) {
  dist::MpiSession mpi(nullptr, nullptr);
  const dist::Topology& topology = mpi.topology();
  int status = 0;
  on_this_rank(command, topology, [&] {
    const auto world = mpi.world();
    status = body(*world, topology);
  });
  return status;
}

void select_rank_device(const train::TrainConfig& config, const dist::Topology& topology) {
  if (train::runs_on_device(config)) dist::select_device(topology);
}

}  // namespace mvibr::cli
