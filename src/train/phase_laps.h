// Charges the time since the previous lap to a phase of PhaseTimes: one clock read per phase
// boundary, and consecutive laps leave no gaps, so the phases add up to the step. Shared by the
// CPU step and the device step (which synchronises the device before each lap).
#pragma once

#include <chrono>

namespace mvibr::train {

class PhaseLaps {
 public:
  void start() { last_ = Clock::now(); }
  void to(double* phase) {
    const Clock::time_point now = Clock::now();
    *phase += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
};

}  // namespace mvibr::train
