#!/usr/bin/env bash
# The check for the few minutes a real GPU is lent: one device `run` with carry ["device-bundle"]
# and timeout_s 540; it ends within 8 minutes and prints one table.
# - Binaries come from device-bundle/ (scripts/device_bundle.sh, built here with CUDA).
# - Order: the GPU tests (a failing binary is rerun with MVIBR_CUDA_SYNC=1, so a fault is
#   reported at its launch), the GPU and CPU first-step losses (fp32 within 1e-4 relative,
#   bf16/fp16 within 3e-2), compute-sanitizer memcheck and racecheck of the aggregator test, the
#   benchmarks, and last the kernels compiled with the machine's own nvcc.
# - The table goes to standard output and $OUT/check.txt, every log to $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
out=${OUT:-$PWD/device-logs}
mkdir -p "$out"
logs=$(mktemp -d)
trap 'tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null' EXIT
deadline=$((SECONDS + 450))
rows=()
status=0
say() { echo "== $*"; }
# One row of the final table: step, result, seconds, detail.
record() {
  rows+=("$(printf '%-34s %-8s %6s  %s' "$1" "$2" "$3" "$4")")
  [[ $2 == passed ]] || status=1
}
# Seconds a step may take: what is left before the deadline, at most $1; 0 once spent.
budget() {
  local left=$((deadline - SECONDS)) cap=$1
  ((left < 5)) && left=0
  echo $((left < cap ? left : cap))
}
# Runs "$@" under a budget of at most $1 seconds, logging to $logs/$2.log; 124 when out of time.
timed() {
  local cap=$1 name=$2 seconds
  shift 2
  seconds=$(budget "$cap")
  ((seconds == 0)) && return 124
  timeout -k 5 "$seconds" env LD_LIBRARY_PATH="$lib_path" "$@" >"$logs/$name.log" 2>&1
}

# The lib folders of the image's nvidia-* Python packages holding any of the given files.
nvidia_package_dirs() {
  python3 - "$@" <<'PYTHON' 2>/dev/null || true
import glob, os, site, sys
found = []
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for name in sys.argv[1:]:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", name), recursive=True)):
            if os.path.dirname(path) not in found:
                found.append(os.path.dirname(path))
print(":".join(found))
PYTHON
}

