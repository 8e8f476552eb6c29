#!/usr/bin/env python3
"""PyTorch reference of DynIBaR's training losses and schedule: the oracle for mvibr's
include/mvibr/render/dynibar_losses.h and dynibar_schedule.h.

Written here in float64 from the published semantics (google/dynibar train.py's loss lines and
its two loops, ibrnet/criterion.py, utils.py's img2charbonier, ibrnet/model.py's optimiser, and
mip-NeRF 360's distortion loss as torch_efficient_distloss's eff_distloss_native computes it),
with autograd for every gradient. Used by test/unit/dynibar_losses_test.cpp, which writes each
case into a folder:

    case.json      {"step": updates before this one, bootstrap included,
                    "schedule": {"num_frames", "init_decay_epoch", "decay_rate", "w_disp",
                                 "w_flow", "w_cycle", "cycle_factor", "anneal_cycle", "w_reg",
                                 "w_skew_entropy", "w_distortion", "lrate_feature", "lrate_mlp",
                                 "lrate_decay_factor"},
                    "learning_rate_steps": how many updates' learning rates to record}
    <name>.npy     every input under its DynibarLossBatch / DynibarRendered name (layouts in
                   dynibar_losses.h); the bootstrap's case holds only what it reads

and this script writes next to them:

    ref_weights.json            every term's weight, phase, main_epoch, divisor
    ref_terms.json              every term as it enters the loss (weighted), rgb, static_loss
                                and total
    ref_grad_<input>.npy        d total / d input, for every differentiable input present
    ref_grad_<term>.<input>.npy d term / d input, where the term reads the input
    ref_learning_rates.npy      [steps, 6]: each DynibarMono group's rate for the update after
                                s updates, s = 0 .. steps - 1, from torch's own Adam and StepLR
                                driven as train.py drives them

    dynibar_losses_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

CHARBONNIER_EPS = 1e-3
TINY_NUMBER = 1e-6  # utils.py's denominator guard for img2charbonier
GUARD = 1e-8        # every other denominator's
DIFFERENTIABLE = ("rgb", "rgb_static", "rgb_dynamic", "depth", "weights", "weights_static",
                  "weights_dynamic", "render_flows", "dynamic_only_rgb", "cross_time_rgb",
                  "points_ref", "points_anchor", "scene_flow", "cross_time_dynamic_only_rgb",
                  "static_only_rgb")


# ---- the schedule -------------------------------------------------------------------------

def weights_at(step, o):
    """train.py's weights for the update after `step` updates of a fresh run: its bootstrap loop
    runs epochs 0 .. init_decay_epoch // 2 - 1, then its main loop counts epochs from 0 again."""
    bootstrap_epochs = o["init_decay_epoch"] // 2
    epoch = step // o["num_frames"]
    names = ("static_bootstrap", "composite", "cross_time", "dynamic_region", "dynamic_only",
             "cross_time_dynamic_only", "disparity", "flow", "cycle", "scene_flow",
             "skew_entropy", "distortion", "static_region", "dynamic_weight_suppression")
    w = dict.fromkeys(names, 0.0)
    if epoch < bootstrap_epochs:
        w.update(phase="bootstrap", main_epoch=0, divisor=0, static_bootstrap=1.0)
        return w
    epoch -= bootstrap_epochs
    divisor = epoch // o["init_decay_epoch"]
    decay_rate = o["decay_rate"]
    dynamic_rgb_decay_rate = 10.0
    w.update(phase="main", main_epoch=epoch, divisor=divisor, composite=1.0, cross_time=1.0,
             static_region=1.0)
    if epoch < o["init_decay_epoch"]:
        w["dynamic_region"] = 1.0
    w["dynamic_only"] = 1.0 / dynamic_rgb_decay_rate ** divisor
    w["cross_time_dynamic_only"] = 1.0 / dynamic_rgb_decay_rate ** divisor
    w["disparity"] = o["w_disp"] / decay_rate ** divisor
    w["flow"] = o["w_flow"] / decay_rate ** divisor
    if o["anneal_cycle"]:
        w["cycle"] = min(0.5, o["w_cycle"] + divisor * o["cycle_factor"])
    else:
        w["cycle"] = o["w_cycle"]
    w["scene_flow"] = o["w_reg"]
    w["skew_entropy"] = o["w_skew_entropy"]
    w["distortion"] = o["w_distortion"]
    if divisor > 4:
        w["dynamic_weight_suppression"] = 0.1
    return w


