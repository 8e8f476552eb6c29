// `mvibr train --config FILE [--key value ...]`: see train/trainer.h. The same command runs as one
// process or as every rank of an mpirun / srun job; an error on any rank ends the whole job.
// Exit codes: 0 done, 1 error, 2 bad input, 3 a rank stalled (watchdog), 75 stopped early on a
// signal or a stop request (`mvibr stop`) with a checkpoint written (run again to continue).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <pthread.h>
#include <atomic>
#include <cmath>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "commands.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/train/config.h"
#include "mvibr/train/trainer.h"

namespace mvibr::cli {

namespace {

// The job's exit code when a rank waited too long for the others.
constexpr int kStalledExitCode = 3;
// The exit code of a run that stopped early on a signal after writing its checkpoint
// (EX_TEMPFAIL: "try again"); slurm/train.sbatch requeues the job on it.
constexpr int kStoppedEarlyExitCode = 75;

std::atomic<int> stop_signal{0};

// SIGUSR1 (what `sbatch --signal=USR1@SECONDS` sends before the time limit; srun forwards it to
// every task, Open MPI's mpirun may not: the stop request works under any launcher), SIGTERM (what
// Slurm and schedulers send to end a job) and SIGINT (Ctrl-C, once; a second one exits at once) all
// mean: finish this step, write a checkpoint, exit 75.
//
// The signals are blocked in this thread before MPI, OpenMP and the reader start theirs (new
// threads inherit the mask), and one thread takes them with sigwait. So no handler ever runs
// inside a compute, I/O or MPI thread: an asynchronous handler there coincided with heap
// corruption in oneDNN's convolution backward in 2 of about 40 stopped runs.
void watch_stop_signals() {
  static sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGUSR1);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Detached: it lives as long as the process, blocked in sigwait, and touches only the flag.
  std::thread([] {
    int interrupts = 0;
    for (;;) {
      int signal = 0;
      if (sigwait(&signals, &signal) != 0) continue;
      if (signal == SIGINT && ++interrupts > 1) std::_Exit(128 + SIGINT);
      stop_signal.store(signal);
    }
  }).detach();
}

// The width of the terminal standard output ends up on, or 0 when it is not one (a file, a pipe,
// a Slurm log): the progress line is redrawn in place only on a terminal.
int terminal_columns() {
  if (!isatty(STDOUT_FILENO)) return 0;
  int fd = STDOUT_FILENO;
  // Open MPI's mpirun gives every rank it starts a pseudo-terminal of its own for standard output
  // and copies it to mpirun's, whatever that is: under it, mpirun's own output is what counts.
  // mpirun is the parent of the ranks it starts; a rank started by a daemon on another node
  // finds the daemon's output, which is no terminal, and prints plain lines.
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) {
    const std::string launcher_output = "/proc/" + std::to_string(getppid()) + "/fd/1";
    fd = open(launcher_output.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return 0;
  }
  int columns = 0;
  if (isatty(fd)) {
    winsize size{};
    const bool known = ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0;
    columns = known ? size.ws_col : 80;  // 80: a terminal that does not say how wide it is
  }
  if (fd != STDOUT_FILENO) close(fd);
  return columns;
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  watch_stop_signals();  // first: a warning during start-up must stop, not kill, the rank
  return run_on_ranks("mvibr train", [&](dist::Communicator& world,
                                         const dist::Topology& topology) {
    train::TrainConfig config;
    if (!train::parse_train_config(args, &config)) return 0;  // --help
    train::RankContext context;
    context.comm = &world;
    context.topology = topology;
    context.on_stall = [](const std::string& message) {
      std::cerr << "mvibr train: " << message << "; ending the job\n" << std::flush;
      dist::MpiSession::abort_job(kStalledExitCode);
    };
    context.stop_signal = &stop_signal;
    context.progress_columns = terminal_columns();
    const train::TrainSummary summary = train::train(config, std::cout, context);
    if (topology.rank != 0) return summary.stopped_by.empty() ? 0 : kStoppedEarlyExitCode;
    if (!summary.stopped_by.empty()) {
      std::cout << "stopped " << summary.run_dir << " at step " << summary.last_step << " on "
                << summary.stopped_by << " after writing " << summary.last_checkpoint
                << "; run the same command to continue (exit code " << kStoppedEarlyExitCode
                << ")\n";
      return kStoppedEarlyExitCode;
    }
    std::cout << "trained " << summary.run_dir << " to step " << summary.last_step << " (loss "
              << summary.last_loss << ", " << summary.last_quality.key << " "
              << summary.last_quality.value << ")";
    if (std::isfinite(summary.heldout_psnr)) {
      std::cout << "; held-out psnr " << summary.heldout_psnr << ", ssim " << summary.heldout_ssim;
    }
    if (std::isfinite(summary.heldout_mpjpe_mm)) {
      std::cout << "; held-out mpjpe " << summary.heldout_mpjpe_mm << " mm (root-relative "
                << summary.heldout_mpjpe_relative_mm << ")";
    }
    if (!summary.last_checkpoint.empty()) std::cout << "; checkpoint " << summary.last_checkpoint;
    std::cout << "\n";
    return 0;
  });
}

}  // namespace mvibr::cli
