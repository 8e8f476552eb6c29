#!/usr/bin/env python3
"""The PyTorch side of bench/dynibar_step_vs_pytorch.sh: DynIBaR's training step as PyTorch users
write it (float32, torch's own kernels and autograd), on the case folder bench/dynibar_step_bench
--write_case wrote: the same weights, sample, rays and depth samples, so the step is mvibr's.

The forward is the tested reference (test/reference/dynibar_model_reference.train_step, checked
against mvibr by the whole-step parity test) run in float32, with the choices a PyTorch user
makes: F.relu instead of following mvibr's ReLU masks, and F.instance_norm instead of the
reference's written-out mean and variance. The backward is autograd's into every parameter.

Runs WARMUP + STEPS identical steps (the same weights: no optimiser) and prints one JSON line:
the median seconds of the forward, the backward and the two together, rays per second, and the
loss.

    dynibar_torch_step.py CASE_DIR THREADS WARMUP STEPS
"""
import json
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "test" / "reference"))
import dynibar_losses_reference as losses  # noqa: E402  (the references set float64; see main)
import dynibar_model_reference as reference  # noqa: E402
import feature_net_reference  # noqa: E402


def main():
    case = pathlib.Path(sys.argv[1])
    threads, warmup, steps = map(int, sys.argv[2:5])
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(threads)
    feature_net_reference.relu_on_our_side = lambda mask, z, name, rounding=None: F.relu(z)
    resunet = feature_net_reference.resunet_forward
    feature_net_reference.resunet_forward = lambda *args, **kwargs: resunet(
        *args, norm=lambda x, gamma, beta: F.instance_norm(
            x, weight=gamma, bias=beta, eps=feature_net_reference.EPS), **kwargs)

    cfg, params, x, masks = reference.load_case(case, torch.float32)
    cfg["linear_operands"] = "fp32"  # torch's own float32 products, whatever mvibr's were
    names = sorted(params)
    forward, backward, total, loss_value = [], [], [], 0.0
    for i in range(warmup + steps):
        start = time.perf_counter()
        terms, _ = reference.train_step(cfg, params, x, masks)
        _, _, loss = losses.total(terms)
        middle = time.perf_counter()
        torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
        end = time.perf_counter()
        loss_value = float(loss)
        if i >= warmup:
            forward.append(middle - start)
            backward.append(end - middle)
            total.append(end - start)
    rays = int(x["pixels"].shape[0])
    step = statistics.median(total)
    print(json.dumps({"impl": "pytorch", "threads": threads, "torch": torch.__version__,
                      "forward_seconds": statistics.median(forward),
                      "backward_seconds": statistics.median(backward), "step_seconds": step,
                      "rays_per_second": rays / step, "loss": loss_value}))


if __name__ == "__main__":
    main()
