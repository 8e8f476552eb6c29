// Google Benchmark of every rendering-core op at IBRNet's training sizes (512 rays, 64 + 64
// samples, 10 source views, 32 feature channels), on the CPU backend and, when a device is
// present, on CUDA. Each op reports the bytes it must move at least (inputs read once, outputs
// written once) and an estimate of its FLOPs, so that bytes/s can be put against the machine's
// measured copy bandwidth (the Copy benchmarks in the same run): bench/summarize.py makes the
// table.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "mvibr/core/device.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/testing/random_scene.h"

namespace mvibr {
namespace {

constexpr int kRays = 512, kCoarse = 64, kImportance = 64, kViews = 10, kChannels = 32;
constexpr int kFine = kCoarse + kImportance;

// Host inputs of every op, float, built once.
struct Problem {
  testing::RandomScene scene;
  std::vector<PinholeCamera<float>> cameras;
  std::vector<float> images, features, origins, directions, depths, weights, fine_depths;
  std::vector<float> rgb_features, grad_rgb_features, sigma, rgb, target, ray_mask;
  SourceViews<float> views;

  Problem() {
    testing::RandomSceneSize size;
    size.n_views = kViews;
    size.image_width = 400;
    size.image_height = 300;
    size.feature_width = 100;
    size.feature_height = 75;
    size.feature_channels = kChannels;
    size.n_rays = kRays;
    scene = testing::make_random_scene(size, 1);
    cameras = testing::cast_cameras<float>(scene.sources);
    images = testing::cast_values<float>(scene.images);
    features = testing::cast_values<float>(scene.features);
    origins.resize(kRays * 3);
    directions.resize(kRays * 3);
    const auto pixels = testing::cast_values<float>(scene.pixels);
    cpu::generate_rays(camera_cast<float>(scene.target), pixels.data(), kRays, origins.data(),
                       directions.data());
    depths.resize(size_t(kRays) * kCoarse);
    cpu::sample_coarse_depths(kRays, coarse_sampling(), {1, 1}, 0, depths.data());
    weights = testing::cast_values<float>(testing::random_values(depths.size(), 0, 1, 2));
    fine_depths.resize(size_t(kRays) * kFine);
    cpu::sample_importance_depths(kRays, importance_sampling(), depths.data(), weights.data(),
                                  {1, 1}, 0, fine_depths.data());
    views = source_views(cameras.data(), images.data(), features.data());
    rgb_features.resize(size_t(kRays) * kCoarse * kViews * (3 + kChannels));
    grad_rgb_features =
        testing::cast_values<float>(testing::random_values(rgb_features.size(), -1, 1, 3));
    sigma = testing::cast_values<float>(testing::random_values(size_t(kRays) * kFine, 0, 2, 4));
    rgb = testing::cast_values<float>(testing::random_values(size_t(kRays) * kFine * 3, 0, 1, 5));
    target = testing::cast_values<float>(testing::random_values(size_t(kRays) * 3, 0, 1, 6));
    ray_mask.assign(kRays, 1.0f);
  }

