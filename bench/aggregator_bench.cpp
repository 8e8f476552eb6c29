// mvibr's side of bench/aggregator_vs_pytorch.sh: IBRNet's aggregation network forward +
// backward at IBRNet's training size (512 rays, 64 samples, 10 views, 32 channels), with the
// same input recipe as the PyTorch side. `--write_weights DIR` writes the network's initial
// weights as a checkpoint in DIR (and prints its path) for the PyTorch side to load.
//   aggregator_bench [--write_weights DIR] [--benchmark_* flags]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/checkpoint.h"

namespace mvibr::nn {

constexpr int kRays = 512, kSamples = 64, kViews = 10, kChannels = 32;

// The benchmarked network, initialised from seed 0, in its own parameter set.
struct Network {
  ParameterSet set;
  IbrnetAggregator net;
  Network() : net(set, "net_coarse.", options()) {
    Initializer init(0);
    net.initialize(init);
  }
  static AggregatorOptions options() {
    AggregatorOptions o;
    o.feature_channels = kChannels;
    return o;
  }
};

void BM_AggregatorForwardBackward(benchmark::State& state) {
  Network network;
  IbrnetAggregator& net = network.net;
  const size_t rows = size_t(kRays) * kSamples * kViews;
  std::mt19937 random(0);
  std::uniform_real_distribution<float> unit(0, 1);
  std::vector<float> features(rows * (3 + kChannels)), ray_diff(rows * 4), mask(rows);
  for (float& x : features) x = unit(random);
  for (float& x : ray_diff) x = 2 * unit(random) - 1;
  for (float& x : mask) x = unit(random) < 0.9f ? 1.0f : 0.0f;
  std::vector<float> rgb(size_t(kRays) * kSamples * 3), sigma(size_t(kRays) * kSamples);
  std::vector<float> grad_rgb(rgb.size(), 1.0f), grad_sigma(sigma.size(), 1.0f);
  std::vector<float> grad_features(features.size());
  AggregatorWorkspace<float> workspace;
  // Training keeps each pass's workspace from step to step: one untimed step first, so its
  // buffers' first-touch page faults are not charged to the steady state.
  net.forward(kRays, kSamples, kViews, {features.data(), ray_diff.data(), mask.data()}, &workspace,
              rgb.data(), sigma.data());
  net.backward(workspace, grad_rgb.data(), grad_sigma.data(), grad_features.data());
  for (auto _ : state) {
    net.forward(kRays, kSamples, kViews, {features.data(), ray_diff.data(), mask.data()},
                &workspace, rgb.data(), sigma.data());
    net.backward(workspace, grad_rgb.data(), grad_sigma.data(), grad_features.data());
    benchmark::DoNotOptimize(grad_features.data());
  }
  state.counters["rows_per_second"] =
      benchmark::Counter(double(rows), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_AggregatorForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace mvibr::nn

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write_weights") {
    mvibr::nn::Network network;
    const mvibr::nn::Adam adam(network.set, mvibr::nn::AdamOptions{});
    mvibr::train::TrainingState state;
    state.cursors.resize(1);
    std::printf("%s\n",
                mvibr::train::save_checkpoint(argv[2], network.set, adam, state, 1).c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
