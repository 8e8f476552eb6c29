# Shared by the CLI integration tests (sourced): a scratch folder removed on exit, `fail`, and
# `expect_error PATTERN COMMAND...`, which requires the command to fail with exactly one line on
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
