#!/usr/bin/env bash
# `mvibr bench io` at 1 and 2 ranks and `mvibr bench kernels` on tiny inputs: every JSON result
# has the build, host, ranks and config, and its numbers agree with each other (rates are bytes
# over seconds, totals are the ranks' sums, fractions are the ratios they claim); bad input ends
# in one clear line.
#   bench_cli_test.sh MVIBR_BINARY SOURCE_DIR MPIEXEC
set -euo pipefail
source "$2/test/integration/lib.sh"
mpi_test_arguments "$@"

"$mvibr" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24 >/dev/null
io=(bench io --datadir "$work/data" --seconds 0.1 --step_ms 10 --num_source_views 3)

echo "== bench io at 1 and 2 ranks"
"$mvibr" "${io[@]}" --json --out "$work/io-r1.jsonl" >"$work/io-r1.stdout"
cmp "$work/io-r1.jsonl" "$work/io-r1.stdout" || fail "--out and --json differ"
"$mpiexec" --oversubscribe -np 2 "$mvibr" "${io[@]}" --json >"$work/io-r2.jsonl"
# Two ranks on one shard share it only when told to.
"$mvibr" prep --out "$work/one" --shards 1 --views 12 --width 32 --height 24 >/dev/null
"$mpiexec" --oversubscribe -np 2 "$mvibr" bench io --datadir "$work/one" --seconds 0.05 \
  --num_source_views 3 --allow_shared_shards --json >"$work/io-shared.jsonl"
"$mvibr" "${io[@]}" | tee "$work/io-table.txt"
grep -q "warm page cache" "$work/io-table.txt" || fail "the table does not say the files were warm"

/usr/bin/python3 - "$work" <<'PY'
import json, math, pathlib, sys

work = pathlib.Path(sys.argv[1])


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def check_rate(r, frames):
    assert r["bytes"] > 0 and r["seconds"] > 0, r
    assert close(r["gbs"], r["bytes"] / r["seconds"] / 1e9), r
    if frames:
        assert r["frames"] > 0, r
        assert close(r["frames_per_second"], r["frames"] / r["seconds"]), r


def check_job(path, ranks, shards_per_rank):
    results = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(results) == ranks + 1, (path, len(results))
    per_rank, total = results[:-1], results[-1]
    assert [r["scope"] for r in per_rank] == ["rank"] * ranks and total["scope"] == "total"
    assert [r["rank"] for r in per_rank] == list(range(ranks))
    for r in results:
        assert r["bench"] == "io" and r["ranks"] == ranks and r["hosts"] == 1, r
        assert r["mvibr"].startswith("0.") and "(" in r["mvibr"], r["mvibr"]
        assert r["host"] and r["device"] == "cpu"
        assert r["config"]["num_source_views"] == 3, r["config"]
        assert r["page_cache"]["warm"] is True, r["page_cache"]
        check_rate(r["plain_read"], False)
        for key in ("shard_reader", "prefetch_reader"):
            check_rate(r[key], True)
            assert close(r[key]["fraction_of_plain"], r[key]["gbs"] / r["plain_read"]["gbs"])
        assert r["prefetch_wait"]["wait_ms_per_sample"] >= 0
    for r in per_rank:
        assert len(r["shards"]) == shards_per_rank, r["shards"]
        assert 0 <= r["page_cache"]["resident_before"] <= 1
        assert r["page_cache"]["resident_after"] == 1, r["page_cache"]
        # Every measurement is whole passes over the rank's shards: the plain read of the files
        # is a multiple of their size, and a pass takes its measurement's time.
        assert r["plain_read"]["bytes"] % r["file_bytes"] == 0, r
        assert r["plain_read"]["seconds"] >= r["config"]["seconds"]
        assert r["prefetch_wait"]["samples"] >= 3
        assert r["prefetch_wait"]["wait_ms_per_sample"] < 2 * r["config"]["step_ms"]
    for key in ("plain_read", "shard_reader", "prefetch_reader"):
        assert close(total[key]["bytes"], sum(r[key]["bytes"] for r in per_rank)), key
        assert close(total[key]["seconds"], max(r[key]["seconds"] for r in per_rank)), key
    assert close(total["file_bytes"], sum(r["file_bytes"] for r in per_rank))
    waits = [r["prefetch_wait"]["wait_ms_per_sample"] for r in per_rank]
    assert close(total["prefetch_wait"]["wait_ms_per_sample_max"], max(waits))
    return per_rank


one = check_job(work / "io-r1.jsonl", 1, 2)
two = check_job(work / "io-r2.jsonl", 2, 1)
assert sorted(r["shards"][0] for r in two) == [0, 1], "each rank reads its own shard"
shared = check_job(work / "io-shared.jsonl", 2, 1)
assert [r["shards"] for r in shared] == [[0], [0]]
print("ok: bench io JSON at 1 and 2 ranks")
PY

