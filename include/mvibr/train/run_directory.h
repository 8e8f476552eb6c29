// What a run directory holds for the processes that share it, besides checkpoints and logs.
// - The trainer's lock (`.train.lock`): rank 0 of a `mvibr train` holds it for the whole run, so
//   two jobs never write one run, and a checkpoint temporary nobody holds is known to be stale.
// - A stop request (`STOP`): any process on any launcher asks a run to stop at a step boundary
//   (rank 0 reads it, every rank agrees in the step's loss all-reduce), checkpoint and exit 75.
//   Empty: after the step in progress; a step number N: after step N. The run that honours it,
//   or ends while it is due, removes it. `mvibr stop` and slurm/train.sbatch write it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace mvibr::train {

// "<run_dir>/STOP".
std::string stop_request_path(const std::string& run_dir);

// Writes the stop request atomically: after `after_step` (none: after the step in progress).
// The run directory must exist unless `create` (a run that may not have started yet).
void write_stop_request(const std::string& run_dir, std::optional<uint64_t> after_step,
                        bool create);

// Reads the run's stop request: nullopt when there is none; otherwise the step after which it
// asks to stop (0: at once). Content other than a step number is read as "at once", with a
// warning on `log`.
std::optional<uint64_t> read_stop_request(const std::string& run_dir, std::ostream& log);

// Removes the stop request, if any.
void clear_stop_request(const std::string& run_dir);

// Rank 0's hold on a run directory for the life of a training run. Taking it creates the folder,
// fails (InvalidArgument naming the holder) while another process holds it, and removes the
// checkpoint temporaries (`ckpt-N.h5.tmp-PID`) that writers killed mid-write left, saying so on
// `log`. Where the file system has no locks, it says so and leaves temporaries alone.
class RunDirectoryLock {
 public:
  RunDirectoryLock(const std::string& run_dir, std::ostream& log);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace mvibr::train
