#!/usr/bin/env bash
# Monitoring through the CLI: TensorBoard (the real package) reads the event files of a 1-rank
# and a 2-rank run and finds metrics.jsonl's tags, steps and values and the held-out images; the
# progress line is redrawn in place in a pseudo-terminal and printed as plain i_print lines into
# a file; a rank slowed down (stopped most of the time) is named in the imbalance warning.
#   monitoring_cli_test.sh MVIBR_BINARY SOURCE_DIR MPIEXEC
set -euo pipefail
source "$2/test/integration/lib.sh"
mpi_test_arguments "$@"

# Where scripts/setup.sh installs tensorboard (the same default).
python_env=${MVIBR_PYTHON_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mvibr/python}
tb_python=$python_env/bin/python
"$tb_python" -c "import tensorboard" 2>/dev/null ||
  fail "no tensorboard in $python_env: run scripts/setup.sh"

base=(--config "$source_dir/configs/synthetic.txt" --datadir "$work/data" --basedir "$work/runs"
  --N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4 --coarse_feat_dim 4
  --fine_feat_dim 4)
small=("${base[@]}" --N_rand 32)  # read_events.py expects 32 rays per rank
"$mvibr" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24 >/dev/null

echo "== 1 rank into a file: plain lines, event files TensorBoard reads"
"$mvibr" train "${small[@]}" --expname one --n_iters 6 --i_print 2 --i_img 3 >"$work/one.log"
cat "$work/one.log"
[[ $(grep -c "^step [246]/6  loss [0-9.]*  psnr [0-9.]*  rays/s [0-9]*  data wait" "$work/one.log") -eq 3 ]] ||
  fail "expected plain lines at steps 2, 4 and 6"
if grep -q $'\r' "$work/one.log"; then fail "carriage returns in a log file"; fi
"$tb_python" "$source_dir/test/integration/read_events.py" "$work/runs/one" 32 24 1

echo "== 2 ranks: every rank's busy time, TensorBoard reads rank 0's files"
"$mpiexec" -np 2 --oversubscribe "$mvibr" train "${small[@]}" --expname two --n_iters 6 \
  --i_print 3 --i_img 6 >"$work/two.log"
"$tb_python" "$source_dir/test/integration/read_events.py" "$work/runs/two" 32 24 2
[[ $(find "$work/runs/two/tb" -type f | wc -l) -eq 1 ]] || fail "rank 1 wrote event files too"

echo "== in a pseudo-terminal: the line is redrawn in place"
# script(1) runs the command on a new pseudo-terminal and copies what it shows to stdout.
script -qfec "$(printf '%q ' "$mvibr" train "${small[@]}" --expname tty --n_iters 40 --i_print 20 \
  --i_img 20)" /dev/null >"$work/tty.log"
cat -v "$work/tty.log" | tail -c 600
grep -q $'\rstep [0-9]*/40  [0-9.]* steps/s  [0-9]* rays/s  eta [0-9a-z]*  loss [0-9.]*  psnr [0-9.]*\e\[K' \
  "$work/tty.log" || fail "no line redrawn in place"
[[ $(grep -o $'\rstep [0-9]*/40 ' "$work/tty.log" | wc -l) -ge 2 ]] || fail "drawn once only"
if grep -q "^step 20/40  loss" "$work/tty.log"; then fail "plain lines on a terminal"; fi
# Validation lines stay, and the last progress line is redrawn under them and ended.
grep -q $'\r\e\[Kstep 40/40  held-out view 0  psnr' "$work/tty.log" || fail "no held-out line"
grep -q $'\r\e\[Kstep 40/40  validating (every i_img = 20 steps): rendering held-out view 0' \
  "$work/tty.log" || fail "no line before the validation"
grep -q $'step 40/40  [0-9.]* steps/s.*\e\[K\r\e\[Kstep 40/40  held-out view 0  psnr [0-9.]*  ssim [0-9.]*\r\?\nstep 40/40  .*\e\[K\r\?\ntrained ' \
  "$work/tty.log" || fail "the last progress line is not redrawn after the held-out line"

echo "== a slowed rank: the imbalance warning names it"
# Rank 1 runs a quarter of the time: stopped (SIGSTOP) for 150 ms of every 200, like a node
# whose CPU is taken by something else. Stopping it, not loading its core, keeps it the slow rank
# whatever else the machine runs. Nothing races the run: it is far from its end, only intervals
# that began after the slowing started are judged, and mvibr stop ends it once it has logged 3.
slowed=("${base[@]}" --expname slow --N_rand 64 --n_iters 100000 --i_print 10 --i_img 100000)
"$mpiexec" --oversubscribe -np 2 "$mvibr" train "${slowed[@]}" >"$work/slow.log" 2>&1 &
job=$!
metrics=$work/runs/slow/metrics.jsonl
intervals() { if [[ -f $metrics ]]; then grep -c '"loss"' "$metrics" || true; else echo 0; fi; }
rank1=""
until [[ -n $rank1 ]]; do
  kill -0 "$job" 2>/dev/null || fail "the slowed job ended: $(cat "$work/slow.log")"
  for pid in $(pgrep -f "$mvibr train .*--expname slow " || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      rank1=$pid
    fi
  done
  sleep 0.05
done
while kill -STOP "$rank1" 2>/dev/null; do
  sleep 0.15
  kill -CONT "$rank1" 2>/dev/null || break
  sleep 0.05
done &
throttle=$!
# The interval in progress when the slowing began is partly fast: judge the ones after it.
first_judged=$(($(intervals) + 2))
until (($(intervals) >= first_judged + 2)); do
  kill -0 "$job" 2>/dev/null || fail "the slowed job ended: $(cat "$work/slow.log")"
  sleep 0.1
done
"$mvibr" stop --run "$work/runs/slow" >/dev/null
code=0
wait "$job" || code=$?
kill "$throttle" 2>/dev/null || true
wait "$throttle" 2>/dev/null || true
kill -CONT "$rank1" 2>/dev/null || true
[[ $code -eq 75 ]] || fail "the slowed job did not stop on the request ($code): $(cat "$work/slow.log")"
/usr/bin/python3 -c '
import json, re, sys
log, metrics, first = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
lines = [json.loads(l) for l in open(metrics) if "\"loss\"" in l][first - 1:]
assert len(lines) >= 3, lines
assert all(l["slowest_rank"] == 1 and l["imbalance"] > 0.2 for l in lines), lines
phases = ("data_wait|features_forward|sampling|motion_forward|gather_forward|aggregator_forward"
          "|composite_loss|composite_backward|aggregator_backward|gather_backward|motion_backward"
          "|features_backward|optimizer|other")
warned = {int(m.group(1)): m.group(2) for m in re.finditer(
    r"^warning: load imbalance over steps ([0-9]+)-[0-9]+: rank ([0-9]+) is busy [0-9.]+ s per "
    r"update, [0-9]+% longer than the fastest rank \([0-9.]+ s\); its slow phase is (?:" + phases +
    r") \(", log, re.M)}
judged = [l["step"] - 9 for l in lines]
assert all(warned.get(s) == "1" for s in judged), ("no warning naming rank 1", judged, warned)
print("slowed rank 1 named in", len(lines), "intervals; imbalances",
      [round(l["imbalance"], 2) for l in lines])
' "$work/slow.log" "$metrics" "$first_judged"
echo "monitoring CLI tests passed"
