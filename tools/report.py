#!/usr/bin/python3
"""Scaling report: a Markdown table and PNG plots from a folder of `mvibr bench` results.

    tools/report.py RESULTS [--out DIR]        (default DIR: RESULTS)

RESULTS holds what slurm/scaling.sbatch writes (or the same files made by hand):

    train-<mode>-r<R>.json   `mvibr bench train --json --out FILE` at R ranks; <mode> is strong
                             (a fixed global batch split over the ranks) or weak (a fixed batch
                             per rank), or any other word, reported as its own group
    allreduce-r<R>.jsonl     `mvibr bench allreduce --json` at R ranks (one object per size)
    sweep.json               optional: how the sweep was asked for, quoted in the report

and DIR receives report.md with the tables and these plots, each referenced from it:

    throughput.png   rays/s (the pose model's instants/s) against ranks per mode, with the ideal
                     (linear from the smallest rank count of the mode)
    efficiency.png   scaling efficiency: (rays/s at R / rays/s at R0) / (R / R0)
    phases.png       rank 0's mean step split by phase, one stacked bar per rank count and mode
    allreduce.png    all-reduce busbw against message size, one line per rank count (ranks > 1:
                     one rank moves no bytes)

Efficiency is measured on rays/s in both modes: in strong scaling the work per step is fixed, so
it is T(R0) R0 / (T(R) R) in step times; in weak scaling it grows with R, so it is T(R0) / T(R).
"""
import argparse
import json
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on compute nodes or in CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

TRAIN_NAME = re.compile(r"^train-(?P<mode>[A-Za-z0-9_]+)-r(?P<ranks>[0-9]+)\.json$")
ALLREDUCE_NAME = re.compile(r"^allreduce-r(?P<ranks>[0-9]+)\.jsonl$")
MODE_ORDER = {"strong": 0, "weak": 1}
# The phases in the order a step runs them (`mvibr bench train` writes them sorted by name): the
# ray models' and the pose model's (model.h's PhaseLabels), each beside its slot.
STEP_ORDER = ["data_wait", "features_forward", "backbone_forward", "sampling", "motion_forward",
              "gather_forward", "aggregator_forward", "heads_forward", "composite_loss", "loss",
              "composite_backward", "loss_backward", "aggregator_backward", "heads_backward",
              "gather_backward", "motion_backward", "features_backward", "backbone_backward",
              "loss_allreduce", "allreduce_exposed", "optimizer", "other"]


class ReportError(Exception):
    pass


def unit_of(result):
    """What the result's updates work through: "rays", or the pose model's "instants"."""
    return result.get("batch_unit", "rays")


def read_train(path, ranks_in_name):
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: not a JSON result ({e})")
    if not isinstance(result, dict):
        raise ReportError(f"{path}: not a `mvibr bench train --json` result")
    unit = unit_of(result)
    for key in ("bench", "ranks", f"global_batch_{unit}", f"{unit}_per_second", "steps_per_second",
                "step_seconds", "phases_rank0"):
        if key not in result:
            raise ReportError(f"{path}: no '{key}' (not a `mvibr bench train --json` result)")
    if result["bench"] != "train":
        raise ReportError(f"{path}: a '{result['bench']}' result, expected 'train'")
    if result["ranks"] != ranks_in_name:
        raise ReportError(f"{path}: ran on {result['ranks']} ranks, the name says {ranks_in_name}")
    return result


def read_allreduce(path, ranks_in_name):
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ReportError(f"{path}:{number}: not JSON ({e})")
        if row.get("bench") != "allreduce" or row.get("ranks") != ranks_in_name:
            raise ReportError(f"{path}:{number}: not a {ranks_in_name}-rank allreduce result")
        rows.append(row)
    if not rows:
        raise ReportError(f"{path}: no results")
    return sorted(rows, key=lambda r: r["bytes"])


def load(folder):
    train, allreduce = {}, {}
    for path in sorted(folder.iterdir()):
        if m := TRAIN_NAME.match(path.name):
            ranks = int(m["ranks"])
            train.setdefault(m["mode"], {})[ranks] = read_train(path, ranks)
        elif m := ALLREDUCE_NAME.match(path.name):
            ranks = int(m["ranks"])
            allreduce[ranks] = read_allreduce(path, ranks)
    if not train and not allreduce:
        raise ReportError(f"{folder}: no train-<mode>-r<R>.json or allreduce-r<R>.jsonl files")
    units = {unit_of(r) for results in train.values() for r in results.values()}
    if len(units) > 1:
        raise ReportError(f"{folder}: train results of different models ({', '.join(sorted(units))})")
    sweep = None
    if (folder / "sweep.json").exists():
        sweep = json.loads((folder / "sweep.json").read_text())
    modes = sorted(train, key=lambda mode: (MODE_ORDER.get(mode, 2), mode))
    return {mode: train[mode] for mode in modes}, allreduce, sweep


