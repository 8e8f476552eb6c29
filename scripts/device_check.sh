#!/usr/bin/env bash
# The check run on a lent GPU machine, in one call (device `run` with carry ["device-bundle"],
# timeout_s 480): the GPU tests (every CUDA kernel, layer, network and the training step against
# the CPU backend) and the benchmarks, then a table of the GPU step against the CPU step and of
# each op's time and bandwidth. Binaries come from device-bundle/ (scripts/device_bundle.sh,
# built here with CUDA); without it, it builds them there, which needs GoogleTest and Google
# Benchmark. The kernels are also compiled with the machine's own nvcc, to catch toolchain
# differences. Every step has its share of about 6 minutes and is skipped once they are spent;
# the summary goes to standard output and $OUT/check.txt, every log to $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
out=${OUT:-$PWD/device-logs}
mkdir -p "$out"
logs=$(mktemp -d)
trap 'tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null' EXIT
deadline=$((SECONDS + 360))
say() { echo "== $*"; }
status=0
# Seconds a step may take: what is left, at most $1; 0 when the time is spent.
budget() {
  local left=$((deadline - SECONDS)) cap=${1:-600}
  ((left < 5)) && left=0
  echo $((left < cap ? left : cap))
}
# Runs a step under its budget, or says it was skipped for time (and fails the check).
timed() {
  local cap=$1
  shift
  local seconds
  seconds=$(budget "$cap")
  if ((seconds == 0)); then
    say "SKIPPED for time: $*"
    status=1
    return 1
  fi
  timeout -k 5 "$seconds" "$@"
}
main() {
  nvidia-smi -L || say "nvidia-smi found no device"
  say "$(ldd --version 2>&1 | head -1); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  python3 -m pip list 2>/dev/null | grep -E "^nvidia-(cudnn|cublas|nccl)" | tr -s ' ' | paste -sd, -

  # The lib folders of the image's nvidia-* Python packages that hold any of the given files,
  # joined by ':' (NCCL, cuDNN and cuBLAS come from there, not from the bundle).
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
  nvidia_lib=$(nvidia_package_dirs libnccl.so.2 libcudnn.so.9 libcublas.so.13 libcublasLt.so.13)
  dnn_include=$(nvidia_package_dirs cudnn.h)
  say "NCCL, cuDNN and cuBLAS libraries: ${nvidia_lib:-not found in the Python packages}"
  # The binaries' library path (not exported: nvcc, gcc and python3 keep the machine's own).
  lib_path=$nvidia_lib

  if [[ -x device-bundle/gpu_render_ops_test ]]; then
    say "binaries from device-bundle ($(cat device-bundle/REVISION 2>/dev/null))"
    bin=device-bundle
    lib_path="$lib_path:$PWD/device-bundle/lib"
    # Large libraries travel xz-compressed (scripts/device_bundle.sh): unpacked in front.
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
      lib_path="$unpacked:$lib_path"
    fi
    if command -v nvcc >/dev/null; then
      say "compiling the kernels with this machine's nvcc $(nvcc --version | grep -o 'release [0-9.]*')"
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
        timed 90 nvcc -std=c++17 -O3 "${includes[@]}" --Werror=all-warnings \
          --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -c "$source" \
          -o "/tmp/$(basename "$source").o" >"$logs/nvcc-$(basename "$source").log" 2>&1 &
        pids+=($!) sources+=("$source")
      done
      for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || {
          say "FAILED: nvcc ${sources[$i]}"
          tail -5 "$logs/nvcc-$(basename "${sources[$i]}").log"
          status=1
        }
      done
    else
      say "no nvcc on this machine: the kernels were not compiled here"
    fi
  else
    say "no device-bundle: building with CUDA here"
    bin=build-device
    if timed 300 cmake -S . -B build-device -G Ninja -DMVIBR_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/configure.log" 2>&1 &&
      timed 300 cmake --build build-device -j "$(nproc)" \
        --target gpu_render_ops_test gpu_nccl_test gpu_nn_layers_test gpu_feature_net_test \
        gpu_aggregator_test gpu_train_step_test render_ops_bench train_step_bench mvibr \
        >"$logs/build.log" 2>&1; then
      cp build-device/test/gpu_* build-device/bench/*_bench build-device/mvibr build-device/
    else
      tail -20 "$logs/configure.log" "$logs/build.log" 2>/dev/null
      say "FAILED: no build (run scripts/device_bundle.sh here and carry device-bundle)"
      return 1
    fi
  fi
  # Runs one GPU test binary (extra arguments go to it) with its log in $logs and a summary here;
  # missing libraries, a failure, or a skip (the device was not seen) fail the check.
  run_gpu_test() {
    local name=$1 what=$2
    shift 2
    say "$name ($what)"
    if env LD_LIBRARY_PATH="$lib_path" ldd "$bin/$name" | grep "not found"; then
      say "FAILED: $name is missing libraries (above)"
      status=1
      return
    fi
    timed 120 env LD_LIBRARY_PATH="$lib_path" "$bin/$name" "$@" >"$logs/$name.log" 2>&1 ||
      { say "FAILED: $name (exit $?)"; status=1; }
    grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[ {10}\]|Failure|Expected|actual|Which is|which is|error" \
      "$logs/$name.log" | head -60
    if grep -q "^\[  SKIPPED \]" "$logs/$name.log"; then
      say "FAILED: $name skipped tests, the device was not seen"
      status=1
    fi
  }

  run_gpu_test gpu_render_ops_test "every render kernel against the CPU backend"
  # Its first test is the no-device case, which skips where there is a device.
  run_gpu_test gpu_nccl_test "a one-rank NCCL communicator on device memory" \
    --gtest_filter=-Nccl.WithoutADevice*
  run_gpu_test gpu_nn_layers_test "every layer on cuBLAS, cuDNN and kernels against the CPU one"
  run_gpu_test gpu_feature_net_test "the whole ResUNet on the GPU layers against the CPU one"
  run_gpu_test gpu_aggregator_test "the aggregation network on the GPU against the CPU one"
  run_gpu_test gpu_train_step_test "the whole training step and mvibr train's loop against the CPU's"

  # The training step at IBRNet's sizes (400x300, 512 rays, 64 + 64 samples, 10 sources, small
  # feature network), on the GPU in each precision and on this machine's CPU cores, side by side:
  # bench/train_step_bench (no MPI, which the image may not have; Adam on the host in every case).
  say "train_step_bench: GPU step (fp32, bf16, fp16) vs CPU step ($(nproc) threads)"
  bench_dir=$(mktemp -d)
  if timed 60 env LD_LIBRARY_PATH="$lib_path" "$bin/mvibr" prep \
    --config configs/synthetic_bench_prep.txt --out "$bench_dir/data" >"$logs/prep.log" 2>&1; then
    for case in cuda-fp32 cuda-bf16 cuda-fp16 cpu-fp32; do
      device=${case%-*} precision=${case#*-} steps=10
      [[ $device == cpu ]] && steps=3
      timed 60 env LD_LIBRARY_PATH="$lib_path" "$bin/train_step_bench" \
        --config configs/synthetic_bench.txt --datadir "$bench_dir/data" --device "$device" \
        --precision "$precision" --warmup 2 --steps $steps >"$logs/bench-train-$case.json" \
        2>"$logs/bench-train-$case.log" ||
        { tail -5 "$logs/bench-train-$case.log"; say "FAILED: train_step_bench $case"; status=1; }
    done
    python3 - "$logs" <<'PYTHON' || { say "FAILED: the step table"; status=1; }
import json, os, sys
runs = {}
for name in ["cuda-fp32", "cuda-bf16", "cuda-fp16", "cpu-fp32"]:
    try:
        runs[name] = json.load(open(os.path.join(sys.argv[1], f"bench-train-{name}.json")))
    except (OSError, ValueError):
        pass  # that run failed; its log says why
if not runs:
    sys.exit("no train_step_bench run gave results")
print(f"{'seconds per step':24s}" + "".join(f"{n:>12s}" for n in runs))
for phase in next(iter(runs.values())).get("phases", {}):
    print(f"{phase:24s}" + "".join(f"{r.get('phases', {}).get(phase, float('nan')):12.4f}"
                                   for r in runs.values()))
for key in ("loss_first", "steps_per_second", "rays_per_second"):
    print(f"{key:24s}" + "".join(f"{r.get(key, float('nan')):12.4g}" for r in runs.values()))
if "cuda-fp32" in runs and "cpu-fp32" in runs:
    ratio = runs["cuda-fp32"]["steps_per_second"] / runs["cpu-fp32"]["steps_per_second"]
    print(f"GPU fp32 step / CPU step: {ratio:.1f}x")
PYTHON
  else
    tail -5 "$logs/prep.log"
    say "FAILED: mvibr prep"
    status=1
  fi
  rm -rf "$bench_dir"

  say "render_ops_bench (CUDA)"
  if timed 60 env LD_LIBRARY_PATH="$lib_path" "$bin/render_ops_bench" --benchmark_filter=Cuda \
    --benchmark_min_time=0.1 --benchmark_out="$logs/render_ops_bench.json" \
    --benchmark_out_format=json >"$logs/render_ops_bench.log" 2>&1; then
    python3 bench/summarize.py "$logs/render_ops_bench.json" || { say "FAILED: summarize"; status=1; }
  else
    tail -20 "$logs/render_ops_bench.log"
    say "FAILED: render_ops_bench"
    status=1
  fi
  say "device check $([[ $status == 0 ]] && echo passed || echo FAILED) in ${SECONDS}s"
    return $status
}

main 2>&1 | tee "$out/check.txt"
exit "${PIPESTATUS[0]}"
