#!/usr/bin/env bash
# Side by side, in one run on one machine: IBRNet's aggregation network forward + backward at
# 512 rays x 64 samples x 10 views x 32 channels in mvibr (CPU, hand-written backward) and in
# PyTorch (Debian's torch, float32, autograd), on the same number of threads. Prints both times
# and the ratio.
#   bench/aggregator_vs_pytorch.sh [BUILD_DIR] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
mvibr_json=$(mktemp)
weights=$(mktemp -d)
trap 'rm -rf "$mvibr_json" "$weights"' EXIT
checkpoint=$("$build/bench/aggregator_bench" --write_weights "$weights")
"$build/bench/aggregator_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only \
  --benchmark_format=json >"$mvibr_json" 2>/dev/null
torch_line=$(/usr/bin/python3 bench/aggregator_torch.py "$checkpoint" "$threads" 512 64 10 32 3)
/usr/bin/python3 - "$mvibr_json" "$torch_line" "$threads" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
mvibr = next(r for r in runs if r.get("aggregate_name") == "median")["real_time"] / 1e3
torch_run = json.loads(sys.argv[2])
print(f"aggregation network fwd+bwd, 512x64x10x32, {sys.argv[3]} threads:")
print(f"  mvibr   {mvibr:8.3f} s")
print(f"  pytorch {torch_run['seconds']:8.3f} s  (torch {torch_run['torch']})")
print(f"  speed-up {torch_run['seconds'] / mvibr:.1f}x")
PY
