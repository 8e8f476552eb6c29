#!/usr/bin/env bash
# The check run on a lent GPU machine, in one call: the GPU tests (every CUDA kernel against the
# CPU backend) and the CUDA benchmarks, then a table of each op's time and bandwidth against the
# device's measured copy bandwidth. Binaries come from device-bundle/ (scripts/device_bundle.sh,
# built here with CUDA); on a machine that has the libraries it builds them instead. The CUDA
# library is also compiled there with the machine's own nvcc, to catch toolchain differences.
# Ends within 8 minutes; logs go to $OUT when it is set.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
logs=${OUT:-$PWD/device-logs}
mkdir -p "$logs"
deadline=$((SECONDS + 450))
left() { echo $((deadline - SECONDS > 10 ? deadline - SECONDS : 10)); }
say() { echo "== $*"; }
status=0
nvidia-smi -L || say "nvidia-smi found no device"

if [[ -x device-bundle/gpu_render_ops_test ]]; then
  say "binaries from device-bundle ($(cat device-bundle/REVISION 2>/dev/null))"
  bin=device-bundle
  export LD_LIBRARY_PATH="$PWD/device-bundle/lib:${LD_LIBRARY_PATH:-}"
  say "compiling the kernels with this machine's nvcc"
  for source in kernels/*.cu src/cuda/device.cu; do
    timeout "$(left)" nvcc -std=c++17 -O3 -Iinclude --Werror=all-warnings --expt-relaxed-constexpr \
      -gencode arch=compute_90,code=sm_90 -c "$source" -o "/tmp/$(basename "$source").o" \
      >>"$logs/nvcc.log" 2>&1 || { say "FAILED: nvcc $source"; status=1; }
  done
else
  say "no device-bundle: building with CUDA here"
  bin=build-device
  if timeout "$(left)" cmake -S . -B build-device -G Ninja -DMVIBR_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/configure.log" 2>&1 &&
    timeout "$(left)" cmake --build build-device -j "$(nproc)" \
      --target gpu_render_ops_test gpu_nccl_test render_ops_bench >"$logs/build.log" 2>&1; then
    cp build-device/test/gpu_render_ops_test build-device/test/gpu_nccl_test \
      build-device/bench/render_ops_bench build-device/
  else
    tail -20 "$logs/configure.log" "$logs/build.log" 2>/dev/null
    say "FAILED: no build (run scripts/device_bundle.sh here and carry device-bundle)"
    exit 1
  fi
fi

say "gpu_render_ops_test"
timeout "$(left)" "$bin/gpu_render_ops_test" >"$logs/gpu_render_ops_test.log" 2>&1 || status=1
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|actual|Which is" "$logs/gpu_render_ops_test.log" | head -60
if grep -q "^\[  SKIPPED \]" "$logs/gpu_render_ops_test.log"; then
  say "FAILED: tests skipped, the device was not seen"
  status=1
fi

say "gpu_nccl_test (NCCL from the image's nvidia-nccl package)"
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null || true)
LD_LIBRARY_PATH="${nccl_lib:+$nccl_lib:}${LD_LIBRARY_PATH:-}" timeout "$(left)" \
  "$bin/gpu_nccl_test" >"$logs/gpu_nccl_test.log" 2>&1 || status=1
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|Failure|error" "$logs/gpu_nccl_test.log" | head -20
if grep -q "^\[  SKIPPED \] NcclOneRank" "$logs/gpu_nccl_test.log"; then
  say "FAILED: NCCL test skipped, the device was not seen"
  status=1
fi

say "render_ops_bench (CUDA)"
if timeout "$(left)" "$bin/render_ops_bench" --benchmark_filter=Cuda --benchmark_min_time=0.1 \
  --benchmark_out="$logs/render_ops_bench.json" --benchmark_out_format=json \
  >"$logs/render_ops_bench.log" 2>&1; then
  python3 bench/summarize.py "$logs/render_ops_bench.json"
else
  tail -20 "$logs/render_ops_bench.log"
  say "FAILED: render_ops_bench"
  status=1
fi
say "device check $([[ $status == 0 ]] && echo passed || echo FAILED) in ${SECONDS}s"
exit $status