def learning_rates(o, steps):
    """Rates per update from torch's Adam and StepLR on DynibarMono's six groups (static net,
    static feature net, dynamic net, feature net, motion MLP, trajectory basis), stepped as
    train.py steps them: no scheduler step in the bootstrap, then one after each update while
    the first group's rate is above 5e-7."""
    mlp, feature = o["lrate_mlp"], o["lrate_feature"]
    groups = [mlp * 0.5, feature * 0.5, mlp, feature, mlp, mlp * 0.25]
    params = [torch.zeros(1, requires_grad=True) for _ in groups]
    optimizer = torch.optim.Adam([{"params": [p], "lr": lr} for p, lr in zip(params, groups)])
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=o["num_frames"] * o["init_decay_epoch"],
        gamma=o["lrate_decay_factor"])
    bootstrap_steps = o["init_decay_epoch"] // 2 * o["num_frames"]
    rates = []
    for step in range(steps):
        rates.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()
        if step >= bootstrap_steps and scheduler.get_last_lr()[0] > 5e-7:
            scheduler.step()
    return np.array(rates, dtype=np.float64).reshape(steps, len(groups))


# ---- the terms ----------------------------------------------------------------------------

def charbonnier(pred, target, mask):
    """utils.py's img2charbonier with a per-ray mask: / (3 sum mask + 1e-6)."""
    error = torch.sqrt((pred - target) ** 2 + CHARBONNIER_EPS ** 2)
    return torch.sum(error * mask[:, None]) / (torch.sum(mask) * pred.shape[-1] + TINY_NUMBER)


def occlusion_weighted_charbonnier(pred, target, mask, occlusion_map):
    """criterion.py's compute_temporal_rgb_loss: each ray weighted by mask * occlusion map."""
    weight = (mask * occlusion_map)[:, None].expand(-1, 3)
    error = torch.sqrt((pred - target) ** 2 + CHARBONNIER_EPS ** 2)
    return torch.sum(weight * error) / (torch.sum(weight) + GUARD)


def disparity_l1(depth, target, mask):
    disparity = 1.0 / torch.clamp(depth, min=1e-2)
    return torch.sum(torch.abs(disparity - target) * mask) / (torch.sum(mask) + GUARD)


def flow_l1(flows, target, mask):
    """criterion.py's compute_flow_loss: the [K,R] mask repeated over (u, v)."""
    mask2 = mask[..., None].expand(-1, -1, 2)
    return torch.sum(torch.abs(flows - target) * mask2) / (torch.sum(mask2) + GUARD)


def cycle(points_ref, points_anchor, occlusion_weights):
    weight = occlusion_weights[None, ..., None].expand_as(points_ref)
    return torch.sum(torch.abs(points_ref - points_anchor) * weight) / (torch.sum(weight) + GUARD)


def scene_flow_terms(sf):
    """[F,R,S,3]: magnitude, temporal and spatial smoothness, unweighted."""
    return (torch.mean(torch.abs(sf)),
            0.5 * torch.mean((sf[:-1] - sf[1:]) ** 2),
            torch.mean(torch.abs(sf[:, :, 1:] - sf[:, :, :-1])))


def weight_ratio(weights_dynamic, weights_static):
    dynamic = weights_dynamic.sum(-1)
    return dynamic / torch.clamp(dynamic + weights_static.sum(-1), min=1e-9)


def skew_entropy(ratio):
    return torch.mean(-(ratio * torch.log(ratio + 1e-9) +
                        (1 - ratio) * torch.log(1 - ratio + 1e-9)))


def distortion(weights, s_vals):
    """eff_distloss_native(weights[:, :-1], midpoints, intervals): the O(S) prefix-sum form."""
    w = weights[:, :-1]
    m = (s_vals[:, 1:] + s_vals[:, :-1]) * 0.5
    interval = s_vals[:, 1:] - s_vals[:, :-1]
    uniform = (1 / 3) * (interval * w ** 2).sum(-1).mean()
    w_prefix = torch.cumsum(w, -1)[:, :-1]
    wm_prefix = torch.cumsum(w * m, -1)[:, :-1]
    pairwise = 2 * ((w * m)[:, 1:] * w_prefix - w[:, 1:] * wm_prefix).sum(-1).mean()
    return pairwise + uniform


