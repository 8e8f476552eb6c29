#!/usr/bin/env bash
# `mpirun -np 2 mvibr train` end to end, render and eval sharing their work between the ranks
# (the same files as one process writes; a pose run's pictures too); stopping a job with `mvibr
# stop`, signals to the ranks and a request for a step, each with a checkpoint, exit 75 and an
# exact resume; and the rule that a training job ends, never hangs: ranks given different settings
# stop at start naming the key; a rank that is stopped (SIGSTOP: alive but silent, which no
# launcher notices) ends the job through the other rank's watchdog; a rank that is killed ends the
# job.
#   parallel_cli_test.sh MVIBR_BINARY SOURCE_DIR MPIEXEC
set -euo pipefail
source "$2/test/integration/lib.sh"
mpi_test_arguments "$@"
small_job "$mvibr"

echo "== 2 ranks train"
"${mpirun[@]}" "$mvibr" train "${small[@]}" --expname two --n_iters 4 --i_img 4 | tee "$work/two"
grep -q "mvibr train: 2 rank(s) on 1 host(s)" "$work/two" || fail "no job summary"
grep -q "global batch 64 rays" "$work/two" || fail "global batch is not 2 x 32"
[[ $(grep -c "^step 4/4  loss" "$work/two") -eq 1 ]] || fail "rank 1 logs, or no step 4"
[[ -f "$work/runs/two/checkpoints/ckpt-00000004.h5" ]] || fail "no checkpoint"
/usr/bin/python3 -c '
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    assert f["data_cursors"].shape == (2, 2), f["data_cursors"].shape
print("checkpoint holds both ranks cursors")
' "$work/runs/two/checkpoints/ckpt-00000004.h5"

echo "== 2 ranks share the frames of a camera path and the views of eval"
"${mpirun[@]}" "$mvibr" render --run "$work/runs/two" --path interpolate --frames 5 |
  tee "$work/path2"
[[ $(grep -c "^frame " "$work/path2") -eq 5 ]] || fail "expected 5 frame lines over both ranks"
[[ $(grep -c "^rendered 5 frame" "$work/path2") -eq 1 ]] || fail "expected one summary (rank 0)"
mv "$work/runs/two/renders" "$work/renders-two-ranks"
"$mvibr" render --run "$work/runs/two" --path interpolate --frames 5 >/dev/null
diff -r "$work/renders-two-ranks/4/path-interpolate" "$work/runs/two/renders/4/path-interpolate" ||
  fail "2 ranks rendered other frames than 1"
"${mpirun[@]}" "$mvibr" eval --run "$work/runs/two" >"$work/eval2.json"
"$mvibr" eval --run "$work/runs/two" >"$work/eval1.json"
cmp "$work/eval1.json" "$work/eval2.json" || fail "2 ranks scored the views differently"

echo "== 2 ranks share the instants of a pose run's render (3: one rank draws two)"
"$mvibr" prep --input synthetic_pose --out "$work/pose-data" --width 32 --height 32 --sequences 2 \
  --frames 3 --test_sequences 1 >/dev/null
"$mvibr" train --config "$source_dir/configs/pose_synthetic.txt" --datadir "$work/pose-data" \
  --basedir "$work/runs" --expname pose --n_iters 1 --pose_batch 1 --confidence_channels 4 \
  --confidence_hidden 8 >/dev/null
"${mpirun[@]}" "$mvibr" render --run "$work/runs/pose" | tee "$work/pose2"
[[ $(grep -c "^instant " "$work/pose2") -eq 3 ]] || fail "expected 3 instant lines over both ranks"
[[ $(grep -c "^drew 3 test instant" "$work/pose2") -eq 1 ]] || fail "expected one summary (rank 0)"
mv "$work/runs/pose/renders" "$work/pose-renders-two-ranks"
"$mvibr" render --run "$work/runs/pose" >/dev/null
diff -r "$work/pose-renders-two-ranks" "$work/runs/pose/renders" ||
  fail "2 ranks drew other pictures or another list than 1"

echo "== different settings on the two ranks"
if "$mpiexec" --oversubscribe -np 1 "$mvibr" train "${small[@]}" --expname bad --n_iters 2 : \
  -np 1 "$mvibr" train "${small[@]}" --expname bad --n_iters 2 --seed 5 >"$work/out" \
  2>"$work/err"; then
  fail "ranks with different seeds trained"