  static DepthSampling coarse_sampling() { return {2.0, 6.0, kCoarse, false, false}; }
  static ImportanceSampling importance_sampling() { return {kCoarse, kImportance, false, false}; }
  SourceViews<float> source_views(const PinholeCamera<float>* c, const float* i,
                                  const float* f) const {
    return testing::scene_views(scene, c, i, f);
  }
  size_t map_bytes() const { return (images.size() + features.size()) * sizeof(float); }
};

const Problem& problem() {
  static const Problem instance;
  return instance;
}

// Compulsory traffic and FLOP estimates per call.
struct Cost {
  double bytes, flops;
};

const size_t kGatherRows = size_t(kRays) * kCoarse * kViews;
const Cost kCoarseCost{4.0 * kRays * kCoarse, 120.0 * kRays* kCoarse};  // 10 Philox rounds
const Cost kImportanceCost{4.0 * kRays * (2 * kCoarse + kFine),
                           4.0 * kRays* kCoarse + 20.0 * kRays* kImportance};
Cost gather_cost() {
  return {4.0 * kGatherRows * (3 + kChannels + 4 + 1) + 4.0 * kRays * kCoarse +
              double(problem().map_bytes()),
          kGatherRows * (60.0 + 8.0 * (3 + kChannels))};
}
Cost gather_backward_cost() {
  return {4.0 * kGatherRows * (3 + kChannels) + 2.0 * problem().features.size() * 4 +
              4.0 * kRays * kCoarse,
          kGatherRows * (40.0 + 8.0 * kChannels)};
}
const Cost kCompositeCost{4.0 * kRays * kFine * (1 + 3 + 1 + 1) + 4.0 * kRays * 5,
                          12.0 * kRays* kFine};
const Cost kCompositeBackwardCost{4.0 * kRays * kFine * (1 + 3 + 1 + 1 + 3) + 4.0 * kRays * 3,
                                  40.0 * kRays* kFine};

void set_counters(benchmark::State& state, Cost cost) {
  state.counters["bytes_per_second"] = benchmark::Counter(
      cost.bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
  state.counters["flops_per_second"] =
      benchmark::Counter(cost.flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["floor_bytes"] = cost.bytes;
}

// --- CPU ------------------------------------------------------------------------------------

void BM_Cpu_Copy(benchmark::State& state) {
  const size_t bytes = size_t(256) << 20;  // well beyond the last-level cache
  std::vector<char> source(bytes, 1), destination(bytes);
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), bytes);
    benchmark::DoNotOptimize(destination.data());
  }
  set_counters(state, {2.0 * bytes, 0});
}

void BM_Cpu_CoarseDepths(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> out(p.depths.size());
  for (auto _ : state) cpu::sample_coarse_depths(kRays, p.coarse_sampling(), {1, 2}, 0, out.data());
  set_counters(state, kCoarseCost);
}

void BM_Cpu_ImportanceDepths(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> out(p.fine_depths.size());
  for (auto _ : state) {
    cpu::sample_importance_depths(kRays, p.importance_sampling(), p.depths.data(), p.weights.data(),
                                  {1, 2}, 0, out.data());
  }
  set_counters(state, kImportanceCost);
}

void BM_Cpu_Gather(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> rgb_features(p.rgb_features.size()), ray_diff(kGatherRows * 4),
      mask(kGatherRows);
  for (auto _ : state) {
    cpu::gather_samples(kRays, kCoarse, p.origins.data(), p.directions.data(), p.depths.data(),
                        camera_cast<float>(p.scene.target).center(), p.views,
                        GatherOutputs<float>{rgb_features.data(), ray_diff.data(), mask.data()});
  }
  set_counters(state, gather_cost());
}

void BM_Cpu_GatherBackward(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> grad_features(p.features.size(), 0.0f);
  for (auto _ : state) {
    cpu::gather_samples_backward(kRays, kCoarse, p.origins.data(), p.directions.data(),
                                 p.depths.data(), p.views, p.grad_rgb_features.data(),
                                 static_cast<float*>(nullptr), grad_features.data());
  }
  set_counters(state, gather_backward_cost());
}

void BM_Cpu_Composite(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> rgb_map(kRays * 3), depth(kRays), acc(kRays), weights(size_t(kRays) * kFine);
  for (auto _ : state) {
    cpu::composite_rays(kRays, kFine, p.sigma.data(), p.rgb.data(), p.fine_depths.data(),
                        p.directions.data(), {}, rgb_map.data(), depth.data(), acc.data(),
                        weights.data());
  }
  set_counters(state, kCompositeCost);
}

void BM_Cpu_CompositeBackward(benchmark::State& state) {
  const Problem& p = problem();
  std::vector<float> grad_sigma(size_t(kRays) * kFine), grad_rgb(size_t(kRays) * kFine * 3);
  for (auto _ : state) {
    cpu::composite_rays_backward(
        kRays, kFine, p.sigma.data(), p.rgb.data(), p.fine_depths.data(), p.directions.data(), {},
        p.target.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
        static_cast<const float*>(nullptr), grad_sigma.data(), grad_rgb.data());
  }
  set_counters(state, kCompositeBackwardCost);
}

BENCHMARK(BM_Cpu_Copy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cpu_CoarseDepths)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cpu_ImportanceDepths)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cpu_Gather)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cpu_GatherBackward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cpu_Composite)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cpu_CompositeBackward)->Unit(benchmark::kMicrosecond);

// --- CUDA -------------------------------------------------------------------------------------
// Wall time of launch + synchronize per iteration: at these sizes launches are a few
// microseconds against kernels of tens to hundreds.

#if MVIBR_HAVE_CUDA

bool skip_without_device(benchmark::State& state) {
  if (cuda_device_count() > 0) return false;
  state.SkipWithError("no CUDA device");
  return true;
}

