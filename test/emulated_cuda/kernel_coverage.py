#!/usr/bin/env python3
"""Which of mvibr's CUDA kernels the emulated tests launched, and how often.

    kernel_coverage.py REPORT SOURCE_DIR

REPORT is what the emulated test processes appended (MVIBR_EMULATED_COVERAGE: "count module
offset symbol" lines); every __global__ kernel defined in SOURCE_DIR/kernels and src/cuda (.cu, .cuh) is
named with its launch count. Exits 1 naming the kernels no test launched.
"""
import collections
import glob
import re
import subprocess
import sys


def kernels_defined(source_dir):
    names = set()
    paths = [path for folder in ("kernels", "src/cuda") for pattern in ("*.cu", "*.cuh")
             for path in glob.glob(f"{source_dir}/{folder}/{pattern}")]
    for path in paths:
        text = open(path).read()
        names.update(re.findall(
            r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", text))
    return names


def symbols(module, cache={}):
    """offset -> demangled name of a module's functions, local ones included (nm)."""
    if module not in cache:
        table = {}
        out = subprocess.run(["nm", "-C", "--defined-only", module], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "tTwW":
                table[int(parts[0], 16)] = parts[2]
        cache[module] = table
    return cache[module]


def main():
    report, source_dir = sys.argv[1], sys.argv[2]
    launched = collections.Counter()
    for number, line in enumerate(open(report), 1):
        fields = line.split(" ", 3)
        if len(fields) != 4 or not fields[0].isdigit() or not fields[2].startswith("0x"):
            print(f"{report}:{number}: not a 'count module offset symbol' line: {line!r}",
                  file=sys.stderr)
            return 2
        count, module, offset, symbol = fields
        name = symbols(module).get(int(offset, 16), symbol.strip())
        launched[name] += int(count)
    defined = sorted(kernels_defined(source_dir))
    missing = []
    print(f"{'launches':>9}  kernel")
    for kernel in defined:
        pattern = re.compile(r"\b" + re.escape(kernel) + r"\s*[(<]")
        total = sum(n for name, n in launched.items() if pattern.search(name))
        print(f"{total:>9}  {kernel}")
        if total == 0:
            missing.append(kernel)
    print(f"{len(defined) - len(missing)} of {len(defined)} kernels launched")
    if missing:
        print("never launched: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