def terms(x, w):
    """Every weighted term of one step as a tensor, in train.py's order."""
    t = {}
    static_pixels = (1 - x["static_mask"]) * x["ray_mask"]
    if w["phase"] == "bootstrap":
        t["static_bootstrap"] = w["static_bootstrap"] * charbonnier(
            x["static_only_rgb"], x["target_rgb"], static_pixels)
        return t
    target, motion = x["target_rgb"], x["motion_mask"]
    t["composite"] = w["composite"] * charbonnier(x["rgb"], target, x["ray_mask"])
    t["cross_time"] = w["cross_time"] * occlusion_weighted_charbonnier(
        x["cross_time_rgb"], target, x["cross_time_ray_mask"], x["cross_time_occlusion_map"])
    if w["dynamic_region"] != 0:
        t["dynamic_region"] = w["dynamic_region"] * charbonnier(
            x["rgb_dynamic"], target, x["ray_mask"] * motion)
    t["dynamic_only"] = w["dynamic_only"] * charbonnier(
        x["dynamic_only_rgb"], target, x["dynamic_only_ray_mask"] * motion)
    t["cross_time_dynamic_only"] = w["cross_time_dynamic_only"] * occlusion_weighted_charbonnier(
        x["cross_time_dynamic_only_rgb"], target, x["cross_time_dynamic_only_ray_mask"] * motion,
        x["cross_time_dynamic_only_occlusion_map"])
    t["disparity"] = w["disparity"] * disparity_l1(x["depth"], x["target_disparity"],
                                                   x["ray_mask"])
    t["flow"] = w["flow"] * flow_l1(x["render_flows"], x["target_flows"],
                                    x["ray_mask"][None] * x["flow_validity"])
    t["cycle"] = w["cycle"] * cycle(x["points_ref"], x["points_anchor"], x["occlusion_weights"])
    magnitude, temporal, spatial = scene_flow_terms(x["scene_flow"])
    t["scene_flow_magnitude"] = w["scene_flow"] * magnitude
    t["scene_flow_temporal"] = w["scene_flow"] * temporal
    t["scene_flow_spatial"] = w["scene_flow"] * spatial
    ratio = weight_ratio(x["weights_dynamic"], x["weights_static"])
    t["skew_entropy"] = w["skew_entropy"] * skew_entropy(ratio)
    t["distortion"] = w["distortion"] * distortion(x["weights"], x["s_vals"])
    static_mask = static_pixels * (1 - ratio).detach()
    t["static_region"] = w["static_region"] * charbonnier(x["rgb_static"], target, static_mask)
    if w["dynamic_weight_suppression"] != 0:
        suppressed = (static_mask * (ratio < 0.1)).detach()
        dynamic = x["weights_dynamic"].sum(-1)
        t["dynamic_weight_suppression"] = w["dynamic_weight_suppression"] * torch.sum(
            torch.abs(dynamic * suppressed)) / torch.sum(suppressed + GUARD)
    return t


def total(t):
    rgb = sum(t.get(k, 0) for k in ("composite", "cross_time", "dynamic_region", "dynamic_only",
                                     "cross_time_dynamic_only"))
    static = sum(t.get(k, 0) for k in ("static_region", "dynamic_weight_suppression"))
    regularizers = sum(t.get(k, 0) for k in ("scene_flow_magnitude", "scene_flow_temporal",
                                              "scene_flow_spatial"))
    loss = (t.get("static_bootstrap", 0) + rgb + t.get("cycle", 0) + t.get("flow", 0) +
            t.get("disparity", 0) + regularizers + t.get("skew_entropy", 0) +
            t.get("distortion", 0) + static)
    return rgb, static, loss


def save(case, name, tensor):
    np.save(case / f"{name}.npy", np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float64))


def run(case):
    spec = json.loads((case / "case.json").read_text())
    schedule = spec["schedule"]
    w = weights_at(spec["step"], schedule)
    (case / "ref_weights.json").write_text(json.dumps(w))
    x = {}
    for path in sorted(case.glob("*.npy")):
        if not path.name.startswith("ref_"):
            x[path.stem] = torch.tensor(np.load(path), requires_grad=path.stem in DIFFERENTIABLE)
    t = terms(x, w)
    rgb, static, loss = total(t)
    values = {k: float(v) for k, v in t.items()}
    values.update(rgb=float(rgb), static_loss=float(static), total=float(loss))
    (case / "ref_terms.json").write_text(json.dumps(values))
    inputs = [name for name in DIFFERENTIABLE if name in x]
    for name, grad in zip(inputs, torch.autograd.grad(loss, [x[n] for n in inputs],
                                                      retain_graph=True, allow_unused=True)):
        save(case, f"ref_grad_{name}", grad if grad is not None else torch.zeros_like(x[name]))
    for term, value in t.items():
        grads = torch.autograd.grad(value, [x[n] for n in inputs], retain_graph=True,
                                    allow_unused=True)
        for name, grad in zip(inputs, grads):
            if grad is not None:
                save(case, f"ref_grad_{term}.{name}", grad)
    save(case, "ref_learning_rates",
         torch.from_numpy(learning_rates(schedule, spec["learning_rate_steps"])))


def main():
    for spec in sorted(pathlib.Path(sys.argv[1]).glob("*/case.json")):
        run(spec.parent)


if __name__ == "__main__":
    main()
