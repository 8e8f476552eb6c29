#!/usr/bin/env bash
# Side by side, in one run on one machine: the pose model's training throughput in mvibr
# (`mpirun -np RANKS mvibr train`, each rank reading its own shards through its prefetching
# reader) and in PyTorch (bench/pose_torch_ddp.py: DistributedDataParallel over RANKS CPU
# processes, float32, the tested reference network, its instants preloaded into memory), with the
# same config, weights, batch and threads per rank. Prints instants per second on both sides and
# their ratio.
#   bench/pose_vs_pytorch.sh [BUILD_DIR] [RANKS] [THREADS_PER_RANK] [CONFIG]
# CONFIG defaults to configs/pose_synthetic.txt (its data prepared if it is not yet). WARMUP (10)
# and STEPS (40) in the environment set how many updates run; the rate is over the STEPS.
# PRECISION=bf16 runs mvibr with precision = bf16 (the backbone's convolutions on bf16 operands)
# and PyTorch twice: in float32, and under its own bf16 autocast; each row's ratio is against
# that row's PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ranks=${2:-2}
threads=${3:-1}
config=${4:-configs/pose_synthetic.txt}
warmup=${WARMUP:-10}
steps=${STEPS:-40}
precision=${PRECISION:-fp32}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

datadir=$(sed -n 's/^[[:space:]]*datadir[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/p' \
  "$config" | tail -1)
if [[ ! -f $datadir/scene.h5 && $config == configs/pose_synthetic.txt ]]; then
  "$build/mvibr" prep --config configs/pose_synthetic_prep.txt >&2
fi
load=$(cut -d' ' -f1-3 /proc/loadavg)
# mvibr: a log line after the warm-up and one after the measured steps; the second's rate is the
# STEPS' alone.
mpirun -np "$ranks" --oversubscribe -x OMP_NUM_THREADS="$threads" \
  -x OPENBLAS_NUM_THREADS="$threads" "$build/mvibr" train --config "$config" --basedir "$work" \
  --expname bench --n_iters $((warmup + steps)) --i_print "$warmup" --i_img 1000000 \
  --i_weights 1000000 --precision "$precision" > "$work/train.log"
metrics=$work/bench/metrics.jsonl
checkpoint=$(ls "$work"/bench/checkpoints/*.h5 | tail -1)
torch_json=$(for torch_precision in $(echo fp32 "$precision" | tr ' ' '\n' | uniq); do
  OMP_NUM_THREADS=$threads /usr/bin/python3 bench/pose_torch_ddp.py "$checkpoint" "$config" \
    "$ranks" "$threads" "$warmup" "$steps" "$torch_precision"
done)
/usr/bin/python3 - "$metrics" "$torch_json" "$config" "$ranks" "$threads" "$steps" "$load" \
  "$precision" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if '"instants_per_second"' in line]
ours = lines[-1]
torch_runs = [json.loads(line) for line in sys.argv[2].splitlines()]
config, ranks, threads, steps, load, precision = sys.argv[3:9]
print(f"pose model, {config}: {ranks} ranks x {threads} thread(s), rate over {steps} updates "
      f"after the warm-up; mvibr precision = {precision}; torch {torch_runs[0]['torch']}; "
      f"load average before: {load}\n")
print(f"{'PyTorch DDP':18s} {'instants/s':>12} {'s/update':>10} {'loss':>9}   "
      f"{'mvibr instants/s':>16} {'ratio':>7}")
for theirs in torch_runs:
    ratio = ours["instants_per_second"] / theirs["instants_per_second"]
    print(f"{theirs['precision']:18s} {theirs['instants_per_second']:12.1f} "
          f"{theirs['step_seconds']:10.4f} {theirs['loss']:9.5f}   "
          f"{ours['instants_per_second']:16.1f} {ratio:6.2f}x")
print(f"\nmvibr: {ours['step_seconds']:.4f} s/update, loss (last update) {ours['loss']:.5f}")
PY
