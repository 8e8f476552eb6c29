# Shared by the CLI integration tests (sourced): a scratch folder removed on exit, `fail`,
# `same_parameters`, `need_dataset` and `expect_error PATTERN COMMAND...`, which requires the command to fail with exactly one line on
# stderr containing PATTERN (the project's rule for bad input).
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
