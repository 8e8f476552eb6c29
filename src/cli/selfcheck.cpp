// `mvibr selfcheck`: the rendering core end to end on random data (rays, stratified and
// importance sampling, projection and gathering, compositing, masked MSE, and the backward of
// all of them into the feature maps), checked against central finite differences in double
// precision and against itself in float. A fresh install proves its maths here in seconds.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "commands.h"
#include "mvibr/core/config_file.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/synthetic/toy_pipeline.h"

namespace po = boost::program_options;

namespace mvibr::cli {

namespace {

struct Check {
  std::string name;
  double error;
  double bound;
  bool passed() const { return std::isfinite(error) && error <= bound; }
};

// Central differences of the double-precision loss in the feature entries with the largest
// gradients (where an error would show) plus a spread of others.
Check finite_difference_check(const synthetic::RandomScene& scene,
                              const std::vector<double>& features,
                              const std::vector<double>& target,
                              const synthetic::ToyPipelineOptions& options,
                              const synthetic::ToyPipelineResult<double>& analytic) {
  std::vector<size_t> order(features.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 12, order.end(), [&](size_t a, size_t b) {
    return std::abs(analytic.grad_features[a]) > std::abs(analytic.grad_features[b]);
  });
  std::vector<size_t> entries(order.begin(), order.begin() + 12);
  for (size_t k = 1; k <= 12; ++k) entries.push_back(k * features.size() / 13);
  std::vector<double> numeric, exact;
  const double h = 1e-6;
  for (size_t entry : entries) {
    std::vector<double> shifted = features;
    shifted[entry] += h;
    const double up =
        synthetic::run_toy_pipeline(scene, shifted, target, options, false, &analytic.fine_depths)
            .loss;
    shifted[entry] -= 2 * h;
    const double down =
        synthetic::run_toy_pipeline(scene, shifted, target, options, false, &analytic.fine_depths)
            .loss;
    numeric.push_back((up - down) / (2 * h));
    exact.push_back(analytic.grad_features[entry]);
  }
  return {"gradient vs finite differences (double)", normwise_relative_error(numeric, exact), 1e-6};
}

}  // namespace

int run_selfcheck(const std::vector<std::string>& args) {
  synthetic::RandomSceneSize size;
  synthetic::ToyPipelineOptions options;
  uint64_t seed = 1;
  std::string delta = "unit";
  po::options_description description("mvibr selfcheck options");
  std::string config;
  description.add_options()("help,h", "print this help")(
      "config", po::value(&config), "read `key = value` lines from this file (command line wins)")(
      "rays", po::value(&size.n_rays)->default_value(256), "rays in the batch")(
      "N_samples", po::value(&options.n_samples)->default_value(32), "coarse samples per ray")(
      "N_importance", po::value(&options.n_importance)->default_value(16),
      "importance samples per ray")("views", po::value(&size.n_views)->default_value(8),
                                    "source views")(
      "channels", po::value(&size.feature_channels)->default_value(16), "feature channels")(
      "inv_uniform", po::bool_switch(&options.inv_uniform), "sample uniformly in inverse depth")(
      "det", po::bool_switch(&options.deterministic), "deterministic (unjittered) samples")(
      "white_bkgd", po::bool_switch(&options.composite.white_background),
      "composite on a white background")("delta", po::value(&delta)->default_value(delta),
                                         "sample interval: unit (IBRNet) or interval (NeRF)")(
      "seed", po::value(&seed)->default_value(seed), "random seed");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(description).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: mvibr selfcheck [options]\n\n" << description;
    return 0;
  }
  if (vm.count("config")) store_config_file(vm["config"].as<std::string>(), description, &vm);
  po::notify(vm);
  if (delta == "unit") {
    options.composite.delta_mode = DeltaMode::kUnit;
  } else if (delta == "interval") {
    options.composite.delta_mode = DeltaMode::kInterval;
  } else {
    throw InvalidArgument("--delta must be 'unit' or 'interval', got '" + delta + "'");
  }
  if (size.n_rays < 1 || size.n_views < 1 || size.feature_channels < 1) {
    throw InvalidArgument("--rays, --views and --channels must be positive");
  }
  size.image_width = 64;
  size.image_height = 48;
  size.feature_width = 16;
  size.feature_height = 12;
  options.key.seed = seed;

  const synthetic::RandomScene scene = synthetic::make_random_scene(size, seed);
  const std::vector<double> target =
      synthetic::random_values(size_t(size.n_rays) * 3, 0, 1, seed + 3);
  const auto start = std::chrono::steady_clock::now();
  const auto exact = synthetic::run_toy_pipeline(scene, scene.features, target, options, true);
  const auto single =
      synthetic::run_toy_pipeline(scene, synthetic::cast_values<float>(scene.features),
                                  synthetic::cast_values<float>(target), options, true);
  const auto repeat =
      synthetic::run_toy_pipeline(scene, synthetic::cast_values<float>(scene.features),
                                  synthetic::cast_values<float>(target), options, true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::vector<Check> checks;
  checks.push_back(finite_difference_check(scene, scene.features, target, options, exact));
  checks.push_back({"float loss vs double", std::abs(single.loss - exact.loss) / exact.loss, 1e-5});
  checks.push_back({"float gradient vs double",
                    normwise_relative_error(single.grad_features, exact.grad_features), 1e-4});
  checks.push_back(
      {"float run repeated, bit-identical",
       single.loss == repeat.loss && single.grad_features == repeat.grad_features ? 0.0 : 1.0,
       0.0});

  std::printf("mvibr selfcheck: %d rays x (%d + %d) samples x %d views x %d channels, %.2f s\n",
              size.n_rays, options.n_samples, options.n_importance, size.n_views,
              size.feature_channels, seconds);
  std::printf("loss %.6f (coarse + fine masked MSE)\n", exact.loss);
  bool all_passed = true;
  for (const Check& c : checks) {
    std::printf("  %-44s error %9.2e  bound %7.1e  %s\n", c.name.c_str(), c.error, c.bound,
                c.passed() ? "ok" : "FAILED");
    all_passed = all_passed && c.passed();
  }
  if (cuda_backend_built()) {
    const int devices = cuda_device_count();
    std::printf("cuda: %d device(s)%s\n", devices,
                devices ? "; kernels are checked by the gpu tests" : ", gpu path not run here");
  }
  std::printf("selfcheck: %s\n", all_passed ? "passed" : "FAILED");
  return all_passed ? 0 : 1;
}

}  // namespace mvibr::cli
