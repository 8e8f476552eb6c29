#!/usr/bin/env python3
"""PyTorch reference of IBRNet's whole training step: the oracle for mvibr's IbrnetModel.

Composed from this folder's tensor-level references, not written again: render_ops_reference.py
(rays, depths, gather, compositing, ray mask, masked MSE), aggregator_reference.py (the
aggregation network) and feature_net_reference.py (the ResUNet); autograd differentiates the
composition. The parity test runs it in float64; bench/ibrnet_torch_step.py runs the same
train_step in float32 as the PyTorch side of the training benchmark.

Used by test/train/model_parity_test.cpp, which writes each case into a folder (with
test/reference/ibrnet_model_case.cpp, as the benchmark does):

    case.json            the step's config (see train_step) and the feature maps' size
    checkpoint.h5        an mvibr checkpoint: the parameters as "model/<state_dict name>"
    images.npy           [V,H,W,3] the source images, 0..255
    cameras.npy          [V,16] fx, fy, cx, cy, c2w (3x4 row-major); target_camera.npy [16]
    pixels.npy           [R,2] the target pixels; target_rgb.npy [R,3] their colours in [0,1]
    u_coarse.npy         [R,N_samples] the Philox uniforms of the stratified jitter
    u_importance.npy     [R,N_importance] those of the importance samples
    mask_<conv>.npy      the fp32 side's ReLU masks in the feature net (see
                         feature_net_reference.relu_on_our_side; the parity test alone)

and this script writes ref_loss.npy ([mse_coarse, mse_fine]) and ref_grad.<name>.npy for every
parameter of the checkpoint; it fails if the step leaves one unused.

    ibrnet_model_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import contextlib
import json

import h5py
import numpy as np
import torch

import aggregator_reference as aggregator
import feature_net_reference as feature_net
import render_ops_reference as render_ops

torch.set_default_dtype(torch.float64)

FEATURE_PREFIX = "feature_net."
INPUTS = ["images", "cameras", "target_camera", "pixels", "target_rgb", "u_coarse",
          "u_importance"]


def load_case(case, dtype):
    """The case's config, its parameters by state_dict name (requiring grad) and its INPUTS, as
    tensors of dtype."""
    cfg = json.loads((case / "case.json").read_text())
    with h5py.File(case / "checkpoint.h5", "r") as checkpoint:
        params = {name: torch.from_numpy(np.asarray(value)).to(dtype).requires_grad_()
                  for name, value in checkpoint["model"].items()}
    inputs = {name: torch.from_numpy(np.load(case / f"{name}.npy")).to(dtype) for name in INPUTS}
    return cfg, params, inputs


def no_phases(_name):
    return contextlib.nullcontext()


def network(params, prefix):
    return {name[len(prefix):]: value for name, value in params.items() if name.startswith(prefix)}


def render_pass(cfg, net, maps, depths, rays, sources, target_rgb, phase):
    """One pass (coarse or fine) of IBRNet's step: its masked MSE and its weights [R,S]."""
    origins, directions = rays
    with phase("gather_forward"):
        rgb_features, ray_diff, mask = render_ops.gather_samples(
            origins, directions, depths, sources["cameras"], sources["images"], maps,
            sources["target_center"])
    with phase("aggregator_forward"):
        rgb, sigma = aggregator.ibrnet(net, cfg, rgb_features, ray_diff, mask)
    with phase("composite_loss"):
        rgb_map, _, _, weights = render_ops.composite_rays(sigma, rgb, depths, directions,
                                                           cfg["delta"], cfg["white_bkgd"])
        # IBRNet's rule: a ray counts when more than 8 of its samples are seen by more than 1 view.
        ray_mask = render_ops.rays_that_count(mask, min_views=2, min_samples=9)
        loss = render_ops.masked_mse_loss(rgb_map, target_rgb, ray_mask)
    return loss, weights


def train_step(cfg, params, inputs, relu, norm=feature_net.instance_norm, phase=no_phases):
    """The forward of one training step: mse_coarse, mse_fine (zero without a fine pass).

    cfg, params, inputs: as load_case gives them. relu and norm: the feature net's (see
    feature_net_reference.resunet_forward). phase(name): a context manager around each forward
    phase, named as mvibr's PhaseTimes (no_phases: none).
    """
    with phase("features_forward"):
        images = inputs["images"] / 255.0
        out = feature_net.resunet_forward(lambda name: params[FEATURE_PREFIX + name], images,
                                          cfg["widths"], cfg["blocks"], relu, norm)
        coarse_maps, fine_maps = feature_net.split_maps(out, cfg["coarse_feat_dim"],
                                                        cfg["fine_feat_dim"], cfg["coarse_only"])
    sampling = {"inv_uniform": cfg["inv_uniform"], "det": cfg["det"]}
    with phase("sampling"):
        rays = render_ops.ray_bundle(inputs["target_camera"], inputs["pixels"])
        depths = render_ops.coarse_depths(cfg["near"], cfg["far"], cfg["N_samples"],
                                          u=inputs["u_coarse"], **sampling)
    target_center = render_ops.intrinsics_and_pose(inputs["target_camera"])[1][:3, 3]
    sources = {"cameras": inputs["cameras"], "images": images, "target_center": target_center}
    mse_coarse, weights = render_pass(cfg, network(params, "net_coarse."), coarse_maps, depths,
                                      rays, sources, inputs["target_rgb"], phase)
    mse_fine = torch.zeros((), dtype=mse_coarse.dtype)
    if not cfg["coarse_only"] and cfg["N_importance"] > 0:
        with phase("sampling"):
            # The importance samples follow the coarse weights as a stop-gradient (IBRNet
            # detaches them).
            merged = render_ops.importance_depths(depths, weights.detach(), cfg["N_importance"],
                                                  u=inputs["u_importance"], **sampling)
        mse_fine, _ = render_pass(cfg, network(params, "net_fine."), fine_maps, merged, rays,
                                  sources, inputs["target_rgb"], phase)
    return mse_coarse, mse_fine


def run_case(case):
    cfg, params, inputs = load_case(case, torch.float64)
    masks = {path.stem[len("mask_"):]: torch.from_numpy(np.load(path))
             for path in case.glob("mask_*.npy")}
    mse_coarse, mse_fine = train_step(
        cfg, params, inputs, lambda y, name: feature_net.relu_on_our_side(masks[name], y, name))
    names = sorted(params)
    grads = torch.autograd.grad(mse_coarse + mse_fine, [params[name] for name in names])
    np.save(case / "ref_loss.npy", np.array([mse_coarse.item(), mse_fine.item()]))
    for name, grad in zip(names, grads):
        np.save(case / f"ref_grad.{name}.npy", np.ascontiguousarray(grad.numpy()))


def main():
    for case in render_ops.case_folders("ibrnet_model_reference.py"):
        run_case(case)


if __name__ == "__main__":
    main()
