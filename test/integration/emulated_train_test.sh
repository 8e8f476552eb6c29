#!/usr/bin/env bash
# `mvibr train --device cuda` on the emulated CUDA device (mvibr_emulated: the same CLI, its GPU
# code on the CPU) against `mvibr train --device cpu`, at 1 rank and at 2 (NCCL over MPI):
# - every step's loss within 1e-4 relative of the CPU's, the parameters after 3 steps within 3e-4
#   of the largest (fp32 on both sides, sums in other orders: measured 8e-6 and 7e-5; Adam's
#   first steps move each weight by about the learning rate, 5e-4, whatever the gradient's size,
#   so a wrong gradient sign shows as ~1e-3);
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

# compare CPU_RUN GPU_RUN: the bounds above, on metrics.jsonl and the last checkpoints.
compare() {
  /usr/bin/python3 - "$work/runs/$1" "$work/runs/$2" <<'PYTHON'
import glob, h5py, json, numpy, sys
def losses(run):
    return [json.loads(l)["loss"] for l in open(run + "/metrics.jsonl") if '"loss"' in l]
def parameters(run):
    last = sorted(glob.glob(run + "/checkpoints/ckpt-*.h5"))[-1]
    with h5py.File(last, "r") as f:
        return numpy.concatenate([f["model"][n][()].ravel() for n in sorted(f["model"])])
cpu, gpu = losses(sys.argv[1]), losses(sys.argv[2])
assert len(cpu) == len(gpu) == 3, (cpu, gpu)
loss_error = max(abs(g - c) / abs(c) for c, g in zip(cpu, gpu))
a, b = parameters(sys.argv[1]).astype(float), parameters(sys.argv[2]).astype(float)
parameter_error = numpy.abs(a - b).max() / numpy.abs(a).max()
print(f"losses {cpu} (cpu) vs {gpu} (gpu): worst {loss_error:.2e} relative; parameters after "
      f"3 steps: {parameter_error:.2e} of their largest")
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
