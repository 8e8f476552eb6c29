#!/usr/bin/env python3
"""PyTorch reference of the optimiser: the oracle for mvibr's Adam, AdamW, LAMB, learning-rate
schedules and gradient clipping.

Set up as IBRNet's model.py and train.py do it: torch.optim.Adam over two parameter groups
(the MLP's at lr=lrate_mlp, the feature network's at lrate_feature), StepLR(step_size=
lrate_decay_steps, gamma=lrate_decay_factor) stepped once after every optimizer.step(), and,
when max_grad_norm > 0, clip_grad_norm_ before each step. Parameters and gradients are float32.
- optimizer "adamw": torch.optim.AdamW, each learning-rate group split in two, the tensors whose
  "decays" is false at weight_decay 0 (the usual exclusion of biases and norm scales).
- optimizer "lamb": `Lamb` below, in float64 throughout (apex FusedLAMB's arithmetic with
  use_nvlamb: the per-tensor trust ratio on every tensor, 1 where a norm is 0, unclamped).
- schedule "cosine": LambdaLR with transformers' cosine-with-warm-up lambda (`cosine_factor`).
Used by optimizer_test.cpp, which writes each case into a folder:

    case.json      {"steps", "lrate_feature", "lrate_mlp", "lrate_decay_factor",
                    "lrate_decay_steps", "max_grad_norm", "groups": ["feature" | "mlp", ...],
                    "optimizer": "adam" | "adamw" | "lamb", "weight_decay", "decays": [bool, ...],
                    "schedule": "step" | "cosine", "warmup_steps", "total_steps", "min_lr_ratio"}
    value_<i>.npy  initial value of parameter i
    grad_<i>.npy   its gradient at every step, [steps, *shape]

and reads back ref_value_<i>.npy, ref_exp_avg_<i>.npy, ref_exp_avg_sq_<i>.npy (after the last
step), ref_lr.npy ([steps, 2]: the feature and MLP rates each step used) and ref_norm.npy
([steps]: the gradient norm before clipping).

    adam_reference.py CASES_DIR      (every sub-folder holding a case.json)

and, for the schedule alone, `adam_reference.py --cosine IN.json OUT.npy`: IN is a list of
{"initial", "warmup_steps", "total_steps", "min_lr_ratio", "completed"}, OUT the rates.
"""
import json
import math
import pathlib
import sys

import numpy as np
import torch


def save(case, name, array):
    np.save(case / f"ref_{name}.npy", np.ascontiguousarray(array, dtype=np.float64))


def cosine_factor(current_step, num_warmup_steps, num_training_steps, min_lr_rate,
                  num_cycles=0.5):
    """transformers.optimization._get_cosine_schedule_with_warmup_lr_lambda (with min_lr_rate, as
    get_cosine_with_min_lr_schedule_with_warmup uses it), verbatim in its arithmetic."""
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(
        max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2020, Algorithm 2) as apex's multi_tensor_lamb computes it, with
    bias_correction, grad_averaging, decoupled weight decay (MOMENT_MODE_1) and use_nvlamb."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, g = state["exp_avg"], state["exp_avg_sq"], p.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1 ** state["step"])
                v_hat = v / (1 - beta2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"]) + group["weight_decay"] * p
                p_norm, u_norm = p.norm(), update.norm()
                trust = p_norm / u_norm if p_norm > 0 and u_norm > 0 else 1.0
                p.sub_(group["lr"] * trust * update)


def make_optimizer(spec, params, groups):
    kind = spec.get("optimizer", "adam")
    decays = spec.get("decays", [True] * len(params))
    wd = spec.get("weight_decay", 0.0)
    param_groups = []
    # Index 0: the MLP's groups, index 1: the feature network's (the rates reported).
    for name, lr in (("mlp", spec["lrate_mlp"]), ("feature", spec["lrate_feature"])):
        for decayed in (True, False):
            members = [p for p, g, d in zip(params, groups, decays)
                       if g == name and d == decayed]
            if members:
                param_groups.append({"params": members, "lr": lr, "name": name,
                                     "weight_decay": wd if decayed else 0.0})
    if kind == "adam":
        return torch.optim.Adam(param_groups)
    if kind == "adamw":
        return torch.optim.AdamW(param_groups)
    return Lamb(param_groups, lr=spec["lrate_mlp"])


def run(case):
    spec = json.loads((case / "case.json").read_text())
    groups = spec["groups"]
    dtype = torch.float64 if spec.get("optimizer") == "lamb" else torch.float32
    params = [torch.tensor(np.load(case / f"value_{i}.npy"), dtype=dtype,
                           requires_grad=True) for i in range(len(groups))]
    grads = [np.load(case / f"grad_{i}.npy") for i in range(len(groups))]
    optimizer = make_optimizer(spec, params, groups)
    if spec.get("schedule", "step") == "cosine":
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: cosine_factor(step, spec["warmup_steps"],
                                                  spec["total_steps"], spec["min_lr_ratio"]))
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=spec["lrate_decay_steps"], gamma=spec["lrate_decay_factor"])

    def rate(name):
        return next(g["lr"] for g in optimizer.param_groups if g["name"] == name)

    lrs, norms = [], []
    for step in range(spec["steps"]):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g[step], dtype=dtype)
        lrs.append([rate("feature"), rate("mlp")])
        if spec["max_grad_norm"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, spec["max_grad_norm"])
        else:
            norm = torch.norm(torch.stack([torch.norm(p.grad, 2) for p in params]), 2)
        norms.append(float(norm))
        optimizer.step()
        scheduler.step()
    for i, p in enumerate(params):
        state = optimizer.state[p]
        save(case, f"value_{i}", p.detach().numpy())
        save(case, f"exp_avg_{i}", state["exp_avg"].numpy())
        save(case, f"exp_avg_sq_{i}", state["exp_avg_sq"].numpy())
    save(case, "lr", np.array(lrs))
    save(case, "norm", np.array(norms))


def cosine_rates(points, out):
    rates = [p["initial"] * cosine_factor(p["completed"], p["warmup_steps"], p["total_steps"],
                                          p["min_lr_ratio"]) for p in points]
    np.save(out, np.array(rates, dtype=np.float64))


def main():
    if sys.argv[1] == "--cosine":
        cosine_rates(json.loads(pathlib.Path(sys.argv[2]).read_text()), sys.argv[3])
        return
    for spec in sorted(pathlib.Path(sys.argv[1]).glob("*/case.json")):
        run(spec.parent)


if __name__ == "__main__":
    main()
