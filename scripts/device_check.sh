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

# The lib (or include) folders of the image's nvidia-* Python packages that hold any of the given
# files, joined by ':' (NCCL, cuDNN and cuBLAS come from there, not from the bundle).
nvidia_package_dirs() {
  python3 - "$@" <<'PYTHON' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
found = []
for root in roots:
    for name in sys.argv[1:]:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", name), recursive=True)):
            if os.path.dirname(path) not in found:
                found.append(os.path.dirname(path))
print(":".join(found))
PYTHON
}
dnn_lib=$(nvidia_package_dirs libcudnn.so.9 libcublas.so.13 libcublasLt.so.13)
dnn_include=$(nvidia_package_dirs cudnn.h)
say "cuDNN and cuBLAS libraries: ${dnn_lib:-not found in the Python packages}"

if [[ -x device-bundle/gpu_render_ops_test ]]; then
  say "binaries from device-bundle ($(cat device-bundle/REVISION 2>/dev/null))"
  bin=device-bundle
  export LD_LIBRARY_PATH="$PWD/device-bundle/lib:${LD_LIBRARY_PATH:-}"
  # Large libraries travel xz-compressed (scripts/device_bundle.sh): unpacked to a temporary
  # folder in front of the bundle's.
  if compgen -G "device-bundle/lib/*.xz" >/dev/null; then
    unpacked=$(mktemp -d)
    for packed in device-bundle/lib/*.xz; do
      target="$unpacked/$(basename "${packed%.xz}")"
      if command -v xz >/dev/null; then
        xz -dc "$packed" >"$target"
      else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$packed" "$target"
      fi || { say "FAILED: unpacking $packed"; status=1; }
    done
    export LD_LIBRARY_PATH="$unpacked:$LD_LIBRARY_PATH"
  fi
  say "compiling the kernels with this machine's nvcc (in parallel)"
  includes=(-Iinclude)
  IFS=: read -r -a dnn_include_dirs <<<"${dnn_include}"
  for dir in "${dnn_include_dirs[@]}"; do includes+=("-I$dir"); done
  probe=$(mktemp --suffix=.cu)
  printf '#include <cudnn.h>\n' >"$probe"
  has_cudnn_h=$(nvcc -std=c++17 "${includes[@]}" -E "$probe" >/dev/null 2>&1 && echo yes || echo no)
  rm -f "$probe"
  pids=() sources=()
  for source in kernels/*.cu src/cuda/device.cu src/cuda/nn_context.cu src/cuda/feature_net.cu; do
    # The layers' files include cudnn.h (through nn_context.h); without it they cannot build.
    if [[ $has_cudnn_h == no ]] && grep -q 'nn_context.h\|cudnn.h' "$source"; then
      say "skipped nvcc $source: no cudnn.h on this machine"
      continue
    fi
    timeout "$(left)" nvcc -std=c++17 -O3 "${includes[@]}" --Werror=all-warnings \
      --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -c "$source" \
      -o "/tmp/$(basename "$source").o" >"$logs/nvcc-$(basename "$source").log" 2>&1 &
    pids+=($!) sources+=("$source")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { say "FAILED: nvcc ${sources[$i]}"; status=1; }
  done
  cat "$logs"/nvcc-*.log >"$logs/nvcc.log" 2>/dev/null
else
  say "no device-bundle: building with CUDA here"
  bin=build-device
  if timeout "$(left)" cmake -S . -B build-device -G Ninja -DMVIBR_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/configure.log" 2>&1 &&
    timeout "$(left)" cmake --build build-device -j "$(nproc)" \
      --target gpu_render_ops_test gpu_nccl_test gpu_nn_layers_test gpu_feature_net_test \
      gpu_aggregator_test gpu_train_step_test render_ops_bench train_step_bench mvibr \
      >"$logs/build.log" 2>&1; then
    cp build-device/test/gpu_render_ops_test build-device/test/gpu_nccl_test \
      build-device/test/gpu_nn_layers_test build-device/test/gpu_feature_net_test \
      build-device/test/gpu_aggregator_test build-device/test/gpu_train_step_test \
      build-device/bench/render_ops_bench build-device/bench/train_step_bench build-device/mvibr \
      build-device/
  else
    tail -20 "$logs/configure.log" "$logs/build.log" 2>/dev/null
    say "FAILED: no build (run scripts/device_bundle.sh here and carry device-bundle)"
    exit 1
  fi
fi

# NCCL, cuDNN and cuBLAS come from the image's nvidia-nccl, nvidia-cudnn-cu13 and nvidia-cublas
# Python packages.
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="${nccl_lib:+$nccl_lib:}${dnn_lib:+$dnn_lib:}${LD_LIBRARY_PATH:-}"

# Runs one GPU test binary with its log in $logs and a summary here; missing libraries, a
# failure, or a skip (the device was not seen) fail the check.
run_gpu_test() {
  local name=$1 what=$2
  say "$name ($what)"
  if ldd "$bin/$name" | grep "not found"; then
    say "FAILED: $name is missing libraries (above)"
    status=1
  fi
  timeout "$(left)" "$bin/$name" >"$logs/$name.log" 2>&1 || status=1
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[ {10}\]|Failure|Expected|actual|Which is|which is|error" \
    "$logs/$name.log" | head -80
  if grep -q "^\[  SKIPPED \]" "$logs/$name.log"; then
    say "FAILED: $name skipped tests, the device was not seen"
    status=1
  fi
}

run_gpu_test gpu_render_ops_test "every render kernel against the CPU backend"
run_gpu_test gpu_nccl_test "a one-rank NCCL communicator on device memory"
run_gpu_test gpu_nn_layers_test "every layer on cuBLAS, cuDNN and kernels against the CPU one"
run_gpu_test gpu_feature_net_test "the whole ResUNet on the GPU layers against the CPU one"
run_gpu_test gpu_aggregator_test "the aggregation network on the GPU against the CPU one"
run_gpu_test gpu_train_step_test "the whole training step and mvibr train's loop against the CPU's"

# The training step at IBRNet's sizes (400x300, 512 rays, 64 + 64 samples, 10 sources, small
# feature network), on the GPU in each precision and on this machine's CPU cores, side by side:
# bench/train_step_bench (no MPI, which the image may not have; Adam on the host in every case).
say "train_step_bench: GPU step (fp32, bf16, fp16) vs CPU step ($(nproc) threads)"
bench_dir=$(mktemp -d)
if timeout "$(left)" "$bin/mvibr" prep --config configs/synthetic_bench_prep.txt \
  --out "$bench_dir/data" >"$logs/prep.log" 2>&1; then
  for run in cuda-fp32 cuda-bf16 cuda-fp16 cpu-fp32; do
    device=${run%-*} precision=${run#*-} steps=10
    [[ $device == cpu ]] && steps=3
    timeout "$(left)" "$bin/train_step_bench" --config configs/synthetic_bench.txt \
      --datadir "$bench_dir/data" --device "$device" --precision "$precision" --warmup 2 \
      --steps $steps >"$logs/bench-train-$run.json" 2>"$logs/bench-train-$run.log" ||
      { tail -5 "$logs/bench-train-$run.log"; say "FAILED: train_step_bench $run"; status=1; }
  done
  python3 - "$logs" <<'PYTHON' || status=1
import json, os, sys
names = ["cuda-fp32", "cuda-bf16", "cuda-fp16", "cpu-fp32"]
runs = {n: json.load(open(os.path.join(sys.argv[1], f"bench-train-{n}.json")))
        for n in names if os.path.exists(os.path.join(sys.argv[1], f"bench-train-{n}.json"))}
print(f"{'seconds per step':24s}" + "".join(f"{n:>12s}" for n in runs))
phases = next(iter(runs.values())).get("phases", {}) if runs else {}
for phase in phases:
    print(f"{phase:24s}" + "".join(f"{r['phases'].get(phase, float('nan')):12.4f}"
                                   for r in runs.values()))
for key in ("loss_first", "steps_per_second", "rays_per_second"):
    print(f"{key:24s}" + "".join(f"{r.get(key, float('nan')):12.4g}" for r in runs.values()))
if "cuda-fp32" in runs and "cpu-fp32" in runs:
    print(f"GPU fp32 step / CPU step: {runs['cuda-fp32']['steps_per_second'] / runs['cpu-fp32']['steps_per_second']:.1f}x")
PYTHON
else
  tail -5 "$logs/prep.log"
  say "FAILED: mvibr prep"
  status=1
fi
rm -rf "$bench_dir"

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
