// What the training-step benchmarks (train_step_bench, dynibar_step_bench) share: taking their
// own options out of the command line, whose rest is the training config's, and medians.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/core/error.h"

namespace mvibr::bench {

// Removes `name value` from `args` and returns the value; nullopt when `name` is not there.
inline std::optional<std::string> take_option(std::vector<std::string>* args,
                                              const std::string& name) {
  const auto at = std::find(args->begin(), args->end(), name);
  if (at == args->end()) return std::nullopt;
  if (at + 1 == args->end()) throw InvalidArgument(name + " needs a value");
  const std::string value = *(at + 1);
  args->erase(at, at + 2);
  return value;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace mvibr::bench