def scaling_rows(results):
    """Per rank count of one mode: the measured numbers and the speed-up and efficiency against
    the smallest rank count."""
    base_ranks = min(results)
    rate = unit_of(results[base_ranks]) + "_per_second"
    base_rate = results[base_ranks][rate]
    rows = []
    for ranks in sorted(results):
        r = results[ranks]
        speedup = r[rate] / base_rate
        rows.append({
            "ranks": ranks,
            "result": r,
            "rate": r[rate],
            "speedup": speedup,
            "efficiency": speedup / (ranks / base_ranks),
            "ideal_rate": base_rate * ranks / base_ranks,
        })
    return rows


def phase_split(result):
    """Rank 0's mean step by phase, in seconds, with what the phases do not cover as 'other'."""
    phases = dict(result["phases_rank0"])
    other = result["step_seconds"] - sum(phases.values())
    if other > 0:
        phases["other"] = other
    return phases


def phase_names(train):
    """Every phase of any result, in step order (names this tool does not know last)."""
    names = {n for results in train.values() for r in results.values() for n in phase_split(r)}
    return sorted(names, key=lambda n: (STEP_ORDER.index(n) if n in STEP_ORDER else len(STEP_ORDER), n))


def fmt(value, digits=0):
    return f"{value:,.{digits}f}"


