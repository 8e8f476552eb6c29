# Shared by the CLI integration tests (sourced):
# - a scratch folder $work removed on exit, and `fail`;
# - `mpi_test_arguments MVIBR SOURCE_DIR MPIEXEC`: a test that starts ranks reads its arguments;
# - `expect_error PATTERN COMMAND...`: the command fails with exactly one line on stderr
#   containing PATTERN (the project's rule for bad input);
# - `same_parameters`, `need_dataset`;
# - `small_job MVIBR`: a tiny training job on 12 prepared views (globals $mpirun, $small);
# - `rank_pid`, `wait_steps`, `job_ends_after`: a long training job and its ranks, run as
#   "${mpirun[@]}" "$mvibr" train "${small[@]}" (globals the test sets).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

expect_error() {
  local pattern=$1
  shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "succeeded: $*"; fi
  [[ $(wc -l <"$work/err") -eq 1 ]] || fail "not one line: $(cat "$work/err")"
  grep -q -- "$pattern" "$work/err" || fail "expected '$pattern' in: $(cat "$work/err")"
  echo "ok: $* -> $(cat "$work/err")"
}

# same_parameters A.h5 B.h5: two checkpoints of one step hold the same parameters, bit for bit.
same_parameters() {
  /usr/bin/python3 -c '
import h5py, numpy, sys
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    step = a.attrs["step"]
    assert step == b.attrs["step"], (step, b.attrs["step"])
    names = sorted(a["model"])
    assert names and names == sorted(b["model"]), (names, sorted(b["model"]))
    for name in names:
        assert numpy.array_equal(a["model"][name][()], b["model"][name][()]), name
print("the same parameters,", len(names), "tensors, bit for bit, at step", step)
' "$1" "$2"
}

# need_dataset NAME: the folder of real data set NAME (listed in test/datasets.tsv) under
# MVIBR_DATASETS, else ../shared/datasets, in $dataset. When it is missing, one line names it and
# its source; under CI=true the test fails, elsewhere it ends as skipped (exit 77), so run the
# checks that need no data set first.
need_dataset() {
  local table=$source_dir/test/datasets.tsv file what
  IFS=$'\t' read -r _ file what < <(grep "^$1"$'\t' "$table") || fail "data set '$1' is not in $table"
  dataset=${MVIBR_DATASETS:-$source_dir/../shared/datasets}/$1
  [[ -e $dataset/$file ]] && return 0
  local line="missing data set $1 ($what): expected $dataset/$file; put it there or point MVIBR_DATASETS at a folder holding it"
  [[ ${CI:-} == true ]] && fail "$line"
  echo "SKIPPED: $line" >&2
  exit 77
}

# Open MPI allowed to run as root (as in containers), one OpenMP thread a rank.
mpi_environment() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
}

# The arguments of a test that starts ranks, in $mvibr, $source_dir and $mpiexec, and
# mpi_environment.
mpi_test_arguments() {
  mvibr=$1
  source_dir=$2
  mpiexec=$3
  mpi_environment
}

# A 2-rank launcher in $mpirun, a tiny run's options in $small (needs $source_dir and $mpiexec)
# and its data, 12 views in 2 shards, prepared by MVIBR under $work/data.
small_job() {
  mpi_environment
  mpirun=("$mpiexec" -np 2 --oversubscribe)
  small=(--config "$source_dir/configs/synthetic.txt" --datadir "$work/data" --basedir "$work/runs"
    --N_rand 32 --N_samples 8 --N_importance 4 --num_source_views 3 --source_pool 4
    --coarse_feat_dim 4 --fine_feat_dim 4 --i_print 1)
  "$1" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24 >/dev/null
}

# The pid of rank R of the training job of run NAME (Open MPI exports the rank).
rank_pid() {
  local pid
  for pid in $(pgrep -f "$mvibr train .*--expname $2( |$)"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return
    fi
  done
}
# Waits until the job JOB (a pid) of run RUN has logged at least N steps; fails if it ends first.
wait_steps() {
  local metrics=$2/metrics.jsonl
  until [[ -f $metrics ]] && (($(grep -c '"loss"' "$metrics") >= $3)); do
    kill -0 "$1" 2>/dev/null || fail "the job of $2 ended before step $3"
    sleep 0.1
  done
}

# Starts a long 2-rank run, waits until it has taken 2 steps, sends SIGNAL to rank 1 and
# requires the job to end non-zero (a job that hangs instead meets ctest's timeout).
job_ends_after() {
  local signal=$1 name=$2
  shift 2
  "${mpirun[@]}" "$mvibr" train "${small[@]}" --expname "$name" --n_iters 100000 "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  local job=$!
  wait_steps "$job" "$work/runs/$name" 2
  local pid
  pid=$(rank_pid 1 "$name")
  [[ -n $pid ]] || fail "$name: rank 1 not found"
  local start=$SECONDS
  kill "-$signal" "$pid"
  local code=0
  wait "$job" || code=$?
  [[ $code -ne 0 ]] || fail "$name: the job exited 0"
  echo "ok: SIG$signal to rank 1 ended the job in $((SECONDS - start)) s with exit code $code"
}