fi
grep -q "config key 'seed' differs between ranks: rank 0 has 0, rank 1 has 5" "$work/err" ||
  fail "the key is not named: $(cat "$work/err")"

echo "== all-reduce bandwidth"
"${mpirun[@]}" "$mvibr" bench allreduce --min_bytes 1K --max_bytes 1M --warmup 1 --iters 3 --json \
  >"$work/allreduce.json"
/usr/bin/python3 -c '
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["bytes"] for r in rows] == [1024 << i for i in range(11)], rows
assert all(r["ranks"] == 2 and r["backend"] == "mpi" and r["wrong"] == 0 for r in rows), rows
assert all(r["seconds"] > 0 and abs(r["busbw_gbs"] - r["algbw_gbs"]) < 1e-9 * r["algbw_gbs"] + 1e-12
           for r in rows), rows
print("allreduce json ok:", len(rows), "sizes")
' "$work/allreduce.json"
expect_error "max_bytes: unknown unit" "$mvibr" bench allreduce --max_bytes 3X
expect_error "NCCL" "$mvibr" bench allreduce --backend nccl  # no GPU here

echo "== training benchmark on 1 and 2 ranks"
for ranks in 1 2; do
  "$mpiexec" -np "$ranks" --oversubscribe "$mvibr" bench train "${small[@]}" --warmup 1 --steps 3 \
    --json --out "$work/bench-$ranks.json" >"$work/bench-$ranks.out"
  cmp -s "$work/bench-$ranks.out" "$work/bench-$ranks.json" || fail "--out differs from stdout"
done
/usr/bin/python3 -c '
import json, sys
for ranks, path in ((1, sys.argv[1]), (2, sys.argv[2])):
    r = json.load(open(path))
    assert r["bench"] == "train" and r["ranks"] == ranks and r["steps"] == 3, r
    assert r["global_batch_rays"] == 32 * ranks, r
    assert abs(r["rays_per_second"] - r["global_batch_rays"] * r["steps_per_second"]) < 1e-6 * r["rays_per_second"]
    assert len(r["busy_seconds_per_rank"]) == ranks and len(r["peak_rss_mb_per_rank"]) == ranks
    assert all(m > 10 for m in r["peak_rss_mb_per_rank"]), r
    # The phases are parts of the step: never more than it (how much of it they cover depends on
    # the load of the machine, so no lower bound).
    covered = sum(r["phases_rank0"].values()) / r["step_seconds"]
    assert all(t >= 0 for t in r["phases_rank0"].values()) and 0 < covered <= 1.0001, (covered, r)
    assert 0 <= r["allreduce_hidden_fraction"] <= 1, r
    # IBRNet has no motion phases (only DynIBaR has them).
    assert "gather_forward" in r["phases_rank0"] and not [p for p in r["phases_rank0"] if "motion" in p], r
print("bench train json ok; the phases are parts of the step")
' "$work/bench-1.json" "$work/bench-2.json"

echo "== the pose model's training benchmark counts instants, and the report reads them"
mkdir -p "$work/pose-sweep"
"$mvibr" bench train --config "$source_dir/configs/pose_synthetic.txt" --datadir "$work/pose-data" \
  --pose_batch 2 --confidence_channels 4 --confidence_hidden 8 --warmup 1 --steps 2 \
  --out "$work/pose-sweep/train-strong-r1.json" | tee "$work/pose-bench"
grep -q "global batch 2 instants" "$work/pose-bench" || fail "the pose bench does not count instants"
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["batch_unit"] == "instants" and r["global_batch_instants"] == 2, r
assert abs(r["instants_per_second"] - 2 * r["steps_per_second"]) < 1e-6 * r["instants_per_second"]
assert not [key for key in r if "rays" in key or key == "samples_per_second"], r
# The pose model reports its own phases, none of those of the ray models.
assert set(r["phases_rank0"]) == {"data_wait", "backbone_forward", "heads_forward", "loss",
                                  "loss_backward", "heads_backward", "backbone_backward",
                                  "loss_allreduce", "allreduce_exposed", "optimizer"}, r
print("pose bench train json ok")
' "$work/pose-sweep/train-strong-r1.json"
/usr/bin/python3 "$source_dir/tools/report.py" "$work/pose-sweep" >/dev/null
grep -q "| ranks | global batch (instants) | steps/s | instants/s |" "$work/pose-sweep/report.md" ||
  fail "the report does not count instants: $(head -20 "$work/pose-sweep/report.md")"
