// A training job must end, never hang. When a rank dies, the launcher (mpirun, srun) usually ends
// the others; when a rank stalls instead (stopped, deadlocked, a wedged network), the others wait
// in a collective forever. The watchdog is a thread that times what the main thread is waiting
// for: a watched wait that lasts longer than the timeout aborts the communicator it is given
// (ncclCommAbort on NCCL runs) and calls the stall handler, which says which rank waited for
// what since when, and ends the job (MPI_Abort).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

class Watchdog {
 public:
  // Called once, from the watchdog's thread, with a one-line description of the stall. In a
  // training run it does not return (it ends the job).
  using StallHandler = std::function<void(const std::string& message)>;

  // `timeout_seconds` > 0.
  Watchdog(double timeout_seconds, StallHandler on_stall);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches the enclosing wait: `what` (e.g. "all-reduce of the gradients of step 12") must end
  // within the timeout. Scopes do not nest.
  class Scope {
   public:
    Scope(Watchdog* watchdog, std::string what);  // null watchdog: watches nothing
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* watchdog_;
  };

  double timeout_seconds() const { return timeout_.count(); }

  // Aborted (Communicator::abort) before the stall handler runs; null: none. It must outlive the
  // watchdog or be replaced first.
  void abort_on_stall(Communicator* communicator);

 private:
  void loop();

  std::chrono::duration<double> timeout_;
  StallHandler on_stall_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string what_;  // empty: nothing watched
  std::chrono::steady_clock::time_point since_;
  Communicator* abort_on_stall_ = nullptr;
  bool fired_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace mvibr::dist
