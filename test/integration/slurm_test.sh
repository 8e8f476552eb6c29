#!/usr/bin/env bash
# The project's own sbatch scripts on a real Slurm (slurmctld + slurmd + munged on localhost,
# test/integration/slurm_cluster.sh), in CPU mode on the built-in scene:
#   - slurm/train.sbatch with 2 tasks through srun --mpi=pmix, and through mpirun inside the
#     allocation: 2 ranks, checkpoint and logs written, exit 0, no requeue;
#   - stops, with each launcher: SIGUSR1 to the batch shell only (what --signal=B:USR1 does before
#     a time limit) makes the script write the run's stop request: checkpoint, exit 75, `scontrol
#     requeue`, the job starts again under the same id and resumes; `mvibr stop` stops it again,
#     and MVIBR_MAX_REQUEUES=1 keeps it stopped; its parameters equal, bit for bit, those of a job
#     trained straight to the same step. MVIBR_STOP_TRIES=10 repeats this 10 times per launcher;
#   - a real time limit's --signal=B:USR1 warning stops the job with a checkpoint and requeues it;
#   - a failed job (bad input) and a missing config end without a requeue;
#   - slurm/scaling.sbatch at 1 and 2 tasks, strong and weak, leaves its JSON results.
#   slurm_test.sh MVIBR_BINARY SOURCE_DIR
# Exits 77 (skipped) only when slurmctld cannot run on this machine at all.
set -euo pipefail
mvibr=$(realpath "$1")
source_dir=$(realpath "$2")
source "$source_dir/test/integration/lib.sh"
source "$source_dir/test/integration/slurm_cluster.sh"
# On a failure the daemons' logs tell what Slurm did; MVIBR_KEEP_SLURM_TEST=1 keeps everything.
on_exit() {
  local code=$?
  if ((code != 0 && code != 77)) && [[ -n $slurm_cluster_dir ]]; then
    "${slurm_as_root[@]}" tail -n 30 "$slurm_cluster_dir"/log/slurmctld.log \
      "$slurm_cluster_dir"/log/slurmd.log >&2 || true
  fi
  slurm_cluster_stop
  if [[ -n ${MVIBR_KEEP_SLURM_TEST:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap on_exit EXIT
started=$SECONDS
slurm_cluster_start "$work/cluster"

# The jobs' environment (sbatch exports it, and a requeued job gets it again).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MVIBR=$mvibr MVIBR_CONFIG=$source_dir/configs/synthetic.txt MVIBR_DATADIR=$work/data \
  MVIBR_BASEDIR=$work/runs
# The tiny model of parallel_cli_test.sh: a step takes milliseconds.
export MVIBR_ARGS="--N_rand 32 --N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4
  --coarse_feat_dim 4 --fine_feat_dim 4 --i_print 1 --i_img 100000"
"$mvibr" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24 >/dev/null

# CPU mode, 2 tasks of 1 core; the output file in the scratch folder.
cpu_mode=(--gpus-per-task=0 --ntasks-per-node=2 --cpus-per-task=1)
submit() {
  sbatch --parsable --chdir="$work" --output="$work/%x-%j.out" "${cpu_mode[@]}" "$@"
}
# Fails unless job ID ended in STATE with exit code CODE after RESTARTS requeues.
expect_end() {
  local id=$1 state=$2 code=$3 restarts=$4 log=$5 got
  got=$(slurm_wait_job "$id" 120)
  [[ $got == "$state" && $(slurm_job_field "$id" ExitCode) == "$code:0" &&
    $(slurm_job_field "$id" Restarts) == "$restarts" ]] ||
    fail "job $id: $got, exit code $(slurm_job_field "$id" ExitCode), restarts" \
      "$(slurm_job_field "$id" Restarts); expected $state, $code, $restarts: $(cat "$log")"
}
# Waits until job ID's run RUN has logged at least N steps; fails if the job ends first.
wait_steps() {
  local id=$1 metrics=$2/metrics.jsonl
  until [[ -f $metrics ]] && (($(wc -l <"$metrics") >= $3)); do
    job_still_going "$id"
    sleep 0.1
  done
}
# Waits until job ID's log LOG has a line matching PATTERN; fails if the job ends first.
wait_for_line() {
  until grep -q "$3" "$2" 2>/dev/null; do
    job_still_going "$1"
    sleep 0.1
  done
}
# Fails when job ID has ended for good; any other state (running, requeueing, a moment in which
# scontrol answers nothing) counts as still going.
job_still_going() {
  local state
  state=$(slurm_job_field "$1" JobState)
  case $state in
    COMPLETED | FAILED | TIMEOUT | CANCELLED | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
      fail "job $1 ended: $state: $(cat "$work"/*-"$1".out)" ;;
  esac
}
# Requeued batch jobs are not eligible to start for about two minutes (Slurm's fixed delay);
# the test lets the job start at once instead of waiting that out, once the old instance's step
# daemons are gone (slurm_wait_steps_gone says why) and the clock has entered a new second: slurmd
# revokes the old instance's job credential when it ends and refuses any credential created in
# the same second or earlier ("Job credential revoked": the new instance would fail at launch).
start_now_after_requeue() {
  local id=$1 restarts=$2
  for _ in $(seq 150); do
    [[ $(slurm_job_field "$id" Restarts) == "$restarts" && $(slurm_job_field "$id" JobState) == PENDING ]] &&
      break
    sleep 0.2
  done
  [[ $(slurm_job_field "$id" JobState) == PENDING ]] ||
    fail "job $id was not requeued: $(slurm_job_field "$id" JobState), restarts $(slurm_job_field "$id" Restarts): $(cat "$work"/*-"$id".out)"
  slurm_wait_steps_gone "$id" 30
  local revoked
  revoked=$(date +%s)
  while (($(date +%s) <= revoked)); do sleep 0.05; done
  scontrol update JobId="$id" StartTime=now
}

echo "== train.sbatch, 2 tasks, srun --mpi=pmix"
train=$(submit --job-name=train "$source_dir/slurm/train.sbatch" --n_iters 4)
log=$work/train-$train.out
expect_end "$train" COMPLETED 0 0 "$log"
grep -q "CPU mode: 2 rank(s) on 1 node(s), 1 core(s) and OMP_NUM_THREADS=1 each, srun; run train-$train" \
  "$log" || fail "no start line: $(cat "$log")"
grep -q "mvibr train: 2 rank(s) on 1 host(s)" "$log" || fail "not 2 ranks: $(cat "$log")"
grep -q "global batch 64 rays" "$log" || fail "global batch is not 2 x 32: $(cat "$log")"
[[ $(grep -c "^step 4/4  loss" "$log") -eq 1 ]] || fail "no step 4, or rank 1 logs: $(cat "$log")"
grep -q "train.sbatch: done" "$log" || fail "no end line: $(cat "$log")"
run=$work/runs/train-$train
[[ -f $run/config.txt && $(grep -c '"loss"' "$run/metrics.jsonl") -eq 4 ]] || fail "no config or metrics in $run"
/usr/bin/python3 -c '
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["step"] == 4 and f["data_cursors"].shape[0] == 2, (f.attrs["step"], f["data_cursors"].shape)
print("checkpoint at step 4 with both ranks cursors")
' "$run/checkpoints/ckpt-00000004.h5"

echo "== train.sbatch, 2 tasks, mpirun inside the allocation"
train_mpirun=$(MVIBR_LAUNCHER=mpirun submit --job-name=mpirun "$source_dir/slurm/train.sbatch" --n_iters 2)
log=$work/mpirun-$train_mpirun.out
expect_end "$train_mpirun" COMPLETED 0 0 "$log"
grep -q "mvibr train: 2 rank(s) on 1 host(s)" "$log" || fail "not 2 ranks: $(cat "$log")"
[[ -f $work/runs/mpirun-$train_mpirun/checkpoints/ckpt-00000002.h5 ]] || fail "no checkpoint: $(cat "$log")"

# Stops a job the documented ways, MVIBR_STOP_TRIES times (1) per launcher, with nothing left to
# timing: the run is far from its end (n_iters 100000), so a stop request always finds it going.
#   1. Slurm's warning (SIGUSR1 to the batch shell, as --signal=B:USR1 sends before a time limit):
#      the script writes the run's stop request; checkpoint at step k, exit 75, requeued;
#   2. the requeued job resumes from step k; `mvibr stop --run DIR` (by hand, from anywhere):
#      checkpoint at step m, exit 75, not requeued (MVIBR_MAX_REQUEUES=1);
#   3. a job trained straight to step m ends with the same parameters, bit for bit.
stop_and_resume() {
  local launcher=$1 try=$2 id log run k m straight
  id=$(MVIBR_LAUNCHER=$launcher MVIBR_MAX_REQUEUES=1 submit --job-name="stop-$launcher-$try" \
    "$source_dir/slurm/train.sbatch" --n_iters 100000)
  log=$work/stop-$launcher-$try-$id.out
  run=$work/runs/stop-$launcher-$try-$id
  wait_steps "$id" "$run" 2
  scancel --signal=USR1 --batch "$id"
  start_now_after_requeue "$id" 1
  k=$(sed -n 's/^stopping at step \([0-9]*\) on the stop request .*STOP; checkpoint .*/\1/p' "$log")
  [[ -n $k ]] || fail "$launcher: the warning did not stop the run: $(cat "$log")"
  grep -q "train.sbatch: SIGUSR1 at .*: asking the run to stop at its next step ($launcher)" "$log" ||
    fail "no signal line: $(cat "$log")"
  grep -q "requeueing job $id (requeue 1 of at most 1)" "$log" || fail "no requeue line: $(cat "$log")"
  [[ ! -e $run/STOP ]] || fail "the answered stop request is still there"
  wait_for_line "$id" "$log" "resuming from .*ckpt-0*$k.h5 at step $k"
  "$mvibr" stop --run "$run" >/dev/null
  expect_end "$id" FAILED 75 1 "$log"
  m=$(sed -n 's/^stopping at step \([0-9]*\) on the stop request .*STOP; checkpoint .*/\1/p' "$log" | tail -n 1)
  ((m > k)) || fail "$launcher: the resumed run did not stop after step $k: $(cat "$log")"
  grep -q "not requeued: 1 requeues already (MVIBR_MAX_REQUEUES=1)" "$log" || fail "no cap line: $(cat "$log")"
  [[ ! -e $run/STOP ]] || fail "the answered stop request is still there"
  straight=$(MVIBR_LAUNCHER=$launcher submit --job-name="straight-$launcher-$try" \
    "$source_dir/slurm/train.sbatch" --n_iters "$m")
  expect_end "$straight" COMPLETED 0 0 "$work/straight-$launcher-$try-$straight.out"
  echo "$launcher, try $try: stopped at step $k by Slurm's warning, requeued, resumed, stopped" \
    "by mvibr stop at step $m"
  same_parameters "$work/runs/straight-$launcher-$try-$straight/checkpoints/$(printf 'ckpt-%08d.h5' "$m")" \
    "$run/checkpoints/$(printf 'ckpt-%08d.h5' "$m")"
}
for launcher in srun mpirun; do
  echo "== stop, requeue, resume exactly: $launcher"
  for try in $(seq "${MVIBR_STOP_TRIES:-1}"); do stop_and_resume "$launcher" "$try"; done
done

echo "== a real time limit: Slurm's --signal=B:USR1 warning arrives, the job requeues"
# A 1-minute limit with the warning 50 s before it: due 10 s in, sent at slurmctld's next
# time-limit check. Wherever the ranks are by then (starting, or steps in), the stop request
# makes them checkpoint after their next step.
limited=$(submit --job-name=limited --time=1 --signal=B:USR1@50 "$source_dir/slurm/train.sbatch" \
  --n_iters 100000)
log=$work/limited-$limited.out
while [[ $(slurm_job_field "$limited" Restarts) != 1 ]]; do
  job_still_going "$limited"
  sleep 0.2
done
scancel "$limited"
for line in "train.sbatch: SIGUSR1 at" "requeueing job $limited"; do
  grep -q "$line" "$log" || fail "not stopped by the warning ($line): $(cat "$log")"
done
grep -q "^stopped .* at step [0-9]* on the stop request .*STOP after writing" "$log" ||
  fail "no checkpoint at the stop: $(cat "$log")"
echo "the warning came $(sed -n 's/^stopping at step \([0-9]*\).*/\1/p' "$log") steps into the job"

echo "== failures are not requeued"
bad=$(submit --job-name=bad "$source_dir/slurm/train.sbatch" --n_iters 4 --no_such_key 1)
log=$work/bad-$bad.out
expect_end "$bad" FAILED 2 0 "$log"
grep -q "no_such_key" "$log" || fail "the program's error is not in the log: $(cat "$log")"
grep -q "mvibr train failed with exit code 2; not requeued" "$log" || fail "no failure line: $(cat "$log")"
noconfig=$(MVIBR_CONFIG=$work/nothing.txt submit --job-name=noconfig "$source_dir/slurm/train.sbatch")
log=$work/noconfig-$noconfig.out
expect_end "$noconfig" FAILED 2 0 "$log"
[[ $(cat "$log") == "train.sbatch: MVIBR_CONFIG=$work/nothing.txt: no such file" ]] ||
  fail "not one clear line: $(cat "$log")"
# The script decides about requeues before it exits: a FAILED job without the line stays failed.
if grep -q "requeueing" "$work/bad-$bad.out" "$log"; then fail "a failed job was requeued"; fi
expect_error "not in a Slurm job" bash "$source_dir/slurm/train.sbatch"
expect_error "not in a Slurm job" bash "$source_dir/slurm/scaling.sbatch"

echo "== scaling.sbatch at 1 and 2 tasks, strong and weak"
export MVIBR_RANK_RAYS=32 MVIBR_GLOBAL_RAYS=64 MVIBR_WARMUP=1 MVIBR_STEPS=3 \
  MVIBR_ALLREDUCE_ARGS="--max_bytes 64K --iters 3" MVIBR_RESULTS=$work/results
export MVIBR_ARGS="--N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4
  --coarse_feat_dim 4 --fine_feat_dim 4"
scaling=$(submit --job-name=scaling "$source_dir/slurm/scaling.sbatch")
expect_end "$scaling" COMPLETED 0 0 "$work/scaling-$scaling.out"
/usr/bin/python3 -c '
import json, os, sys
folder = sys.argv[1]
assert sorted(os.listdir(folder)) == ["allreduce-r2.jsonl", "sweep.json", "train-strong-r1.json",
    "train-strong-r2.json", "train-weak-r1.json", "train-weak-r2.json"], sorted(os.listdir(folder))
for mode in ("strong", "weak"):
    for ranks in (1, 2):
        r = json.load(open(f"{folder}/train-{mode}-r{ranks}.json"))
        assert r["bench"] == "train" and r["ranks"] == ranks and r["steps"] == 3, r
        # strong: 64 rays per step over all ranks; weak: 32 per rank
        assert r["global_batch_rays"] == (64 if mode == "strong" else 32 * ranks), (mode, r)
        assert r["config"]["N_rand"] == (64 // ranks if mode == "strong" else 32), (mode, r)
        assert r["steps_per_second"] > 0 and r["rays_per_second"] > 0 and r["phases_rank0"], r
rows = [json.loads(line) for line in open(f"{folder}/allreduce-r2.jsonl")]
assert [r["bytes"] for r in rows] == [1024 << i for i in range(7)], rows
assert all(r["ranks"] == 2 and r["wrong"] == 0 for r in rows), rows
sweep = json.load(open(f"{folder}/sweep.json"))
assert sweep["ranks"] == "1 2" and sweep["modes"] == "strong weak", sweep
print("scaling results: strong and weak at 1 and 2 ranks, all-reduce at 2")
' "$work/results"
uneven=$(MVIBR_GLOBAL_RAYS=33 MVIBR_RESULTS=$work/uneven submit --job-name=uneven "$source_dir/slurm/scaling.sbatch")
expect_end "$uneven" FAILED 2 0 "$work/uneven-$uneven.out"
[[ $(cat "$work/uneven-$uneven.out") == "scaling.sbatch: MVIBR_GLOBAL_RAYS=33 does not split evenly over 2 ranks" ]] ||
  fail "not one clear line: $(cat "$work/uneven-$uneven.out")"
[[ ! -e $work/uneven ]] || fail "a sweep with bad input wrote results"

echo "slurm tests passed in $((SECONDS - started)) s"
