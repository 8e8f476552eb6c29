#!/usr/bin/env python3
"""PyTorch float64 reference of the pose model's geometric layers: the oracle for mvibr's
soft-argmax (include/mvibr/nn/soft_argmax.h), triangulation weights and triangulation
(include/mvibr/geom/triangulation.h), and cross-view fusion
(include/mvibr/nn/cross_view_fusion.h).

Written here from the published semantics (karfly/learnable-triangulation-pytorch, and for the
fusion microsoft/multiview-human-pose-estimation-pytorch):
- op.integrate_tensor_2d on heatmaps * heatmap_multiplier: softmax over the H W cells, expected
  column and row; here on mvibr's channels-last layout [N, H, W, C] with the first J channels
  the heatmaps, and mapped to pixels as u = scale_x x + offset_x, v = scale_y y + offset_y;
- AlgebraicTriangulationNet's weights: c / c.sum(over views) + 1e-5;
- multiview.triangulate_point_from_multiple_views_linear_torch's rows, a1 = u P3 - P1,
  a2 = v P3 - P2, times the view's weight; solved as mvibr solves them, by the 3x3 normal
  equations of X = [x; 1] (torch.linalg.solve), not by the published SVD of A. The two agree
  for noise-free 2D points (both find A's null vector); under noise the SVD minimises |A X| over
  |X| = 1 and mvibr over X4 = 1, the same algebraic error under another normalisation. Checked
  once against the published function (200 joints, 4-camera rings at 3-5 m, 1000 px images):
  exact points, both within 2.4e-15 m of the truth and 3.7e-15 m of each other; 2 px of noise,
  both up to 1.4e-2 m off and 6.2e-5 m apart.
- microsoft/multiview-human-pose-estimation-pytorch's Aggregation: each target view in turn, the
  other views in their order, each through the next ChannelWiseFC (heatmap rows [N C, H W] times
  a [H W, H W] weight), mixed with the target's own heatmap by fixed weights (0.4 own, the rest
  0.6 / (V - 1) each; the published 0.2 for its 4 views).
Every gradient by autograd. Used by test/unit/pose_layers_test.cpp, which writes each case into
a folder:

    case.json           {"multiplier", "scale_x", "offset_x", "scale_y", "offset_y", "joints"}
    heatmaps.npy        [N, H, W, C]
    grad_points_2d.npy  [N, J, 2]     L = sum(grad * output) for each layer's gradients
    confidences.npy     [B, V, J]
    grad_weights.npy    [B, V, J]
    projections.npy     [B, V, 3, 4]
    points.npy          [B, V, J, 2]
    weights.npy         [B, V, J]
    grad_joints.npy     [B, J, 3]

and this script writes ref_points_2d.npy, ref_grad_heatmaps.npy (all C channels),
ref_weights.npy, ref_grad_confidences.npy, ref_joints.npy, ref_grad_points.npy and
ref_grad_weights.npy next to them. A fusion case (test/unit/cross_view_fusion_test.cpp) has
{"layer": "cross_view_fusion"} in case.json and

    fusion_heatmaps.npy  [V, R, P]      rows of heatmap pixels per view
    fusion_weights.npy   [V (V - 1), P, P]
    grad_fused.npy       [V, R, P]

for which this script writes ref_fused.npy, ref_grad_fusion_heatmaps.npy and
ref_grad_fusion_weights.npy.

    pose_layers_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)


def soft_argmax(heatmaps, spec):
    n, h, w, _ = heatmaps.shape
    maps = heatmaps[..., :spec["joints"]].permute(0, 3, 1, 2)  # [N, J, H, W]
    p = torch.softmax((maps * spec["multiplier"]).reshape(n, spec["joints"], -1), dim=2)
    p = p.reshape(n, spec["joints"], h, w)
    x = (p.sum(dim=2) * torch.arange(w)).sum(dim=2)
    y = (p.sum(dim=3) * torch.arange(h)).sum(dim=2)
    return torch.stack([spec["scale_x"] * x + spec["offset_x"],
                        spec["scale_y"] * y + spec["offset_y"]], dim=2)


def triangulation_weights(confidences):
    return confidences / confidences.sum(dim=1, keepdim=True) + 1e-5


def triangulate(projections, points, weights):
    """[B, V, 3, 4], [B, V, J, 2], [B, V, J] -> [B, J, 3], every joint at once."""
    p3 = projections[:, :, None, 2:3, :]                         # [B, V, 1, 1, 4]
    rows = points[..., None] * p3 - projections[:, :, None, :2, :]  # [B, V, J, 2, 4]
    rows = rows * weights[..., None, None]
    m = torch.einsum("bvjki,bvjkl->bjil", rows[..., :3], rows[..., :3])
    r = -torch.einsum("bvjki,bvjk->bji", rows[..., :3], rows[..., 3])
    return torch.linalg.solve(m, r.unsqueeze(-1)).squeeze(-1)


def cross_view_fusion(heatmaps, weights):
    """[V, R, P] heatmap rows, [V (V - 1), P, P] pair weights -> the fused [V, R, P]."""
    views = heatmaps.shape[0]
    other = 0.6 / (views - 1)
    fused, index = [], 0
    for target in range(views):
        mixed = 0.4 * heatmaps[target]
        for source in range(views):
            if source == target:
                continue
            mixed = mixed + other * torch.matmul(heatmaps[source], weights[index])
            index += 1
        fused.append(mixed)
    return torch.stack(fused)


def load(case, name, grad=False):
    return torch.tensor(np.load(case / f"{name}.npy"), requires_grad=grad)


def save(case, name, tensor):
    np.save(case / f"ref_{name}.npy", np.ascontiguousarray(tensor.detach().numpy(),
                                                          dtype=np.float64))


def run_fusion(case):
    heatmaps = load(case, "fusion_heatmaps", grad=True)
    weights = load(case, "fusion_weights", grad=True)
    fused = cross_view_fusion(heatmaps, weights)
    (fused * load(case, "grad_fused")).sum().backward()
    save(case, "fused", fused)
    save(case, "grad_fusion_heatmaps", heatmaps.grad)
    save(case, "grad_fusion_weights", weights.grad)


def run(case):
    spec = json.loads((case / "case.json").read_text())
    if spec.get("layer") == "cross_view_fusion":
        run_fusion(case)
        return

    heatmaps = load(case, "heatmaps", grad=True)
    points_2d = soft_argmax(heatmaps, spec)
    (points_2d * load(case, "grad_points_2d")).sum().backward()
    save(case, "points_2d", points_2d)
    save(case, "grad_heatmaps", heatmaps.grad)

    confidences = load(case, "confidences", grad=True)
    weights = triangulation_weights(confidences)
    (weights * load(case, "grad_weights")).sum().backward()
    save(case, "weights", weights)
    save(case, "grad_confidences", confidences.grad)

    points = load(case, "points", grad=True)
    weights = load(case, "weights", grad=True)
    joints = triangulate(load(case, "projections"), points, weights)
    (joints * load(case, "grad_joints")).sum().backward()
    save(case, "joints", joints)
    save(case, "grad_points", points.grad)
    save(case, "grad_weights", weights.grad)


def main():
    for spec in sorted(pathlib.Path(sys.argv[1]).glob("*/case.json")):
        run(spec.parent)


if __name__ == "__main__":
    main()
