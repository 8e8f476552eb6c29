// Seconds of steady_clock since a point: the one way phase timers, benchmarks and the all-reduce
// accounting measure time.
#pragma once

#include <chrono>

namespace mvibr {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace mvibr
