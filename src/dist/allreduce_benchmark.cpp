// All-reduce bandwidth (see allreduce_benchmark.h).
#include "mvibr/dist/allreduce_benchmark.h"

#include <chrono>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"

namespace mvibr::dist {

namespace {

// Small integers, so sums over any number of ranks are exact in float.
float pattern(size_t i, int rank) {
  return float((i * 7 + size_t(rank) * 3) % 64);
}

}  // namespace

std::vector<AllReduceResult> benchmark_all_reduce(Communicator& comm, Communicator& control,
                                                  size_t min_bytes, size_t max_bytes, int warmup,
                                                  int iterations, bool device_memory) {
  if (min_bytes < sizeof(float) || max_bytes < min_bytes || iterations < 1 || warmup < 0) {
    throw InvalidArgument(
        "all-reduce benchmark: need 4 <= min_bytes <= max_bytes, iterations "
        ">= 1, warmup >= 0");
  }
  const int n = comm.size(), rank = comm.rank();
  std::vector<float> host(max_bytes / sizeof(float));
  DeviceArray<float> device(device_memory ? host.size() : 0);
  float* buffer = device_memory ? device.data() : host.data();
  std::vector<AllReduceResult> results;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    for (int i = 0; i < warmup; ++i) comm.all_reduce(buffer, count, ReduceOp::kSum);
    control.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm.all_reduce(buffer, count, ReduceOp::kSum);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        iterations;
    control.all_reduce(&seconds, 1, ReduceOp::kMax);

    for (size_t i = 0; i < count; ++i) host[i] = pattern(i, rank);
    if (device_memory) copy_host_to_device(buffer, host.data(), count * sizeof(float));
    comm.all_reduce(buffer, count, ReduceOp::kSum);
    if (device_memory) copy_device_to_host(host.data(), buffer, count * sizeof(float));
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += pattern(i, r);
      if (host[i] != expected) ++wrong;
    }
    control.all_reduce(&wrong, 1, ReduceOp::kSum);

    AllReduceResult r;
    r.bytes = count * sizeof(float);
    r.seconds = seconds;
    r.algbw_gbs = double(r.bytes) / seconds / 1e9;
    r.busbw_gbs = r.algbw_gbs * 2.0 * double(n - 1) / double(n);
    r.wrong = size_t(wrong);
    results.push_back(r);
  }
  return results;
}

}  // namespace mvibr::dist
