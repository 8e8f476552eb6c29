#!/usr/bin/env bash
# Side by side, in one run on one machine: IBRNet's whole training step (feature network,
# coarse pass, importance samples, fine pass, masked MSE, backward, Adam) in mvibr
# (bench/train_step_bench) and in PyTorch (bench/ibrnet_torch_step.py: Debian's torch, float32,
# autograd), on the same config, sample, ray batch, weights, Philox uniforms and threads. Prints
# the median seconds per phase on both sides and their ratio, steps/s and rays/s, and the
# first-step losses: they agree to fp32 rounding when the two steps are the same step.
#   bench/train_step_vs_pytorch.sh [BUILD_DIR] [THREADS] [CONFIG]
# Without CONFIG: the built-in scene at 400x300 (configs/synthetic_bench.txt), then LLFF fern
# (configs/fern.txt) when ../shared/datasets/llff_fern is there, each prepared if it is not yet.
# With CONFIG: that config alone, on data already prepared. WARMUP (1) and STEPS (5) in the
# environment set how many steps run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
config=${3:-}
warmup=${WARMUP:-1}
steps=${STEPS:-5}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

datadir_of() {  # the datadir a config file names
  sed -n 's/^[[:space:]]*datadir[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$1" | tail -1
}

# Prepares the config's data with the prep config unless it is there already.
prepare() {
  local datadir
  datadir=$(datadir_of "$1")
  if [[ ! -f $datadir/scene.h5 ]]; then
    "$build/mvibr" prep --config "$2" >&2
  fi
}

compare() {
  local name=$1 train_config=$2 case_dir=$work/$1 mvibr_json torch_json load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  mvibr_json=$("$build/bench/train_step_bench" --config "$train_config" --warmup "$warmup" \
    --steps "$steps" --write_case "$case_dir")
  torch_json=$(/usr/bin/python3 bench/ibrnet_torch_step.py "$case_dir" "$threads" "$warmup" \
    "$steps")
  rm -rf "$case_dir"
  /usr/bin/python3 - "$mvibr_json" "$torch_json" "$train_config" "$load" <<'PY'
import json, sys
ours, torch_run = json.loads(sys.argv[1]), json.loads(sys.argv[2])
c = ours["config"]
print(f"\nIBRNet training step, {sys.argv[3]}: {c['datadir']} view {c['target_view']} "
      f"({c['image'][0]}x{c['image'][1]}, {c['num_source_views']} sources), {c['N_rand']} rays, "
      f"{c['N_samples']}+{c['N_importance']} samples, feature_net {c['feature_net']} "
      f"{c['coarse_feat_dim']}+{c['fine_feat_dim']}")
print(f"{ours['threads']} threads (torch {torch_run['threads']}, torch {torch_run['torch']}), "
      f"median of {ours['steps']} steps after {ours['warmup']}; load average before: "
      f"{sys.argv[4]}\n")
mine, theirs = ours["phases"], torch_run["phases"]
forward = ["features_forward", "sampling", "gather_forward", "aggregator_forward",
           "composite_loss"]
backward = ["composite_backward", "aggregator_backward", "gather_backward", "features_backward"]

def row(name, a, b):
    ratio = f"{b / a:7.2f}x" if a and b else ""
    bs = f"{b:10.4f}" if b is not None else f"{'-':>10}"
    print(f"{name:24s} {a:10.4f} {bs} {ratio}")

print("ratio: PyTorch s / mvibr s, mvibr's speed-up; PyTorch times its backward as a whole")
print(f"{'phase':24s} {'mvibr s':>10} {'PyTorch s':>10} {'ratio':>8}")
for name in forward:
    row(name, mine[name], theirs[name])
row("backward (all)", sum(mine[n] for n in backward), theirs["backward"])
for name in backward:
    row("  " + name, mine[name], None)
row("optimizer", mine["optimizer"], theirs["optimizer"])
row("step", ours["step_seconds"], torch_run["step_seconds"])
print(f"\n{'steps/s':24s} {ours['steps_per_second']:10.3f} {torch_run['steps_per_second']:10.3f}")
print(f"{'rays/s':24s} {ours['rays_per_second']:10.1f} {torch_run['rays_per_second']:10.1f}")
print(f"mvibr is {torch_run['step_seconds'] / ours['step_seconds']:.2f}x the PyTorch step")
for which in ["first", "last"]:
    a, b = ours["loss_" + which], torch_run["loss_" + which]
    print(f"{which}-step loss: mvibr {a:.8f}, PyTorch {b:.8f}, relative difference "
          f"{abs(a - b) / abs(b):.1e}")
PY
}

if [[ -n $config ]]; then
  [[ -f $(datadir_of "$config")/scene.h5 ]] ||
    { echo "$(datadir_of "$config"): not prepared (mvibr prep)" >&2; exit 1; }
  compare "$(basename "$config" .txt)" "$config"
  exit 0
fi
prepare configs/synthetic_bench.txt configs/synthetic_bench_prep.txt
compare synthetic configs/synthetic_bench.txt
if [[ -d ../shared/datasets/llff_fern ]]; then
  prepare configs/fern.txt configs/fern_prep.txt
  compare fern configs/fern.txt
fi