def markdown(train, allreduce, sweep, plots):
    lines = ["# mvibr scaling report", ""]
    everything = [r for mode in train.values() for r in mode.values()]
    if everything:
        def values(key):
            return ", ".join(sorted({str(r.get(key, "?")) for r in everything}))
        backends = sorted({r.get("backend", "?") for r in everything if r["ranks"] > 1})
        lines.append(f"mvibr {values('mvibr')} on {values('host')}, device {values('device')}, "
                     f"{values('threads_per_rank')} thread(s) per rank, backend "
                     f"{', '.join(backends) or 'none'}; {values('steps')} measured steps after "
                     f"{values('warmup')} warm-up.")
        lines.append("")
    if sweep is not None:
        lines += ["Sweep: `" + json.dumps(sweep, sort_keys=True) + "`", ""]
    for mode, results in train.items():
        unit = unit_of(next(iter(results.values())))
        lines += [f"## {mode} scaling", "",
                  f"| ranks | global batch ({unit}) | steps/s | {unit}/s | {unit}/s per rank | "
                  "speed-up | efficiency | step (ms) | all-reduce (ms) | all-reduce hidden | "
                  "imbalance | peak RSS (MB) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in scaling_rows(results):
            r = row["result"]
            rss = max(r.get("peak_rss_mb_per_rank", [float("nan")]))
            lines.append(
                f"| {row['ranks']} | {fmt(r['global_batch_' + unit])} "
                f"| {fmt(r['steps_per_second'], 3)} "
                f"| {fmt(row['rate'])} | {fmt(row['rate'] / row['ranks'])} "
                f"| {fmt(row['speedup'], 2)} | {fmt(100 * row['efficiency'], 1)}% "
                f"| {fmt(1e3 * r['step_seconds'], 1)} | {fmt(1e3 * r.get('allreduce_seconds', 0), 2)} "
                f"| {fmt(100 * r.get('allreduce_hidden_fraction', 0), 0)}% "
                f"| {fmt(100 * r.get('imbalance', 0), 1)}% | {fmt(rss)} |")
        lines.append("")
    if train:
        lines += ["## rank 0's step by phase (ms)", ""]
        names = phase_names(train)
        columns = [(mode, ranks) for mode, results in train.items() for ranks in sorted(results)]
        lines.append("| phase | " + " | ".join(f"{m} r{n}" for m, n in columns) + " |")
        lines.append("|---|" + "---:|" * len(columns))
        for name in names:
            cells = [fmt(1e3 * phase_split(train[m][n]).get(name, 0.0), 2) for m, n in columns]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if allreduce:
        counts = sorted(allreduce)
        lines += ["## all-reduce (MPI, float sum)", "",
                  "| size (bytes) | " + " | ".join(f"busbw r{n} (GB/s) | time r{n} (us)"
                                                  for n in counts) + " |",
                  "|---:|" + "---:|---:|" * len(counts)]
        sizes = sorted({row["bytes"] for rows in allreduce.values() for row in rows})
        for size in sizes:
            cells = []
            for n in counts:
                row = next((r for r in allreduce[n] if r["bytes"] == size), None)
                cells += [fmt(row["busbw_gbs"], 3), fmt(1e6 * row["seconds"], 1)] if row else ["", ""]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## plots", ""] + [f"![{title}]({name})" for name, title in plots] + [""]
    return "\n".join(lines)


def size_label(size):
    """1K, 64K, 1M, 256M: binary multiples as `mvibr bench allreduce` takes them."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return f"{size:g}"


def save_figure(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def finish_scaling_plot(fig, ax, train, ylabel, title, path):
    """Ticks at the rank counts swept, the labels, grid and legend; saved to path."""
    ax.set_xticks(sorted({n for results in train.values() for n in results}))
    ax.set_xlabel("ranks")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def train_unit(train):
    """The unit of every train result (load() refuses a mix)."""
    return unit_of(next(iter(next(iter(train.values())).values())))


def plot_throughput(train, path):
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for index, (mode, results) in enumerate(train.items()):
        rows = scaling_rows(results)
        colour = f"C{index}"
        ax.plot([r["ranks"] for r in rows], [r["rate"] for r in rows], "o-",
                color=colour, label=f"{mode}: measured")
        ax.plot([r["ranks"] for r in rows], [r["ideal_rate"] for r in rows], "--",
                color=colour, alpha=0.6, label=f"{mode}: ideal")
    ax.set_ylim(bottom=0)
    finish_scaling_plot(fig, ax, train, f"{train_unit(train)} / s (whole job)",
                        "Training throughput", path)


def plot_efficiency(train, path):
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for index, (mode, results) in enumerate(train.items()):
        rows = scaling_rows(results)
        ax.plot([r["ranks"] for r in rows], [100 * r["efficiency"] for r in rows], "o-",
                color=f"C{index}", label=mode)
    ax.axhline(100, color="grey", linestyle="--", linewidth=1, label="ideal")
    top = max([100] + [100 * r["efficiency"] for res in train.values() for r in scaling_rows(res)])
    ax.set_ylim(0, 1.1 * top)
    finish_scaling_plot(fig, ax, train, "scaling efficiency (%)",
                        f"Scaling efficiency ({train_unit(train)}/s against the smallest rank "
                        "count)", path)


def plot_phases(train, path):
    columns = [(mode, ranks) for mode, results in train.items() for ranks in sorted(results)]
    names = phase_names(train)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(columns) + 3), 4.8))
    bottoms = [0.0] * len(columns)
    colours = plt.get_cmap("tab20")
    for index, name in enumerate(names):
        heights = [1e3 * phase_split(train[m][n]).get(name, 0.0) for m, n in columns]
        ax.bar(range(len(columns)), heights, bottom=bottoms, color=colours(index % 20), label=name)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"{m}\n{n} rank{'s' if n > 1 else ''}" for m, n in columns])
    ax.set_ylabel("ms per step (rank 0)")
    ax.set_title("Time per phase")
    # Listed top to bottom as stacked, so the legend reads like the bars.
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="center left", bbox_to_anchor=(1.01, 0.5),
              fontsize=8)
    save_figure(fig, path)


def plot_allreduce(allreduce, path):
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for index, ranks in enumerate(sorted(allreduce)):
        rows = allreduce[ranks]
        ax.plot([r["bytes"] for r in rows], [r["busbw_gbs"] for r in rows], "o-", markersize=3,
                color=f"C{index}", label=f"{ranks} ranks ({rows[0].get('backend', '?')})")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda b, _: size_label(b)))
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("All-reduce bus bandwidth")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save_figure(fig, path)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=pathlib.Path, help="folder of bench results")
    parser.add_argument("--out", type=pathlib.Path, help="where to write (default: results)")
    args = parser.parse_args(argv)
    try:
        if not args.results.is_dir():
            raise ReportError(f"{args.results}: not a folder")
        train, allreduce, sweep = load(args.results)
        out = args.out or args.results
        out.mkdir(parents=True, exist_ok=True)
        plots = []
        if train:
            plot_throughput(train, out / "throughput.png")
            plot_efficiency(train, out / "efficiency.png")
            plot_phases(train, out / "phases.png")
            plots += [("throughput.png", "throughput against ranks"),
                      ("efficiency.png", "scaling efficiency"),
                      ("phases.png", "time per phase")]
        # One rank moves no bytes (busbw 0 by nccl-tests' definition): nothing to plot.
        multi_rank = {n: rows for n, rows in allreduce.items() if n > 1}
        if multi_rank:
            plot_allreduce(multi_rank, out / "allreduce.png")
            plots.append(("allreduce.png", "all-reduce busbw against message size"))
        (out / "report.md").write_text(markdown(train, allreduce, sweep, plots))
    except ReportError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2
    print(f"report.py: wrote {out / 'report.md'} and {', '.join(name for name, _ in plots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
