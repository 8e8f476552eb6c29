// Measuring a piece of work and the machine's ceilings to put it against: the median time of
// repeated runs, the copy bandwidth of host or device memory, and the FMA peak of the host.
// Used by `mvibr bench kernels` and bench/render_ops_bench, so both report the same numbers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace mvibr::bench {

// The compulsory traffic of one call (inputs read once, outputs written once) and an estimate
// of its floating-point operations.
struct OpCost {
  double bytes = 0;
  double flops = 0;
};

// One call of an op bound to its inputs and outputs; run() returns when the work is done (on a
// device, after synchronising).
struct OpCase {
  std::string name;
  OpCost cost;
  std::function<void()> run;
};

struct Timing {
  double median_seconds = 0;
  double min_seconds = 0;
  int runs = 0;
};

// `warmup` untimed runs, then `repeats` timed ones. The median, not the mean: on a shared machine
// a few runs are descheduled, and they should not move the typical time.
Timing time_runs(const std::function<void()>& run, int warmup, int repeats);

// memcpy of `bytes` (well beyond the last-level cache) split over the OpenMP threads, as the ops
// run; cost: `bytes` read and `bytes` written.
OpCase cpu_copy_case(size_t bytes);
// Device-to-device copy of `bytes` on the current CUDA device. Throws RuntimeFailure in a build
// without CUDA or without a device.
OpCase cuda_copy_case(size_t bytes);

// FLOP/s of independent AVX2 fused multiply-adds on every OpenMP thread for about `seconds`
// (best of three trials): the widest arithmetic this build's host code uses (x86-64-v3). 0 when
// the build has no FMA (-DMVIBR_ARCH= for baseline x86-64).
double measure_fma_peak_flops(double seconds);

// "Intel(R) Xeon(R) ..." from /proc/cpuinfo, or "unknown cpu".
std::string cpu_model_name();

}  // namespace mvibr::bench
