#!/usr/bin/env python3
"""The PyTorch side of bench/aggregator_vs_pytorch.sh: IBRNet's aggregation network (the test
reference, test/reference/aggregator_reference.py, run in float32 with torch's own kernels)
forward + backward at IBRNet's training size, with the weights of an mvibr checkpoint, on the
same number of threads. Prints one JSON line with the median seconds per step.

    aggregator_torch.py CHECKPOINT.h5 THREADS RAYS SAMPLES VIEWS CHANNELS REPEATS
"""
import json
import pathlib
import statistics
import sys
import time

import h5py
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "test" / "reference"))
import aggregator_reference  # noqa: E402  (sets float64 as default; switched back below)


def main():
    path, threads, rays, samples, views, channels, repeats = sys.argv[1:8]
    rays, samples, views, channels, repeats = map(int, (rays, samples, views, channels, repeats))
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(int(threads))
    # The reference builds its positional table in float64; the benchmark runs in float32.
    table = aggregator_reference.positional_encoding
    aggregator_reference.positional_encoding = lambda n: table(n).float()
    with h5py.File(path, "r") as checkpoint:
        group = checkpoint["model"]
        params = {name[len("net_coarse."):]: torch.tensor(group[name][()], requires_grad=True)
                  for name in group if name.startswith("net_coarse.")}
    generator = torch.Generator().manual_seed(0)
    rgb_features = torch.rand(rays, samples, views, 3 + channels, generator=generator)
    ray_diff = torch.rand(rays, samples, views, 4, generator=generator) * 2 - 1
    mask = (torch.rand(rays, samples, views, generator=generator) < 0.9).float()
    rgb_features.requires_grad_()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rgb, sigma = aggregator_reference.ibrnet(
            params, {"anti_alias_pooling": True, "attention_mask": "queries"}, rgb_features,
            ray_diff, mask)
        (rgb.sum() + sigma.sum()).backward()
        times.append(time.perf_counter() - start)
    print(json.dumps({"impl": "pytorch", "seconds": statistics.median(times),
                      "threads": int(threads), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
