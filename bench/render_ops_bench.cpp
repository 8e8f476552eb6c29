// Google Benchmark of every rendering-core op at IBRNet's training sizes (512 rays, 64 + 64
// samples, 10 source views, 32 feature channels), on the CPU backend and, when a device is
// present, on CUDA. The ops, their inputs and their counts (the bytes each must move at least,
// an estimate of its FLOPs) are src/bench/'s, the same as `mvibr bench kernels`; each backend's
// "copy" benchmark measures the memory bandwidth those bytes/s are put against:
// bench/summarize.py makes the table.
#include <benchmark/benchmark.h>

#include "mvibr/bench/measure.h"
#include "mvibr/bench/render_ops_benchmark.h"
#include "mvibr/core/device.h"

namespace {

using mvibr::bench::OpCase;

void register_case(const std::string& backend, const OpCase& op, bool device) {
  auto* b = benchmark::RegisterBenchmark(
      ("BM_" + backend + "_" + op.name).c_str(), [op](benchmark::State& state) {
        for (auto _ : state) op.run();
        state.counters["bytes_per_second"] =
            benchmark::Counter(op.cost.bytes, benchmark::Counter::kIsIterationInvariantRate,
                               benchmark::Counter::kIs1024);
        state.counters["flops_per_second"] =
            benchmark::Counter(op.cost.flops, benchmark::Counter::kIsIterationInvariantRate);
        state.counters["floor_bytes"] = op.cost.bytes;
      });
  b->Unit(benchmark::kMicrosecond);
  // A device op's run() synchronises: the wall time is the op's, the host mostly waits.
  if (device) b->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const mvibr::bench::RenderOpsSize size;
  register_case("Cpu", mvibr::bench::cpu_copy_case(size_t(256) << 20), false);
  for (const OpCase& op : mvibr::bench::cpu_render_op_cases(size)) register_case("Cpu", op, false);
  if (mvibr::cuda_device_count() > 0) {
    register_case("Cuda", mvibr::bench::cuda_copy_case(size_t(1) << 30), true);
    for (const OpCase& op : mvibr::bench::cuda_render_op_cases(size)) {
      register_case("Cuda", op, true);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
