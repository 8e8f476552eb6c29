#!/usr/bin/env python3
"""PyTorch reference of the optimiser: the oracle for mvibr's Adam, learning-rate decay and
gradient clipping.

Set up as IBRNet's model.py and train.py do it: torch.optim.Adam over two parameter groups
(the MLP's at lr=lrate_mlp, the feature network's at lrate_feature), StepLR(step_size=
lrate_decay_steps, gamma=lrate_decay_factor) stepped once after every optimizer.step(), and,
when max_grad_norm > 0, clip_grad_norm_ before each step. Parameters and gradients are float32.
Used by optimizer_test.cpp, which writes each case into a folder:

    case.json      {"steps", "lrate_feature", "lrate_mlp", "lrate_decay_factor",
                    "lrate_decay_steps", "max_grad_norm", "groups": ["feature" | "mlp", ...]}
    value_<i>.npy  initial value of parameter i
    grad_<i>.npy   its gradient at every step, [steps, *shape]

and reads back ref_value_<i>.npy, ref_exp_avg_<i>.npy, ref_exp_avg_sq_<i>.npy (after the last
step), ref_lr.npy ([steps, 2]: the feature and MLP rates each step used) and ref_norm.npy
([steps]: the gradient norm before clipping).

    adam_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch


def save(case, name, array):
    np.save(case / f"ref_{name}.npy", np.ascontiguousarray(array, dtype=np.float64))


def run(case):
    spec = json.loads((case / "case.json").read_text())
    groups = spec["groups"]
    params = [torch.tensor(np.load(case / f"value_{i}.npy"), dtype=torch.float32,
                           requires_grad=True) for i in range(len(groups))]
    grads = [np.load(case / f"grad_{i}.npy") for i in range(len(groups))]
    mlp = [p for p, g in zip(params, groups) if g == "mlp"]
    feature = [p for p, g in zip(params, groups) if g == "feature"]
    optimizer = torch.optim.Adam([{"params": mlp},
                                  {"params": feature, "lr": spec["lrate_feature"]}],
                                 lr=spec["lrate_mlp"])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=spec["lrate_decay_steps"],
                                                gamma=spec["lrate_decay_factor"])
    lrs, norms = [], []
    for step in range(spec["steps"]):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g[step], dtype=torch.float32)
        lrs.append([optimizer.param_groups[1]["lr"], optimizer.param_groups[0]["lr"]])
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


def main():
    for spec in sorted(pathlib.Path(sys.argv[1]).glob("*/case.json")):
        run(spec.parent)


if __name__ == "__main__":
    main()
