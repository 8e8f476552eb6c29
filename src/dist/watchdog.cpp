// The stall watchdog (see watchdog.h).
#include "mvibr/dist/watchdog.h"

#include <cstdio>

#include "mvibr/core/error.h"

namespace mvibr::dist {

Watchdog::Watchdog(double timeout_seconds, StallHandler on_stall)
    : timeout_(timeout_seconds), on_stall_(std::move(on_stall)) {
  if (!(timeout_seconds > 0)) {
    throw InvalidArgument("watchdog timeout must be > 0 seconds, got " +
                          std::to_string(timeout_seconds));
  }
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (what_.empty() || fired_) {
      changed_.wait(lock);
      continue;
    }
    const auto deadline =
        since_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
    const std::string watched = what_;
    const auto watched_since = since_;
    if (changed_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
    if (stopping_ || what_ != watched || since_ != watched_since) continue;
    fired_ = true;
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", timeout_.count());
    std::string message =
        watched + " has not completed after " + seconds + " s: another rank has failed or stalls";
    Communicator* const communicator = abort_on_stall_;
    lock.unlock();
    if (communicator != nullptr) {
      communicator->abort();
      message += "; " + communicator->backend() + " communicator aborted";
    }
    on_stall_(message);
    lock.lock();
  }
}

void Watchdog::abort_on_stall(Communicator* communicator) {
  std::lock_guard<std::mutex> lock(mutex_);
  abort_on_stall_ = communicator;
}

Watchdog::Scope::Scope(Watchdog* watchdog, std::string what) : watchdog_(watchdog) {
  if (!watchdog_) return;
  {
    std::lock_guard<std::mutex> lock(watchdog_->mutex_);
    watchdog_->what_ = std::move(what);
    watchdog_->since_ = std::chrono::steady_clock::now();
  }
  watchdog_->changed_.notify_all();
}

Watchdog::Scope::~Scope() {
  if (!watchdog_) return;
  {
    std::lock_guard<std::mutex> lock(watchdog_->mutex_);
    watchdog_->what_.clear();
  }
  watchdog_->changed_.notify_all();
}

}  // namespace mvibr::dist
