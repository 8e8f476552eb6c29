#!/usr/bin/env python3
"""PyTorch reference of IBRNet's whole training step: the oracle for mvibr's IbrnetModel.

Composed from this folder's op references, not written again: render_ops_reference.py (rays,
depths, gather, compositing, ray mask, masked MSE), aggregator_reference.py (the aggregation
network) and feature_net_reference.py (the ResUNet), in float64. Most of those ops are written
against a case folder (inputs as .npy, outputs as ref_*.npy, the gradients for one given upstream
gradient), so each one that gradients flow through becomes one autograd node (FileOp): forward
runs the op with zero upstream gradients and takes its outputs, backward runs it again with
autograd's upstream gradients and takes the gradients the op's own autograd computed. The step is
then one autograd graph, and the gradient of the loss w.r.t. every parameter is autograd's.

Used by test/train/model_parity_test.cpp, which writes each case into a folder:

    case.json            the step's config (see main) and the feature maps' size
    checkpoint.h5        an mvibr checkpoint: the parameters as "model/<state_dict name>"
    images.npy           [V,H,W,3] the source images, 0..255
    cameras.npy          [V,16] fx, fy, cx, cy, c2w (3x4 row-major); target_camera.npy [16]
    pixels.npy           [R,2] the target pixels; target_rgb.npy [R,3] their colours in [0,1]
    u_coarse.npy         [R,N_samples] the Philox uniforms of the stratified jitter
    u_importance.npy     [R,N_importance] those of the importance samples
    mask_<conv>.npy      the fp32 side's ReLU masks in the feature net (see
                         feature_net_reference.relu_on_our_side)

and this script writes ref_loss.npy ([mse_coarse, mse_fine]) and ref_grad.<name>.npy for every
parameter of the checkpoint; it fails if the step leaves one unused.

    ibrnet_model_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys
import tempfile

import h5py
import numpy as np
import torch

import aggregator_reference as aggregator
import feature_net_reference as feature_net
import render_ops_reference as render_ops

torch.set_default_dtype(torch.float64)

FEATURE_PREFIX = "feature_net."


def call(op, spec, arrays, params=None):
    """Runs a case-folder op on in-memory arrays (params: under params/); its ref_* by name."""
    with tempfile.TemporaryDirectory() as folder:
        case = pathlib.Path(folder)
        files = [(case, arrays)]
        if params is not None:
            (case / "params").mkdir()
            files.append((case / "params", params))
        for where, values in files:
            for name, value in values.items():
                value = value.detach().numpy() if torch.is_tensor(value) else value
                np.save(where / f"{name}.npy", np.asarray(value, dtype=np.float64))
        with torch.enable_grad():  # the ops' own autograd, also inside FileOp.forward
            op(case, spec)
        return {path.name[len("ref_"):-len(".npy")]: torch.from_numpy(np.load(path))
                for path in case.glob("ref_*.npy")}


class Op:
    """A case-folder op as FileOp runs it. inputs: the names it differentiates (it writes
    grad_<name>); constants: its other arrays; outputs: what it writes, the first len(upstream)
    differentiable; upstream: for each of those, the name and shape of its upstream gradient
    (shape None: a scalar of the spec); params: the inputs go under params/."""

    def __init__(self, op, spec, inputs, constants, outputs, upstream, params=False):
        self.op, self.spec, self.inputs, self.constants = op, spec, inputs, constants
        self.outputs, self.upstream, self.params = outputs, upstream, params

    def run(self, tensors, upstream):
        spec, arrays = dict(self.spec), dict(self.constants)
        for (name, shape), grad in zip(self.upstream, upstream):
            if shape is None:
                spec[name] = float(grad.reshape(-1)[0])
            else:
                arrays[name] = grad
        inputs = dict(zip(self.inputs, tensors))
        if self.params:
            return call(self.op, spec, arrays, inputs)
        return call(self.op, spec, {**arrays, **inputs})

    def zero_upstream(self):
        return [torch.zeros(shape if shape is not None else ()) for _, shape in self.upstream]


class FileOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, *tensors):
        ctx.op = op
        ctx.save_for_backward(*tensors)
        result = op.run(tensors, op.zero_upstream())
        outputs = tuple(result[name] for name in op.outputs)
        ctx.mark_non_differentiable(*outputs[len(op.upstream):])
        return outputs

    @staticmethod
    def backward(ctx, *upstream):
        op = ctx.op
        result = op.run(ctx.saved_tensors, upstream[:len(op.upstream)])
        return (None,) + tuple(result["grad_" + name] for name in op.inputs)


def feature_maps(cfg, params, images, masks):
    """The ResUNet's coarse and fine maps [V,Hf,Wf,C] of images [V,H,W,3] in [0,1]."""
    names = sorted(name for name in params if name.startswith(FEATURE_PREFIX))
    spec = {"prefix": FEATURE_PREFIX, "widths": cfg["widths"], "blocks": cfg["blocks"],
            "coarse_out_ch": cfg["coarse_feat_dim"], "fine_out_ch": cfg["fine_feat_dim"],
            "coarse_only": cfg["coarse_only"]}
    cells = (images.shape[0], *cfg["feature_size"])
    upstream = [("grad_coarse", (*cells, cfg["coarse_feat_dim"]))]
    outputs = ["coarse"]
    if not cfg["coarse_only"]:
        upstream.append(("grad_fine", (*cells, cfg["fine_feat_dim"])))
        outputs.append("fine")
    op = Op(feature_net.resunet, spec, names, {"images": images, **masks}, outputs, upstream,
            params=True)
    maps = FileOp.apply(op, *[params[name] for name in names])
    return maps[0], (maps[1] if len(maps) > 1 else None)


