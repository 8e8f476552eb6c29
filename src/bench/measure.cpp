#include "mvibr/bench/measure.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"

namespace mvibr::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Timing time_runs(const std::function<void()>& run, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> seconds(size_t(std::max(repeats, 1)));
  for (double& s : seconds) {
    const Clock::time_point start = Clock::now();
    run();
    s = seconds_since(start);
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  Timing t;
  t.median_seconds = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  t.min_seconds = seconds.front();
  t.runs = int(n);
  return t;
}

OpCase cpu_copy_case(size_t bytes) {
  // Shared so the case can be copied; the pages are touched here, not in the first timed run.
  auto source = std::make_shared<std::vector<char>>(bytes, char(1));
  auto destination = std::make_shared<std::vector<char>>(bytes, char(0));
  return {"copy", {2.0 * double(bytes), 0}, [source, destination] {
            const size_t n = source->size();
    // One slice per thread: a single thread's memcpy does not reach the machine's
    // bandwidth, and the ops it is compared with run on every thread.
#pragma omp parallel
            {
              const size_t threads = size_t(omp_get_num_threads());
              const size_t t = size_t(omp_get_thread_num());
              const size_t begin = n * t / threads, end = n * (t + 1) / threads;
              std::memcpy(destination->data() + begin, source->data() + begin, end - begin);
            }
          }};
}

OpCase cuda_copy_case(size_t bytes) {
  auto source = std::make_shared<DeviceArray<char>>(bytes);
  auto destination = std::make_shared<DeviceArray<char>>(bytes);
  source->zero();
  return {"copy", {2.0 * double(bytes), 0}, [source, destination] {
            copy_device_to_device(destination->data(), source->data(), source->size());
            device_synchronize();
          }};
}

#if defined(__AVX2__) && defined(__FMA__)
namespace {
volatile float fma_sink;  // where the peak loop's results go, so it is not optimised away
}  // namespace
#endif

double measure_fma_peak_flops(double seconds) {
#if defined(__AVX2__) && defined(__FMA__)
  // 12 independent accumulators per thread: two FMA ports with a latency of 4 to 5 cycles need
  // 8 to 10 in flight; 12 fill the ymm registers without spilling. acc = acc * a + b converges
  // to b / (1 - a) = 1, so values stay normal (no denormal slow path) and finite.
  constexpr int kAccumulators = 12;
  constexpr long kInner = 1 << 16;
  constexpr double kFlopsPerInner = kAccumulators * 8 * 2;  // 8 lanes, multiply and add
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    double total = 0;
    float sink = 0;
#pragma omp parallel reduction(+ : total, sink)
    {
      const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
      __m256 acc[kAccumulators];
      for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(float(i));
      long rounds = 0;
      const Clock::time_point start = Clock::now();
      double elapsed = 0;
      do {
        for (long k = 0; k < kInner; ++k) {
          for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
        }
        ++rounds;
        elapsed = seconds_since(start);
      } while (elapsed < seconds / 3);
      total += double(rounds) * kInner * kFlopsPerInner / elapsed;
      __m256 sum = acc[0];
      for (int i = 1; i < kAccumulators; ++i) sum = _mm256_add_ps(sum, acc[i]);
      sink += _mm256_cvtss_f32(sum);
    }
    fma_sink = sink;
    best = std::max(best, total);
  }
  return best;
#else
  (void)seconds;
  return 0;
#endif
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

}  // namespace mvibr::bench
