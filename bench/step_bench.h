// What the training-step benchmarks (train_step_bench, dynibar_step_bench) share: taking their
// own options out of the command line, whose rest is the training config's, medians, the case's
// description in their JSON, and main's one-line errors.
#pragma once

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/core/enum_names.h"
#include "mvibr/core/error.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/train/config.h"

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

// The case both benchmarks describe under "config": the data, the target and the network's size.
inline nlohmann::ordered_json case_json(const train::TrainConfig& config,
                                        const data::TrainingSample& sample) {
  return {{"datadir", config.datadir},
          {"target_view", sample.target_view},
          {"image", {sample.target.camera.width, sample.target.camera.height}},
          {"feature_net", name_of(config.feature_net)},
          {"coarse_feat_dim", config.coarse_feat_dim},
          {"N_rand", config.N_rand},
          {"N_samples", config.N_samples}};
}

// main's body: `run` on the arguments, an error as one line "<program>: <what>" and exit 1.
inline int run_main(const char* program, int argc, char** argv,
                    const std::function<int(std::vector<std::string>)>& run) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace mvibr::bench
