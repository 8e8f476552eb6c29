#!/usr/bin/env python3
"""Prints a Markdown table from render_ops_bench's JSON output (--benchmark_format=json):
time per call, achieved bandwidth of the compulsory bytes, that bandwidth as a share of the
same run's measured copy bandwidth ("copy" benchmark of the same backend), and GFLOP/s.

    summarize.py RESULTS.json

With --benchmark_repetitions the medians are shown.
"""
import json
import sys


def main():
    results = json.load(open(sys.argv[1]))["benchmarks"]
    if any("aggregate_name" in r for r in results):  # --benchmark_repetitions: medians only
        results = [dict(r, name=r["run_name"]) for r in results if r.get("aggregate_name") == "median"]
    copy = {}
    for r in results:
        backend, op = r["name"].split("/")[0].split("_", 2)[1:3]
        if op == "copy" and "error_occurred" not in r:
            copy[backend] = r["bytes_per_second"]
    print("| backend | op | time per call | GB/s (floor bytes) | % of copy bandwidth | GFLOP/s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        backend, op = r["name"].split("/")[0].split("_", 2)[1:3]
        if "error_occurred" in r:
            print(f"| {backend} | {op} | skipped: {r.get('error_message', '')} | | | |")
            continue
        bandwidth = r["bytes_per_second"]
        share = f"{100 * bandwidth / copy[backend]:.1f}" if backend in copy else "n/a"
        time = f"{r['real_time']:.3g} {r['time_unit']}"
        print(f"| {backend} | {op} | {time} | {bandwidth / 1e9:.2f} | {share} | "
              f"{r['flops_per_second'] / 1e9:.2f} |")


if __name__ == "__main__":
    main()