[[ ! -e "$work/runs/synthetic" ]] || fail "the benchmark wrote a run directory"

# Stops a 2-rank job the documented ways, MVIBR_STOP_TRIES times (1), with nothing left to timing:
# the job is far from its end (n_iters 100000), so the request always finds it going, and mpirun
# need not forward anything.
#   1. `mvibr stop --run DIR` once it has taken a few steps: checkpoint at step k, exit 75;
#   2. SIGUSR1 to the ranks themselves (the pids that srun, a scheduler or `pkill` reaches):
#      resumed from k, checkpoint at the next step, exit 75;
#   3. resumed with a stop request for step k + 5 written before it starts: exit 75 at k + 5,
#      with the same parameters as a job trained straight to k + 5, bit for bit.
long_run=("${mpirun[@]}" "$mvibr" train "${small[@]}" --n_iters 100000)
ckpt_name() { printf 'ckpt-%08d.h5' "$1"; }
stop_and_resume() {
  local name=stopped-$1 run k code m
  run=$work/runs/stopped-$1
  "${long_run[@]}" --expname "$name" >"$work/$name.1" 2>&1 &
  local job=$!
  wait_steps "$job" "$run" 3
  "$mvibr" stop --run "$run" >/dev/null
  code=0
  wait "$job" || code=$?
  [[ $code -eq 75 ]] || fail "exit code $code after mvibr stop, expected 75: $(cat "$work/$name.1")"
  k=$(sed -n "s|^stopped .* at step \([0-9]*\) on the stop request $run/STOP after writing .*|\1|p" \
    "$work/$name.1")
  [[ -n $k && -f $run/checkpoints/$(ckpt_name "$k") && ! -e $run/STOP ]] ||
    fail "no checkpoint at the stop, or the request is left: $(cat "$work/$name.1")"

  "${long_run[@]}" --expname "$name" >"$work/$name.2" 2>&1 &
  job=$!
  wait_steps "$job" "$run" $((k + 1))
  local pid
  for pid in $(rank_pid 0 "$name") $(rank_pid 1 "$name"); do kill -USR1 "$pid"; done
  code=0
  wait "$job" || code=$?
  [[ $code -eq 75 ]] || fail "exit code $code after SIGUSR1 to the ranks: $(cat "$work/$name.2")"
  grep -q "resuming from .*$(ckpt_name "$k") at step $k" "$work/$name.2" || fail "did not resume"
  m=$(sed -n "s|^stopped .* at step \([0-9]*\) on signal 10 (SIGUSR1) after writing .*|\1|p" \
    "$work/$name.2")
  [[ -n $m && -f $run/checkpoints/$(ckpt_name "$m") ]] || fail "no stop: $(cat "$work/$name.2")"

  "$mvibr" stop --run "$run" --after_step $((m + 5)) >/dev/null
  code=0
  "${long_run[@]}" --expname "$name" >"$work/$name.3" 2>&1 || code=$?
  [[ $code -eq 75 ]] || fail "exit code $code with a request for step $((m + 5)): $(cat "$work/$name.3")"
  grep -q "^stopped .* at step $((m + 5)) on the stop request" "$work/$name.3" ||
    fail "not stopped at step $((m + 5)): $(cat "$work/$name.3")"
  "${mpirun[@]}" "$mvibr" train "${small[@]}" --expname "straight-$1" --n_iters $((m + 5)) >/dev/null
  echo "try $1: stopped by mvibr stop at step $k, by SIGUSR1 to the ranks at step $m, by a request" \
    "for step $((m + 5)); resumed each time"
  same_parameters "$work/runs/straight-$1/checkpoints/$(ckpt_name $((m + 5)))" \
    "$run/checkpoints/$(ckpt_name $((m + 5)))"
}
echo "== stopping a job: mvibr stop, SIGUSR1 to the ranks, a request for a step; resumed exactly"
for try in $(seq "${MVIBR_STOP_TRIES:-1}"); do stop_and_resume "$try"; done

echo "== a stopped rank: the watchdog ends the job"
job_ends_after STOP stopped --watchdog_s 5
grep -q "rank 0 on .*: the .* of step [0-9]* has not completed after 5 s: another rank has failed or stalls; ending the job" \
  "$work/stopped.err" || fail "no watchdog message: $(cat "$work/stopped.err")"
echo "== a killed rank ends the job"
job_ends_after KILL killed
echo "parallel CLI tests passed"
