#!/usr/bin/env bash
# Side by side, in one run on one machine: DynIBaR's training step (the two feature nets, the
# motion MLP at the target's and the anchor's time, the static and dynamic networks, every
# render, every loss, and the backward into every parameter) in mvibr (bench/dynibar_step_bench)
# and in PyTorch (bench/dynibar_torch_step.py: Debian's torch, float32, autograd), on the same
# config, sample, rays, depth samples, weights and threads, from the main loop's first update.
# Prints the median seconds of forward + backward on both sides, their ratio, rays/s, mvibr's
# phases, and both losses (equal to fp32 rounding when the two steps are the same step).
#   bench/dynibar_step_vs_pytorch.sh [BUILD_DIR] [THREADS] [CONFIG]
# CONFIG defaults to configs/dynibar_synthetic.txt (its data prepared if it is not yet).
# WARMUP (1) and STEPS (5) in the environment set how many steps run; PRECISION (fp32) mvibr's
# precision: bf16 multiplies bf16 operands in DynIBaR's networks (docs/features.md; the losses
# then differ by bf16's rounding). PyTorch runs float32 either way.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
config=${3:-configs/dynibar_synthetic.txt}
warmup=${WARMUP:-1}
steps=${STEPS:-5}
precision=${PRECISION:-fp32}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

datadir=$(sed -n 's/^[[:space:]]*datadir[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/p' \
  "$config" | tail -1)
if [[ ! -f $datadir/scene.h5 && $config == configs/dynibar_synthetic.txt ]]; then
  "$build/mvibr" prep --config configs/dynibar_synthetic_prep.txt >&2
fi
load=$(cut -d' ' -f1-3 /proc/loadavg)
mvibr_json=$("$build/bench/dynibar_step_bench" --config "$config" --warmup "$warmup" \
  --steps "$steps" --precision "$precision" --write_case "$work/case")
torch_json=$(/usr/bin/python3 bench/dynibar_torch_step.py "$work/case" "$threads" "$warmup" \
  "$steps")
/usr/bin/python3 - "$mvibr_json" "$torch_json" "$config" "$load" "$precision" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
c = ours["config"]
print(f"DynIBaR step, {sys.argv[3]}: {c['datadir']} target {c['target_view']} "
      f"({c['image'][0]}x{c['image'][1]}, {c['sources']} sources), {c['N_rand']} rays x "
      f"{c['N_samples']} samples, feature_net {c['feature_net']} {c['coarse_feat_dim']} channels, "
      f"update {ours['update']} (main loop); mvibr {sys.argv[5]}, PyTorch fp32")
print(f"{ours['threads']} threads (torch {theirs['threads']}, torch {theirs['torch']}), median of "
      f"{ours['steps']} steps after {ours['warmup']}; load average before: {sys.argv[4]}\n")
ratio = theirs["step_seconds"] / ours["step_seconds"]
print(f"{'':28s} {'mvibr':>10} {'PyTorch':>10} {'ratio':>8}")
print(f"{'forward + backward (s)':28s} {ours['step_seconds']:10.4f} {theirs['step_seconds']:10.4f} "
      f"{ratio:7.2f}x")
print(f"{'rays/s':28s} {ours['rays_per_second']:10.1f} {theirs['rays_per_second']:10.1f}")
print(f"{'loss':28s} {ours['loss']:10.6f} {theirs['loss']:10.6f}\n")
print("mvibr's phases (s):")
for name, seconds in ours["phases"].items():
    print(f"  {name:26s} {seconds:10.4f}")
print(f"PyTorch: forward {theirs['forward_seconds']:.4f} s, backward {theirs['backward_seconds']:.4f} s")
PY