def render_pass(cfg, net, maps, depths, rays, sources, target_rgb):
    """One pass (coarse or fine) of IBRNet's step: its masked MSE and its weights [R,S]."""
    origins, directions = rays
    R, S = depths.shape
    V, C = maps.shape[0], maps.shape[3]
    gather = Op(render_ops.gather, {}, ["features"],
                {"origins": origins, "directions": directions, "depths": depths, **sources},
                ["rgb_features", "ray_diff", "mask"], [("grad_rgb_features", (R, S, V, 3 + C))])
    rgb_features, ray_diff, mask = FileOp.apply(gather, maps)

    rgb, sigma = aggregator.aggregate(net, rgb_features, ray_diff, mask,
                                      cfg["anti_alias_pooling"], cfg["attention_mask"] == "keys")

    composite = Op(render_ops.composite, {"delta": cfg["delta"], "white_bkgd": cfg["white_bkgd"]},
                   ["sigma", "rgb"], {"depths": depths, "directions": directions},
                   ["rgb_map", "depth_map", "acc_map", "weights"],
                   [("grad_rgb_map", (R, 3)), ("grad_depth_map", (R,)), ("grad_acc_map", (R,)),
                    ("grad_weights", (R, S))])
    rgb_map, _, _, weights = FileOp.apply(composite, sigma, rgb)

    # IBRNet's rule: a ray counts when more than 8 of its samples are seen by more than 1 view.
    ray_mask = call(render_ops.ray_mask, {"min_views": 2, "min_samples": 9},
                    {"sample_mask": mask})["ray_mask"]
    mse = Op(render_ops.masked_mse, {}, ["predicted"], {"target": target_rgb, "ray_mask": ray_mask},
             ["loss"], [("grad_loss", None)])
    (loss,) = FileOp.apply(mse, rgb_map)
    return loss[0], weights


def network(params, prefix):
    return {name[len(prefix):]: value for name, value in params.items() if name.startswith(prefix)}


def train_step(case, cfg, params):
    def load(name):
        return torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)

    masks = {path.stem: np.load(path) for path in case.glob("mask_*.npy")}
    images = load("images") / 255.0
    target_camera, target_rgb = load("target_camera"), load("target_rgb")
    rays = call(render_ops.rays, {}, {"camera": target_camera, "pixels": load("pixels")})
    rays = rays["origins"], rays["directions"]
    target_center = render_ops.intrinsics_and_pose(target_camera)[1][:3, 3]
    sources = {"cameras": load("cameras"), "images": images, "target_center": target_center}

    coarse_maps, fine_maps = feature_maps(cfg, params, images, masks)
    sampling = {"inv_uniform": cfg["inv_uniform"], "det": cfg["det"]}
    depths = call(render_ops.coarse,
                  {"near": cfg["near"], "far": cfg["far"], "n_samples": cfg["N_samples"],
                   **sampling}, {"u": load("u_coarse")})["depths"]
    mse_coarse, weights = render_pass(cfg, network(params, "net_coarse."), coarse_maps, depths,
                                      rays, sources, target_rgb)
    mse_fine = torch.zeros(())
    if not cfg["coarse_only"] and cfg["N_importance"] > 0:
        # The importance samples follow the coarse weights as a stop-gradient (IBRNet detaches).
        merged = call(render_ops.importance, {"n_importance": cfg["N_importance"], **sampling},
                      {"depths": depths, "weights": weights.detach(),
                       "u": load("u_importance")})["merged"]
        mse_fine, _ = render_pass(cfg, network(params, "net_fine."), fine_maps, merged, rays,
                                  sources, target_rgb)
    return mse_coarse, mse_fine


def run_case(case):
    cfg = json.loads((case / "case.json").read_text())
    with h5py.File(case / "checkpoint.h5", "r") as checkpoint:
        params = {name: torch.from_numpy(np.asarray(value, dtype=np.float64)).requires_grad_()
                  for name, value in checkpoint["model"].items()}
    mse_coarse, mse_fine = train_step(case, cfg, params)
    names = sorted(params)
    grads = torch.autograd.grad(mse_coarse + mse_fine, [params[name] for name in names])
    np.save(case / "ref_loss.npy", np.array([mse_coarse.item(), mse_fine.item()]))
    for name, grad in zip(names, grads):
        np.save(case / f"ref_grad.{name}.npy", np.ascontiguousarray(grad.numpy()))


def main():
    root = pathlib.Path(sys.argv[1])
    cases = sorted(path.parent for path in root.glob("*/case.json"))
    if not cases:
        sys.exit(f"ibrnet_model_reference.py: no case.json under {root}")
    for case in cases:
        run_case(case)


if __name__ == "__main__":
    main()
