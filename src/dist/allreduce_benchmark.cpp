// All-reduce bandwidth (see allreduce_benchmark.h).
#include "mvibr/dist/allreduce_benchmark.h"

#include <chrono>

#include "mvibr/core/error.h"

namespace mvibr::dist {

namespace {

// Small integers, so sums over any number of ranks are exact in float.
float pattern(size_t i, int rank) {
  return float((i * 7 + size_t(rank) * 3) % 64);
}

}  // namespace

std::vector<AllReduceResult> benchmark_all_reduce(Communicator& comm, size_t min_bytes,
                                                  size_t max_bytes, int warmup, int iterations) {
  if (min_bytes < sizeof(float) || max_bytes < min_bytes || iterations < 1 || warmup < 0) {
    throw InvalidArgument(
        "all-reduce benchmark: need 4 <= min_bytes <= max_bytes, iterations "
        ">= 1, warmup >= 0");
  }
  const int n = comm.size(), rank = comm.rank();
  std::vector<float> buffer(max_bytes / sizeof(float));
  std::vector<AllReduceResult> results;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    for (int i = 0; i < warmup; ++i) comm.all_reduce(buffer.data(), count, ReduceOp::kSum);
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm.all_reduce(buffer.data(), count, ReduceOp::kSum);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        iterations;
    comm.all_reduce(&seconds, 1, ReduceOp::kMax);

    for (size_t i = 0; i < count; ++i) buffer[i] = pattern(i, rank);
    comm.all_reduce(buffer.data(), count, ReduceOp::kSum);
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += pattern(i, r);
      if (buffer[i] != expected) ++wrong;
    }
    comm.all_reduce(&wrong, 1, ReduceOp::kSum);

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
