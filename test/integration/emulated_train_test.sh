#!/usr/bin/env bash
# `mvibr train --device cuda` on the emulated CUDA device (mvibr_emulated: the same CLI, its GPU
# code on the CPU) against `mvibr train --device cpu`, at 1 rank and at 2 (NCCL over MPI):
# - every step's loss within 1e-4 relative of the CPU's, the parameters after 3 steps within 3e-4
#   of the largest (fp32 on both sides, sums in other orders: measured 8e-6 and 7e-5; Adam's
#   first steps move each weight by about the learning rate, 5e-4, whatever the gradient's size,
#   so a wrong gradient sign shows as ~1e-3);
# - DynIBaR, its networks and training state on the device and the rest of its step on the host,
#   the same at 1 and 2 ranks (its gradients all-reduced by NCCL): each step's loss and gradient
#   norm within 1e-4 (measured 2e-8 and 5e-7). Not its parameters: the motion head starts at
#   zero, so the rest of the motion MLP starts with no gradient and Adam turns the rounding of its
#   near-zero gradients into steps of either sign (6e-4 of the largest parameter after 3 steps);
# - the pose model, its network and training state on the device (NCCL), at 2 ranks: the same
#   bounds as DynIBaR's (measured 8e-7 and 2e-6; at rates of 1e-4 Adam's steps grew the rounding
#   to 8e-5 by step 3, so it trains at 1e-5), and again with cross-view fusion (1e-6 and 4e-5);
# - a rank that is stopped (SIGSTOP) ends the NCCL job through the other's watchdog, which aborts
#   the NCCL communicator first, whether the reductions overlap the backward pass or run inline.
#   emulated_train_test.sh MVIBR MVIBR_EMULATED SOURCE_DIR MPIEXEC
set -euo pipefail
cpu_mvibr=$1
gpu_mvibr=$2
source_dir=$3
mpiexec=$4
source "$source_dir/test/integration/lib.sh"
small_job "$cpu_mvibr"
small+=(--lrate_feature 1e-4)

# compare CPU_RUN GPU_RUN [norms]: the bounds above, on metrics.jsonl and the last checkpoints;
# with `norms`, each step's gradient norm within 1e-4 relative in place of the parameters.
compare() {
  /usr/bin/python3 - "$work/runs/$1" "$work/runs/$2" "${3:-}" <<'PYTHON'
import glob, h5py, json, numpy, sys
def metrics(run, key):
    return [json.loads(l)[key] for l in open(run + "/metrics.jsonl") if '"loss"' in l]
def parameters(run):
    last = sorted(glob.glob(run + "/checkpoints/ckpt-*.h5"))[-1]
    with h5py.File(last, "r") as f:
        return numpy.concatenate([f["model"][n][()].ravel() for n in sorted(f["model"])])
def worst(key):
    cpu, gpu = metrics(sys.argv[1], key), metrics(sys.argv[2], key)
    assert len(cpu) == len(gpu) == 3, (cpu, gpu)
    print(f"{key} {cpu} (cpu) vs {gpu} (gpu)")
    return max(abs(g - c) / abs(c) for c, g in zip(cpu, gpu))
loss_error = worst("loss")
if sys.argv[3] == "norms":
    norm_error = worst("grad_norm")
    print(f"worst: losses {loss_error:.2e}, gradient norms {norm_error:.2e} relative")
    assert loss_error <= 1e-4 and norm_error <= 1e-4, "beyond the bounds"
    sys.exit()
a, b = parameters(sys.argv[1]).astype(float), parameters(sys.argv[2]).astype(float)
parameter_error = numpy.abs(a - b).max() / numpy.abs(a).max()
print(f"worst: losses {loss_error:.2e} relative; parameters after 3 steps: "
      f"{parameter_error:.2e} of their largest")
assert loss_error <= 1e-4 and parameter_error <= 3e-4, "beyond the bounds"
PYTHON
}

for ranks in 1 2; do
  echo "== $ranks rank(s): the GPU step on the emulated device against the CPU step"
  "$mpiexec" -np $ranks --oversubscribe "$cpu_mvibr" train "${small[@]}" --device cpu \
    --expname "cpu-$ranks" --n_iters 3 >"$work/cpu-$ranks.out"
  "$mpiexec" -np $ranks --oversubscribe "$gpu_mvibr" train "${small[@]}" --device cuda \
    --expname "gpu-$ranks" --n_iters 3 >"$work/gpu-$ranks.out"
  grep -q "GPU 0" "$work/gpu-$ranks.out" || fail "no device in: $(cat "$work/gpu-$ranks.out")"
  grep -q "backend nccl" "$work/gpu-$ranks.out" || fail "not NCCL: $(cat "$work/gpu-$ranks.out")"
  compare "cpu-$ranks" "gpu-$ranks"