# Library path for the bundle: NCCL, cuDNN, cuBLAS from the image's Python packages; the rest
# from the bundle, the large ones xz-compressed (scripts/device_bundle.sh).
prepare_bundle() {
  lib_path="$(nvidia_package_dirs libnccl.so.2 libcudnn.so.9 libcublas.so.13 libcublasLt.so.13)"
  lib_path="$lib_path:$PWD/device-bundle/lib"
  if compgen -G "device-bundle/lib/*.xz" >/dev/null; then
    local unpacked packed
    unpacked=$(mktemp -d)
    for packed in device-bundle/lib/*.xz; do
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$packed" "$unpacked/$(basename "${packed%.xz}")" || say "unpacking $packed failed"
    done
    lib_path="$unpacked:$lib_path"
  fi
}

# A GPU test binary: passes only with no failure and no skip; a failure is rerun with
# synchronous launches so the log names the failing launch.
run_gpu_test() {
  local name=$1 start=$SECONDS result detail
  shift
  if env LD_LIBRARY_PATH="$lib_path" ldd "device-bundle/$name" | grep -q "not found"; then
    record "$name" FAILED 0 "missing libraries: $(env LD_LIBRARY_PATH="$lib_path" ldd \
      "device-bundle/$name" | grep "not found" | awk '{print $1}' | paste -sd' ')"
    return
  fi
  timed 90 "$name" "device-bundle/$name" "$@"
  result=$?
  detail="$(grep -c '^\[       OK \]' "$logs/$name.log") ok"
  if grep -q "^\[  SKIPPED \]" "$logs/$name.log"; then
    record "$name" FAILED $((SECONDS - start)) "$detail; skipped tests: the device was not seen"
  elif ((result == 0)); then
    record "$name" passed $((SECONDS - start)) "$detail"
  else
    detail="$detail; exit $result; failed: $(grep '^\[  FAILED  \]' "$logs/$name.log" |
      awk '{print $4}' | sort -u | paste -sd' ')"
    grep -E "Failure|Expected|actual|Which is|which is|rror" "$logs/$name.log" | head -30
    MVIBR_CUDA_SYNC=1 timed 90 "$name-sync" "device-bundle/$name" "$@"
    detail="$detail; with MVIBR_CUDA_SYNC=1: exit $?"
    grep -E "CUDA error|rror" "$logs/$name-sync.log" | head -10
    record "$name" FAILED $((SECONDS - start)) "$detail"
  fi
}

# The training step at IBRNet's sizes on the GPU in each precision and on this machine's CPU
# cores, from the same seed: first-step losses against the CPU's, and the speed table.
run_step_bench() {
  local data start=$SECONDS case device precision steps seconds
  data=$(mktemp -d)
  if ! timed 60 prep device-bundle/mvibr prep --config configs/synthetic_bench_prep.txt \
    --out "$data/data"; then
    record "train_step_bench" FAILED $((SECONDS - start)) "mvibr prep failed"
    return
  fi
  for case in cuda-fp32 cuda-bf16 cuda-fp16 cpu-fp32; do
    device=${case%-*} precision=${case#*-} steps=10
    [[ $device == cpu ]] && steps=3
    seconds=$(budget 60)
    ((seconds == 0)) && continue
    timeout -k 5 "$seconds" env LD_LIBRARY_PATH="$lib_path" device-bundle/train_step_bench \
      --config configs/synthetic_bench.txt --datadir "$data/data" --device "$device" \
      --precision "$precision" --warmup 2 --steps $steps >"$logs/bench-train-$case.json" \
      2>"$logs/bench-train-$case.log"
  done
  local verdict
  verdict=$(python3 - "$logs" <<'PYTHON'
import json, os, sys
runs = {}
for name in ["cuda-fp32", "cuda-bf16", "cuda-fp16", "cpu-fp32"]:
    try:
        runs[name] = json.load(open(os.path.join(sys.argv[1], f"bench-train-{name}.json")))
    except (OSError, ValueError):
        pass
print(f"{'seconds per step':24s}" + "".join(f"{n:>12s}" for n in runs), file=sys.stderr)
for phase in next(iter(runs.values()), {}).get("phases", {}):
    print(f"{phase:24s}" + "".join(f"{r['phases'].get(phase, float('nan')):12.4f}"
                                   for r in runs.values()), file=sys.stderr)
for key in ("loss_first", "steps_per_second", "rays_per_second"):
    print(f"{key:24s}" + "".join(f"{r.get(key, float('nan')):12.6g}" for r in runs.values()),
          file=sys.stderr)
bounds = {"cuda-fp32": 1e-4, "cuda-bf16": 3e-2, "cuda-fp16": 3e-2}
if "cpu-fp32" not in runs:
    print("no CPU run")
    sys.exit(1)
cpu = runs["cpu-fp32"]["loss_first"]
words, ok = [], True
for name, bound in bounds.items():
    if name not in runs:
        words.append(f"{name} missing")
        ok = False
        continue
    error = abs(runs[name]["loss_first"] - cpu) / abs(cpu)
    ok = ok and error <= bound
    words.append(f"{name} {error:.1e} (<= {bound:g})")
if "cuda-fp32" in runs:
    ratio = runs["cuda-fp32"]["steps_per_second"] / runs["cpu-fp32"]["steps_per_second"]
    words.append(f"fp32 step {ratio:.1f}x the CPU's")
print("first-step loss vs CPU: " + ", ".join(words))
sys.exit(0 if ok else 1)
PYTHON
  )
  record "train_step_bench (GPU vs CPU)" "$([[ $? == 0 ]] && echo passed || echo FAILED)" \
    $((SECONDS - start)) "$verdict"
  rm -rf "$data"
}

# compute-sanitizer's memcheck and racecheck over the aggregator test's GPU cases.
run_sanitizer() {
  local tool=$1 start=$SECONDS result
  if ! command -v compute-sanitizer >/dev/null; then
    record "compute-sanitizer $tool" FAILED 0 "no compute-sanitizer on this machine"
    return
  fi
  timed 75 "sanitizer-$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 \
    device-bundle/gpu_aggregator_test
  result=$?
  record "compute-sanitizer $tool" "$([[ $result == 0 ]] && echo passed || echo FAILED)" \
    $((SECONDS - start)) "exit $result; $(grep -E '========= (ERROR SUMMARY|RACECHECK SUMMARY)' \
      "$logs/sanitizer-$tool.log" | head -1 | sed 's/=* *//')"
}

