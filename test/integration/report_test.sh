#!/usr/bin/env bash
# tools/report.py on a small real sweep: `mvibr bench train` at 1 and 2 ranks in strong and weak
# scaling and `mvibr bench allreduce` at 2 ranks, in the layout slurm/scaling.sbatch writes. The
# table's numbers are recomputed from the JSON results, every plot must be a whole, valid PNG
# (chunk CRCs, image data that inflates to its size) with more than a background in it, and bad
# folders end in one clear line.
#   report_test.sh MVIBR_BINARY SOURCE_DIR MPIEXEC
set -euo pipefail
source "$2/test/integration/lib.sh"
mpi_test_arguments "$@"
report=("/usr/bin/python3" "$source_dir/tools/report.py")

small=(--config "$source_dir/configs/synthetic.txt" --datadir "$work/data" --N_samples 8
  --N_importance 4 --num_source_views 3 --source_pool 4 --coarse_feat_dim 4 --fine_feat_dim 4
  --warmup 1 --steps 3)
"$mvibr" prep --out "$work/data" --shards 2 --views 12 --width 32 --height 24 >/dev/null

echo "== a sweep: strong (64 rays in all) and weak (32 rays per rank) at 1 and 2 ranks"
mkdir "$work/results"
for ranks in 1 2; do
  "$mpiexec" --oversubscribe -np "$ranks" "$mvibr" bench train "${small[@]}" \
    --N_rand $((64 / ranks)) --json --out "$work/results/train-strong-r$ranks.json" >/dev/null
  "$mpiexec" --oversubscribe -np "$ranks" "$mvibr" bench train "${small[@]}" --N_rand 32 --json \
    --out "$work/results/train-weak-r$ranks.json" >/dev/null
done
"$mpiexec" --oversubscribe -np 2 "$mvibr" bench allreduce --max_bytes 64K --warmup 1 --iters 3 \
  --json >"$work/results/allreduce-r2.jsonl"

"${report[@]}" "$work/results" --out "$work/report"
cat "$work/report/report.md"
/usr/bin/python3 - "$work/results" "$work/report" <<'EOF'
import json, pathlib, re, struct, sys, zlib

results, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
text = (out / "report.md").read_text()


def table_rows(heading):
    """The data rows of the Markdown table under `## heading`, as lists of cells."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def number(cell):
    return float(cell.replace(",", "").rstrip("%"))


for mode in ("strong", "weak"):
    rows = table_rows(f"{mode} scaling")
    assert [int(r[0]) for r in rows] == [1, 2], (mode, rows)
    one = json.loads((results / f"train-{mode}-r1.json").read_text())
    for row in rows:
        r = json.loads((results / f"train-{mode}-r{row[0]}.json").read_text())
        assert number(row[1]) == r["global_batch_rays"], (row, r)
        assert abs(number(row[3]) - r["rays_per_second"]) <= 0.5, (row, r["rays_per_second"])
        efficiency = r["rays_per_second"] / one["rays_per_second"] / r["ranks"]
        assert abs(number(row[6]) - 100 * efficiency) <= 0.05, (row, efficiency)
        assert abs(number(row[7]) - 1e3 * r["step_seconds"]) <= 0.05, (row, r["step_seconds"])
    assert [number(r[1]) for r in rows] == ([64, 64] if mode == "strong" else [32, 64]), rows

phase_rows = table_rows("rank 0's step by phase (ms)")
names = [r[0] for r in phase_rows]
assert names[0] == "data_wait" and "aggregator_backward" in names, names
strong2 = json.loads((results / "train-strong-r2.json").read_text())
column = 2  # phase, strong r1, strong r2, ...
for row in phase_rows:
    if row[0] in strong2["phases_rank0"]:
        assert abs(number(row[column]) - 1e3 * strong2["phases_rank0"][row[0]]) <= 0.005, row

sizes = [int(r[0]) for r in table_rows("all-reduce (MPI, float sum)")]
assert sizes == [1024 << i for i in range(7)], sizes


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    at, idat, chunks = 8, b"", []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc, (path, kind)
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        if kind == b"IDAT":
            idat += body
        at += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", (path, chunks)
    channels = {2: 3, 6: 4}[colour]
    pixels = zlib.decompress(idat)
    assert depth == 8 and len(pixels) == height * (1 + width * channels), (path, len(pixels))
    assert 300 < width < 3000 and 200 < height < 3000, (path, width, height)
    # A plot, not an empty canvas: many distinct byte values in the image data.
    assert len(set(pixels)) > 50, (path, len(set(pixels)))
    return width, height


for name in ("throughput.png", "efficiency.png", "phases.png", "allreduce.png"):
    assert f"]({name})" in text, name
    print(name, "%dx%d" % check_png(out / name))
print("report table matches the results; plots are valid PNGs")
EOF

echo "== bad folders"
mkdir "$work/empty"
expect_error "no train-<mode>-r<R>.json or allreduce-r<R>.jsonl files" "${report[@]}" "$work/empty"
expect_error "not a folder" "${report[@]}" "$work/missing"
mkdir "$work/mislabelled"
cp "$work/results/train-weak-r1.json" "$work/mislabelled/train-weak-r2.json"
expect_error "ran on 1 ranks, the name says 2" "${report[@]}" "$work/mislabelled"
echo "report tool tests passed"