done

echo "== DynIBaR: its networks on the emulated device against the CPU step"
"$cpu_mvibr" prep --out "$work/video" --shards 2 --rig monocular --time_steps 10 --views 10 \
  --width 32 --height 24 --time_window 4 --neighbours 8 >/dev/null
dynibar=(--model dynibar --datadir "$work/video" --basedir "$work/runs" --feature_net small
  --coarse_feat_dim 4 --fine_feat_dim 4 --N_rand 16 --N_samples 12 --N_importance 0
  --inv_uniform 1 --anti_alias_pooling 0 --num_source_views 3 --max_range 4 --init_decay_epoch 1
  --i_print 1 --i_img 100 --lrate_feature 1e-4)
for ranks in 1 2; do
  "$mpiexec" -np $ranks --oversubscribe "$cpu_mvibr" train "${dynibar[@]}" --device cpu \
    --expname "dyn-cpu-$ranks" --n_iters 3 >"$work/dyn-cpu-$ranks.out"
  "$mpiexec" -np $ranks --oversubscribe "$gpu_mvibr" train "${dynibar[@]}" --device cuda \
    --expname "dyn-gpu-$ranks" --n_iters 3 >"$work/dyn-gpu-$ranks.out"
  grep -q "GPU 0" "$work/dyn-gpu-$ranks.out" || fail "no device in: $(cat "$work/dyn-gpu-$ranks.out")"
  grep -q "backend nccl" "$work/dyn-gpu-$ranks.out" ||
    fail "not NCCL: $(cat "$work/dyn-gpu-$ranks.out")"
  compare "dyn-cpu-$ranks" "dyn-gpu-$ranks" norms
done

echo "== the pose model: its network on the emulated device against the CPU step, 2 ranks"
"$cpu_mvibr" prep --input synthetic_pose --out "$work/pose" --shards 2 --width 48 --height 48 \
  --sequences 2 --frames 2 --test_sequences 1 >/dev/null
pose=(--model pose --datadir "$work/pose" --basedir "$work/runs" --feature_net small
  --confidence_channels 4 --confidence_hidden 8 --heatmap_multiplier 10 --pose_batch 1
  --i_print 1 --i_img 100 --lrate_feature 1e-5 --lrate_mlp 1e-5)
"$mpiexec" -np 2 --oversubscribe "$cpu_mvibr" train "${pose[@]}" --device cpu \
  --expname pose-cpu --n_iters 3 >"$work/pose-cpu.out"
"$mpiexec" -np 2 --oversubscribe "$gpu_mvibr" train "${pose[@]}" --device cuda \
  --expname pose-gpu --n_iters 3 >"$work/pose-gpu.out"
grep -q "GPU 0" "$work/pose-gpu.out" || fail "no device in: $(cat "$work/pose-gpu.out")"
grep -q "backend nccl" "$work/pose-gpu.out" || fail "not NCCL: $(cat "$work/pose-gpu.out")"
compare pose-cpu pose-gpu norms
echo "== the pose model with cross-view fusion on the emulated device against the CPU, 2 ranks"
for device in cpu cuda; do
  binary=$cpu_mvibr
  [[ $device == cuda ]] && binary=$gpu_mvibr
  "$mpiexec" -np 2 --oversubscribe "$binary" train "${pose[@]}" --cross_view_fusion true \
    --fusion_init_scale 1 \
    --device "$device" --expname "fusion-$device" --n_iters 3 >"$work/fusion-$device.out"
done
grep -q "GPU 0" "$work/fusion-cuda.out" || fail "no device in: $(cat "$work/fusion-cuda.out")"
compare fusion-cpu fusion-cuda norms

mvibr=$gpu_mvibr
small+=(--device cuda)
for overlap in true false; do
  echo "== a stopped rank ends the NCCL job (overlap_allreduce = $overlap)"
  job_ends_after STOP "stopped-$overlap" --watchdog_s 5 --overlap_allreduce "$overlap"
  grep -q "rank 0.* has not completed after 5 s: another rank has failed or stalls; nccl communicator aborted" \
    "$work/stopped-$overlap.err" || fail "no stall message: $(cat "$work/stopped-$overlap.err")"
  head -1 "$work/stopped-$overlap.err"
done
echo "emulated train tests passed"