// Device copies of the problem's inputs.
struct DeviceProblem {
  DeviceArray<PinholeCamera<float>> cameras{problem().cameras};
  DeviceArray<float> images{problem().images}, features{problem().features},
      origins{problem().origins}, directions{problem().directions}, depths{problem().depths},
      weights{problem().weights}, fine_depths{problem().fine_depths},
      grad_rgb_features{problem().grad_rgb_features}, sigma{problem().sigma}, rgb{problem().rgb},
      target{problem().target};
  SourceViews<float> views = problem().source_views(cameras.data(), images.data(), features.data());
};

const DeviceProblem& device_problem() {
  static const DeviceProblem instance;
  return instance;
}

void BM_Cuda_Copy(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const size_t bytes = size_t(1) << 30;
  DeviceArray<char> source(bytes), destination(bytes);
  for (auto _ : state) {
    copy_device_to_device(destination.data(), source.data(), bytes);
    device_synchronize();
  }
  set_counters(state, {2.0 * bytes, 0});
}

void BM_Cuda_CoarseDepths(benchmark::State& state) {
  if (skip_without_device(state)) return;
  DeviceArray<float> out(problem().depths.size());
  for (auto _ : state) {
    cuda::sample_coarse_depths(kRays, Problem::coarse_sampling(), {1, 2}, 0, out.data(), nullptr);
    device_synchronize();
  }
  set_counters(state, kCoarseCost);
}

void BM_Cuda_ImportanceDepths(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const DeviceProblem& d = device_problem();
  DeviceArray<float> out(problem().fine_depths.size());
  for (auto _ : state) {
    cuda::sample_importance_depths(kRays, Problem::importance_sampling(), d.depths.data(),
                                   d.weights.data(), {1, 2}, 0, out.data(), nullptr);
    device_synchronize();
  }
  set_counters(state, kImportanceCost);
}

void BM_Cuda_Gather(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const DeviceProblem& d = device_problem();
  DeviceArray<float> rgb_features(problem().rgb_features.size()), ray_diff(kGatherRows * 4),
      mask(kGatherRows);
  const Vec3<float> center = camera_cast<float>(problem().scene.target).center();
  for (auto _ : state) {
    cuda::gather_samples(
        kRays, kCoarse, d.origins.data(), d.directions.data(), d.depths.data(), center, d.views,
        GatherOutputs<float>{rgb_features.data(), ray_diff.data(), mask.data()}, nullptr);
    device_synchronize();
  }
  set_counters(state, gather_cost());
}

void BM_Cuda_GatherBackward(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const DeviceProblem& d = device_problem();
  DeviceArray<float> grad_features(problem().features.size());
  grad_features.zero();
  for (auto _ : state) {
    cuda::gather_samples_backward(kRays, kCoarse, d.origins.data(), d.directions.data(),
                                  d.depths.data(), d.views, d.grad_rgb_features.data(), nullptr,
                                  grad_features.data(), nullptr);
    device_synchronize();
  }
  set_counters(state, gather_backward_cost());
}

void BM_Cuda_Composite(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const DeviceProblem& d = device_problem();
  DeviceArray<float> rgb_map(kRays * 3), depth(kRays), acc(kRays), weights(size_t(kRays) * kFine);
  for (auto _ : state) {
    cuda::composite_rays(kRays, kFine, d.sigma.data(), d.rgb.data(), d.fine_depths.data(),
                         d.directions.data(), {}, rgb_map.data(), depth.data(), acc.data(),
                         weights.data(), nullptr);
    device_synchronize();
  }
  set_counters(state, kCompositeCost);
}

void BM_Cuda_CompositeBackward(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const DeviceProblem& d = device_problem();
  DeviceArray<float> grad_sigma(size_t(kRays) * kFine), grad_rgb(size_t(kRays) * kFine * 3);
  for (auto _ : state) {
    cuda::composite_rays_backward(kRays, kFine, d.sigma.data(), d.rgb.data(), d.fine_depths.data(),
                                  d.directions.data(), {}, d.target.data(), nullptr, nullptr,
                                  nullptr, grad_sigma.data(), grad_rgb.data(), nullptr);
    device_synchronize();
  }
  set_counters(state, kCompositeBackwardCost);
}

BENCHMARK(BM_Cuda_Copy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cuda_CoarseDepths)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Cuda_ImportanceDepths)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Cuda_Gather)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Cuda_GatherBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Cuda_Composite)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Cuda_CompositeBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

#endif  // MVIBR_HAVE_CUDA

}  // namespace
}  // namespace mvibr

BENCHMARK_MAIN();
