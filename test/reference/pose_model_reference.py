#!/usr/bin/env python3
"""PyTorch reference of the pose model's whole training step: the oracle for mvibr's PoseModel
(include/mvibr/train/pose_model.h).

Composed from this folder's references, not written again: feature_net_reference.py (the
ResUNet backbone) and pose_layers_reference.py (soft-argmax, the confidence weights, the
normal-equation triangulation, the cross-view fusion); the confidence head (mean over the map,
Linear, ReLU, Linear, sigmoid, as learnable triangulation's GlobalAveragePoolingHead ends) and the
loss are written here. With cross_view_fusion the 3D joints come from the fused heatmaps and the
loss is the fused path's plus the raw path's (as the published training sums JointsMSE on both).
Autograd differentiates the composition, in float64. Used by test/train/pose_model_test.cpp (and
by bench/pose_torch_ddp.py, in float32 under DDP), which writes each case into a folder:

    case.json          {"widths", "blocks", "joints", "confidence_channels", "multiplier",
                        "stride", "w_joints_2d", "use_confidences", "cross_view_fusion",
                        "instants", "views"}
    checkpoint.h5      an mvibr checkpoint: the parameters as "model/<state_dict name>"
    images.npy         [B V, H, W, 3] every instant's cameras in order, 0..255
    projections.npy    [B, V, 3, 4]
    joints.npy         [B, J, 3] the true 3D joints
    joints_2d.npy      [B V, J, 2] the true 2D joints; visible.npy [B V, J] 0 or 1
    mask_<conv>.npy    the fp32 side's ReLU masks in the backbone (relu_on_our_side)

and this script writes ref_loss.npy ([loss, 3D term, 2D term], then with fusion the raw path's
3D and 2D terms), ref_joints.npy [B, J, 3] and ref_grad.<name>.npy for every parameter of the
checkpoint.

    pose_model_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import feature_net_reference as feature_net
import pose_layers_reference as pose_layers
import render_ops_reference as render_ops

torch.set_default_dtype(torch.float64)


def fused_heatmaps(cfg, params, maps):
    """The cross-view fusion of the J heatmaps of maps [B V, Hf, Wf, J + K]: [B V, Hf, Wf, J]."""
    B, V, J = cfg["instants"], cfg["views"], cfg["joints"]
    _, h, w, _ = maps.shape
    rows = maps[..., :J].reshape(B, V, h * w, J).permute(1, 0, 3, 2).reshape(V, B * J, h * w)
    weights = torch.stack([params[f"fusion.{k}.weight"] for k in range(V * (V - 1))])
    fused = pose_layers.cross_view_fusion(rows, weights).reshape(V, B, J, h, w)
    return fused.permute(1, 0, 3, 4, 2).reshape(B * V, h, w, J)


def path_loss(cfg, inputs, points, weights):
    """One path's 3D and 2D terms and 3D joints, from its 2D joints [B V, J, 2]."""
    B, V, J = cfg["instants"], cfg["views"], cfg["joints"]
    joints = pose_layers.triangulate(inputs["projections"], points.reshape(B, V, J, 2), weights)
    loss_3d = (joints - inputs["joints"]).abs().sum() / (B * J)
    visible = inputs["visible"][..., None]
    width = inputs["images"].shape[2]
    loss_2d = ((points - inputs["joints_2d"]).abs() * visible).sum() / width / visible.sum()
    return loss_3d, loss_2d, joints


def step(cfg, params, inputs, relu, norm=feature_net.instance_norm):
    """The loss, its terms (3D and 2D; with fusion the fused path's, then the raw path's) and
    the 3D joints of one step. relu and norm: the backbone's
    (feature_net_reference.resunet_forward); cfg["conv_operands"] "bf16": its convolutions'."""
    B, V, J = cfg["instants"], cfg["views"], cfg["joints"]
    images = inputs["images"] / 255.0
    conv = feature_net.conv2d_bf16 if cfg.get("conv_operands") == "bf16" else F.conv2d
    out = feature_net.resunet_forward(lambda name: params["backbone." + name], images,
                                      cfg["widths"], cfg["blocks"], relu, norm, conv=conv)
    maps = out.permute(0, 2, 3, 1)  # [B V, Hf, Wf, J + K]
    stride = cfg["stride"]
    spec = {"joints": J, "multiplier": cfg["multiplier"], "scale_x": stride,
            "offset_x": (stride - 1) / 2, "scale_y": stride, "offset_y": (stride - 1) / 2}
    points = pose_layers.soft_argmax(maps, spec)
    if cfg["use_confidences"]:
        pooled = maps[..., J:].mean(dim=(1, 2))
        hidden = F.relu(F.linear(pooled, params["confidence.0.weight"],
                                 params["confidence.0.bias"]))
        confidences = torch.sigmoid(F.linear(hidden, params["confidence.2.weight"],
                                             params["confidence.2.bias"]))
        weights = pose_layers.triangulation_weights(confidences.reshape(B, V, J))
    else:
        weights = torch.ones(B, V, J)
    if not cfg.get("cross_view_fusion", False):
        loss_3d, loss_2d, joints = path_loss(cfg, inputs, points, weights)
        return loss_3d + cfg["w_joints_2d"] * loss_2d, [loss_3d, loss_2d], joints
    fused_points = pose_layers.soft_argmax(fused_heatmaps(cfg, params, maps), spec)
    loss_3d, loss_2d, joints = path_loss(cfg, inputs, fused_points, weights)
    raw_3d, raw_2d, _ = path_loss(cfg, inputs, points, weights)
    loss = loss_3d + cfg["w_joints_2d"] * loss_2d + raw_3d + cfg["w_joints_2d"] * raw_2d
    return loss, [loss_3d, loss_2d, raw_3d, raw_2d], joints


def run_case(case):
    cfg = json.loads((case / "case.json").read_text())
    with h5py.File(case / "checkpoint.h5", "r") as checkpoint:
        params = {name: torch.from_numpy(np.asarray(value)).to(torch.float64).requires_grad_()
                  for name, value in checkpoint["model"].items()}
    inputs = {name: torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)
              for name in ["images", "projections", "joints", "joints_2d", "visible"]}
    rounding = 2.0**-8 if cfg.get("conv_operands") == "bf16" else 1e-4
    masks = {path.stem[len("mask_"):]: torch.from_numpy(np.load(path))
             for path in case.glob("mask_*.npy")}
    loss, terms, joints = step(
        cfg, params, inputs,
        lambda y, name: feature_net.relu_on_our_side(masks[name], y, name, rounding))
    names = sorted(params)
    grads = torch.autograd.grad(loss, [params[name] for name in names], allow_unused=True)
    np.save(case / "ref_loss.npy", np.array([loss.item()] + [term.item() for term in terms]))
    np.save(case / "ref_joints.npy", joints.detach().numpy())
    for name, grad in zip(names, grads):
        value = torch.zeros_like(params[name]) if grad is None else grad
        np.save(case / f"ref_grad.{name}.npy", np.ascontiguousarray(value.detach().numpy()))


def main():
    for case in render_ops.case_folders("pose_model_reference.py"):
        run_case(case)


if __name__ == "__main__":
    main()