run_render_bench() {
  local start=$SECONDS
  if timed 60 render_ops_bench device-bundle/render_ops_bench --benchmark_filter=Cuda \
    --benchmark_min_time=0.1 --benchmark_out="$logs/render_ops_bench.json" \
    --benchmark_out_format=json; then
    python3 bench/summarize.py "$logs/render_ops_bench.json"
    record "render_ops_bench" passed $((SECONDS - start)) "table above"
  else
    tail -5 "$logs/render_ops_bench.log"
    record "render_ops_bench" FAILED $((SECONDS - start)) "see logs"
  fi
}

# The kernels compiled with this machine's nvcc (sm_90), to catch toolchain differences.
compile_here() {
  local start=$SECONDS includes=(-Iinclude) dir source failed=()
  command -v nvcc >/dev/null || { record "nvcc sm_90 compile" FAILED 0 "no nvcc"; return; }
  IFS=: read -r -a dirs <<<"$(nvidia_package_dirs cudnn.h nccl.h)"
  for dir in "${dirs[@]}"; do includes+=("-I$dir"); done
  local pids=() sources=()
  for source in kernels/*.cu src/cuda/*.cu; do
    timed 120 "nvcc-$(basename "$source")" nvcc -std=c++17 -O3 "${includes[@]}" -Isrc \
      --Werror=all-warnings --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 \
      -c "$source" -o "/tmp/$(basename "$source").o" &
    pids+=($!) sources+=("$source")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("$(basename "${sources[$i]}")")
  done
  record "nvcc $(nvcc --version | grep -o 'release [0-9.]*') sm_90" \
    "$([[ ${#failed[@]} == 0 ]] && echo passed || echo FAILED)" $((SECONDS - start)) \
    "${#sources[@]} files; failed: ${failed[*]:-none}"
}

main() {
  nvidia-smi -L || say "nvidia-smi found no device"
  [[ -x device-bundle/gpu_render_ops_test ]] ||
    { say "no device-bundle: run scripts/device_bundle.sh here and carry it"; return 1; }
  say "device-bundle $(cat device-bundle/REVISION 2>/dev/null)"
  prepare_bundle
  run_gpu_test gpu_render_ops_test
  run_gpu_test gpu_nccl_test --gtest_filter=-Nccl.WithoutADevice*
  run_gpu_test gpu_nn_layers_test
  run_gpu_test gpu_feature_net_test
  run_gpu_test gpu_aggregator_test
  run_gpu_test gpu_motion_mlp_test
  run_gpu_test gpu_train_step_test
  run_gpu_test gpu_dynibar_step_test
  run_step_bench
  run_sanitizer memcheck
  run_sanitizer racecheck
  run_render_bench
  compile_here
  echo
  printf '%-34s %-8s %6s  %s\n' step result seconds detail
  printf '%s\n' "${rows[@]}"
  say "device check $([[ $status == 0 ]] && echo passed || echo FAILED) in ${SECONDS}s"
  return $status
}

main 2>&1 | tee "$out/check.txt"
exit "${PIPESTATUS[0]}"
