// Shard read throughput against a plain sequential read of the same file, and the time a
// training loop waits for data with the prefetching reader when each step takes 50 ms.
// Both reads run on the same file in the page cache (this machine cannot drop caches), so the
// ratio is HDF5's and the checksum's overhead over memcpy-speed I/O, not disk speed.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/random_pixel_scene.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

constexpr int kViews = 48, kWidth = 400, kHeight = 300;

// A prepared data set of kViews views of random pixels (gzip does nothing to them).
struct Dataset {
  fs::path dir = fs::temp_directory_path() / ("mvibr-io-bench-" + std::to_string(::getpid()));
  Dataset() {
    RandomPixelSceneOptions options;
    options.n_views = kViews;
    options.width = kWidth;
    options.height = kHeight;
    const Scene scene = make_random_pixel_scene(options);
    write_prepared_scene(scene, dir.string(), {1, 0, "io_bench"});
  }
  ~Dataset() { fs::remove_all(dir); }
  std::string shard() const { return (dir / shard_file_name(0, 1)).string(); }
};

const Dataset& dataset() {
  static const Dataset instance;
  return instance;
}

void BM_ShardReadFrames(benchmark::State& state) {
  const ShardReader shard(dataset().shard());
  std::vector<uint8_t> rgb(size_t(kWidth) * kHeight * 3);
  for (auto _ : state) {
    for (int f = 0; f < shard.n_frames(); ++f) shard.read_frame(f, rgb.data());
    benchmark::DoNotOptimize(rgb.data());
  }
  const double bytes = double(rgb.size()) * shard.n_frames();
  state.counters["frames_per_second"] =
      benchmark::Counter(double(shard.n_frames()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PlainSequentialRead(benchmark::State& state) {
  const std::string path = dataset().shard();
  const size_t size = fs::file_size(path);
  std::vector<char> buffer(size_t(1) << 20);
  for (auto _ : state) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    while (std::fread(buffer.data(), 1, buffer.size(), file) > 0) {
    }
    std::fclose(file);
    benchmark::DoNotOptimize(buffer.data());
  }
  state.counters["bytes_per_second"] =
      benchmark::Counter(double(size), benchmark::Counter::kIsIterationInvariantRate);
}

// A consumer that "trains" for 50 ms per sample: the time it still waits for data, per sample.
void BM_PrefetchConsumerWait(benchmark::State& state) {
  ReaderOptions options;
  options.data_dir = dataset().dir.string();
  options.num_source_views = 10;
  options.queue_depth = int(state.range(0));
  constexpr int kSamples = 12;
  double waited = 0;
  for (auto _ : state) {
    PrefetchReader reader(options);
    reader.next();  // the first sample is read with nothing to hide behind
    const double first = reader.wait_seconds();
    for (int i = 1; i < kSamples; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      benchmark::DoNotOptimize(reader.next().target.rgb.data());
    }
    waited += reader.wait_seconds() - first;
  }
  state.counters["wait_ms_per_sample"] =
      1e3 * waited / double(state.iterations()) / double(kSamples - 1);
}

BENCHMARK(BM_ShardReadFrames)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainSequentialRead)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefetchConsumerWait)->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace mvibr::data

BENCHMARK_MAIN();
