// `mvibr train --config FILE [--key value ...]`: see train/trainer.h. The same command runs as one
// process or as every rank of an mpirun / srun job; an error on any rank ends the whole job.
#include <cmath>
#include <iostream>

#include "commands.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/train/config.h"
#include "mvibr/train/trainer.h"

namespace mvibr::cli {

namespace {

// The job's exit code when a rank waited too long for the others.
constexpr int kStalledExitCode = 3;

}  // namespace

int run_train(const std::vector<std::string>& args) {
  dist::MpiSession mpi(nullptr, nullptr);
  const dist::Topology& topology = mpi.topology();
  const std::string who = "rank " + std::to_string(topology.rank) + " on " + topology.host;
  train::TrainConfig config;
  train::TrainSummary summary;
  try {
    if (!train::parse_train_config(args, &config)) return 0;  // --help
    const auto world = mpi.world();
    train::RankContext context{world.get(), topology, [](const std::string& message) {
                                 std::cerr << "mvibr train: " << message << "; ending the job\n"
                                           << std::flush;
                                 dist::MpiSession::abort_job(kStalledExitCode);
                               }};
    summary = train::train(config, std::cout, context);
  } catch (const std::exception& e) {
    if (topology.size == 1) throw;  // main prints it
    // Every other rank may be waiting for this one in a collective: end them all.
    const bool bad_input = dynamic_cast<const InvalidArgument*>(&e) != nullptr;
    std::cerr << "mvibr train: " << who << ": " << (bad_input ? "" : "error: ") << e.what() << "\n"
              << std::flush;
    dist::MpiSession::abort_job(bad_input ? 2 : 1);
  }
  if (topology.rank != 0) return 0;
  std::cout << "trained " << summary.run_dir << " to step " << summary.last_step << " (loss "
            << summary.last_loss << ", psnr " << summary.last_psnr << ")";
  if (std::isfinite(summary.heldout_psnr)) {
    std::cout << "; held-out psnr " << summary.heldout_psnr << ", ssim " << summary.heldout_ssim;
  }
  if (!summary.last_checkpoint.empty()) std::cout << "; checkpoint " << summary.last_checkpoint;
  std::cout << "\n";
  return 0;
}

}  // namespace mvibr::cli