echo "== bench kernels"
kernels=(bench kernels --rays 16 --samples 8 --importance 8 --views 3 --channels 4 --warmup 1
  --repeats 5)
"$mvibr" "${kernels[@]}" --json --out "$work/kernels.jsonl" >/dev/null
"$mpiexec" --oversubscribe -np 2 "$mvibr" "${kernels[@]}" --json >"$work/kernels-r2.jsonl"
"$mvibr" "${kernels[@]}" | tee "$work/kernels-table.txt"
grep -q "copy bandwidth" "$work/kernels-table.txt" || fail "no copy bandwidth in the table"

/usr/bin/python3 - "$work" <<'PY'
import json, math, pathlib, sys

work = pathlib.Path(sys.argv[1])
ops = ["generate_rays", "sample_coarse_depths", "sample_importance_depths", "gather_samples",
       "gather_samples_backward", "ray_mask", "composite_rays", "composite_rays_backward",
       "masked_mse", "masked_mse_backward"]


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9)


def check(path, ranks):
    results = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(results) == len(ops) * ranks, len(results)
    assert [r["op"] for r in results] == [op for op in ops for _ in range(ranks)]
    assert [r["rank"] for r in results] == list(range(ranks)) * len(ops)
    R, S, I, V, C = 16, 8, 8, 3, 4
    for r in results:
        assert r["bench"] == "kernels" and r["ranks"] == ranks and r["backend"] == "cpu", r
        assert r["mvibr"] and r["host"] and r["device"] and r["threads"] == 1, r
        assert r["config"]["rays"] == R and r["config"]["samples"] == S, r["config"]
        assert r["config"]["repeats"] == 5
        assert 0 < r["min_seconds"] <= r["seconds"], r
        assert r["bytes"] > 0 and r["flops"] > 0, r
        assert close(r["gbs"], r["bytes"] / r["seconds"] / 1e9), r
        assert close(r["gflops"], r["flops"] / r["seconds"] / 1e9), r
        assert r["copy_gbs"] > 0.1, r
        # Tiny ops fit in the caches and may outrun a copy of DRAM: only the ratio is checked.
        assert close(r["fraction_of_copy"], r["gbs"] / r["copy_gbs"]), r
        if "fma_peak_gflops" in r:  # x86-64-v3 builds
            assert close(r["fraction_of_fma_peak"], r["gflops"] / r["fma_peak_gflops"]), r
            assert 0 < r["fraction_of_fma_peak"] <= 1.5, r
    # The counts are functions of the size (src/bench/render_ops_benchmark.cpp): spot-check two.
    cost = {r["op"]: r for r in results}
    assert close(cost["composite_rays"]["bytes"], 4.0 * R * (S + I) * 6 + 4.0 * R * 5)
    assert close(cost["ray_mask"]["flops"], R * S * V)


check(work / "kernels.jsonl", 1)
check(work / "kernels-r2.jsonl", 2)
print("ok: bench kernels JSON at 1 and 2 ranks")
PY

echo "== bad input: one line, non-zero exit"
expect_error "datadir is required" "$mvibr" bench io
expect_error "no such prepared data set" "$mvibr" bench io --datadir "$work/missing"
expect_error "seconds must be positive" "$mvibr" bench io --datadir "$work/data" --seconds 0
expect_error "step_ms must be positive" "$mvibr" bench io --datadir "$work/data" --step_ms -5
expect_error "num_source_views must be at least 1" "$mvibr" bench io --datadir "$work/data" \
  --seconds 0.05 --num_source_views 0
# Under mpirun the failing ranks end the job (mpirun adds its own lines about the abort).
if "$mpiexec" --oversubscribe -np 3 "$mvibr" "${io[@]}" >"$work/out" 2>"$work/err"; then
  fail "3 ranks on 2 shards succeeded"
fi
grep -q "rank [0-2] on .*: the data set has 2 shards for 3 ranks" "$work/err" ||
  fail "3 ranks on 2 shards: $(cat "$work/err")"
echo "ok: 3 ranks on 2 shards end the job naming the rank"
expect_error "unrecognised option" "$mvibr" bench io --datadir "$work/data" --bogus
expect_error "backend must be cpu or cuda" "$mvibr" bench kernels --backend tpu
expect_error "samples must be >= 3" "$mvibr" bench kernels --samples 2
expect_error "rays must be >= 1" "$mvibr" bench kernels --rays 0
expect_error "repeats" "$mvibr" bench kernels --repeats 0
# Without a CUDA build or without a device, --backend cuda says which in one line.
if "$mvibr" --version | grep -q "cuda backend: built, [1-9]"; then
  "$mvibr" "${kernels[@]}" --backend cuda --json >"$work/kernels-cuda.jsonl"
  echo "ok: bench kernels --backend cuda ran on the device"
else
  expect_error "backend cuda" "$mvibr" bench kernels --backend cuda
fi
echo "bench_cli: all passed"
