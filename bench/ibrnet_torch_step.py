#!/usr/bin/env python3
"""The PyTorch side of bench/train_step_vs_pytorch.sh: IBRNet's training step as PyTorch users
write it (float32, torch's own kernels and autograd, torch.optim.Adam with IBRNet's two
learning-rate groups and StepLR), on the case folder bench/train_step_bench --write_case wrote:
the same weights, sample, rays and Philox uniforms, so the step is mvibr's step.

The forward is the tested reference (test/reference/ibrnet_model_reference.train_step, checked
against mvibr by the model-parity test) run in float32, with two choices a PyTorch user makes:
F.relu instead of following mvibr's ReLU masks, and F.instance_norm (InstanceNorm2d's kernel)
instead of the reference's written-out mean and variance, which compute the same.

Runs WARMUP + STEPS identical steps (each from the weights the previous one left) and prints one
JSON line: the median seconds of the step and of each phase (the forward phases as mvibr names
them, the whole backward, the optimizer), steps and rays per second, and the first and last
step's loss.

    ibrnet_torch_step.py CASE_DIR THREADS WARMUP STEPS
"""
import collections
import contextlib
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "test" / "reference"))
import aggregator_reference  # noqa: E402  (the references set float64; switched back in main)
import feature_net_reference  # noqa: E402
import ibrnet_model_reference as reference  # noqa: E402


def instance_norm(x, gamma, beta):
    return F.instance_norm(x, weight=gamma, bias=beta, eps=feature_net_reference.EPS)


def relu(y, _conv_name):
    return F.relu(y)


def main():
    case = pathlib.Path(sys.argv[1])
    threads, warmup, steps = map(int, sys.argv[2:5])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(threads)
    # The reference builds its positional table in float64; here it is float32, built once (a
    # module would hold it as a buffer).
    tables = {}
    table = aggregator_reference.positional_encoding
    aggregator_reference.positional_encoding = (
        lambda n, d: tables.setdefault((n, d), table(n, d).float()))

    cfg, params, inputs = reference.load_case(case, torch.float32)
    feature = [p for name, p in params.items() if name.startswith(reference.FEATURE_PREFIX)]
    mlp = [p for name, p in params.items() if not name.startswith(reference.FEATURE_PREFIX)]
    optimizer = torch.optim.Adam([{"params": mlp}, {"params": feature, "lr": cfg["lrate_feature"]}],
                                 lr=cfg["lrate_mlp"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg["lrate_decay_steps"],
                                                gamma=cfg["lrate_decay_factor"])

    times = collections.defaultdict(list)
    losses = []
    for i in range(warmup + steps):
        phases = collections.defaultdict(float)

        @contextlib.contextmanager
        def phase(name):
            start = time.perf_counter()
            yield
            phases[name] += time.perf_counter() - start

        step_start = time.perf_counter()
        with phase("optimizer"):
            optimizer.zero_grad()
        mse_coarse, mse_fine = reference.train_step(cfg, params, inputs, relu, instance_norm,
                                                    phase)
        loss = mse_coarse + mse_fine
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            if cfg["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(mlp + feature, cfg["grad_clip"])
            optimizer.step()
            scheduler.step()
        step = time.perf_counter() - step_start
        losses.append(loss.item())
        if i < warmup:
            continue
        times["step"].append(step)
        for name, seconds in phases.items():
            times[name].append(seconds)

    step = statistics.median(times.pop("step"))
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "warmup": warmup, "steps": steps, "step_seconds": step, "steps_per_second": 1 / step,
        "rays_per_second": inputs["pixels"].shape[0] / step,
        "phases": {name: statistics.median(seconds) for name, seconds in times.items()},
        "loss_first": losses[0], "loss_last": losses[-1]}))


if __name__ == "__main__":
    main()
