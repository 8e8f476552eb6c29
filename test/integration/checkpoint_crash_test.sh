#!/usr/bin/env bash
# A training run killed with -9 while it writes a checkpoint, MVIBR_CRASH_TRIES times (3): the
# published network's 108 MB checkpoints written every step, the process killed as soon as a
# temporary is seen. Every time the newest complete checkpoint loads (inspect), the run resumes
# from it, the killed writer's temporary is removed at the start, and none is left at the end.
# Where the kill lands is up to the machine; what must hold afterwards holds wherever it lands.
#   checkpoint_crash_test.sh MVIBR_BINARY SOURCE_DIR
set -euo pipefail
mvibr=$1
source_dir=$2
source "$source_dir/test/integration/lib.sh"
export OMP_NUM_THREADS=1

"$mvibr" prep --out "$work/data" --shards 1 --views 12 --width 32 --height 24 >/dev/null
run=$work/runs/crash
train=("$mvibr" train --config "$source_dir/configs/synthetic.txt" --datadir "$work/data"
  --basedir "$work/runs" --expname crash --feature_net ibrnet --N_rand 32 --N_samples 4
  --N_importance 2 --num_source_views 3 --source_pool 4 --i_weights 1 --keep_checkpoints 2
  --i_img 100000)
temporaries() { compgen -G "$run/checkpoints/ckpt-*.h5.tmp-*" || true; }

caught=0
tries=${MVIBR_CRASH_TRIES:-3}
for try in $(seq "$tries"); do
  "${train[@]}" --n_iters 100000 >"$work/killed.out" 2>&1 &
  job=$!
  # Kill at the first temporary after a complete checkpoint (or at once if the run ended).
  until [[ -n $(compgen -G "$run/checkpoints/ckpt-*.h5" || true) && -n $(temporaries) ]]; do
    kill -0 "$job" 2>/dev/null || fail "the run ended: $(cat "$work/killed.out")"
    sleep 0.01
  done
  kill -9 "$job"
  wait "$job" 2>/dev/null || true
  left=$(temporaries | wc -l)
  ((left == 0)) || caught=$((caught + 1))
  newest=$(compgen -G "$run/checkpoints/ckpt-*.h5" | sort | tail -n 1)
  "$mvibr" inspect "$newest" >"$work/inspect.out" || fail "the newest checkpoint does not load"
  step=$(sed -n 's/^checkpoint at step \([0-9]*\): .*/\1/p' "$work/inspect.out")
  [[ -n $step ]] || fail "inspect gives no step: $(cat "$work/inspect.out")"
  "${train[@]}" --n_iters $((step + 1)) >"$work/resumed.out" 2>&1 ||
    fail "the run did not resume: $(cat "$work/resumed.out")"
  grep -q "resuming from $newest at step $step" "$work/resumed.out" ||
    fail "not resumed from $newest: $(cat "$work/resumed.out")"
  if ((left > 0)); then
    grep -q "removed $left checkpoint temporar" "$work/resumed.out" ||
      fail "the temporary was not reported removed: $(cat "$work/resumed.out")"
  fi
  [[ -z $(temporaries) ]] || fail "temporaries left after the resumed run: $(temporaries)"
  echo "try $try: killed with $left temporary(ies) left; resumed from step $step; none left"
done
echo "checkpoint crash test passed: $tries kills, $caught of them in the middle of a write"
