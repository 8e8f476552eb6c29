#!/usr/bin/env python3
"""PyTorch reference of the rendering core: the oracle for every forward output and gradient.

Written from IBRNet's definitions (sample_along_camera_ray, sample_pdf, Projector.compute,
raw2outputs, img2mse) in float64 with autograd for every gradient. Used by
reference_test.cpp: it writes each case as .npy inputs plus case.json into a folder; this script
writes the reference outputs next to them as ref_<name>.npy.

    render_ops_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def load(case, name):
    return torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)


def save(case, name, tensor):
    np.save(case / f"ref_{name}.npy", np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float64))


def intrinsics_and_pose(camera):
    """camera: [16] = fx, fy, cx, cy, c2w (3x4 row-major) -> K 4x4, c2w 4x4 (IBRNet's layout)."""
    fx, fy, cx, cy = camera[:4]
    K = torch.eye(4)
    K[0, 0], K[1, 1], K[0, 2], K[1, 2] = fx, fy, cx, cy
    pose = torch.eye(4)
    pose[:3, :] = camera[4:].reshape(3, 4)
    return K, pose


def ray_bundle(camera, pixels):
    """origins, directions [R,3] of pixels [R,2] (u, v) of camera [16]."""
    K, pose = intrinsics_and_pose(camera)
    homogeneous = torch.cat([pixels, torch.ones_like(pixels[:, :1])], dim=1)  # [R,3]
    directions = (pose[:3, :3] @ torch.inverse(K[:3, :3]) @ homogeneous.t()).t()
    return pose[:3, 3].expand_as(directions), directions


def rays(case, p):
    origins, directions = ray_bundle(load(case, "camera"), load(case, "pixels"))
    save(case, "origins", origins)
    save(case, "directions", directions)


def evenly_spaced(near, far, n, inv_uniform, n_rays):
    if n == 1:
        return torch.full((n_rays, 1), near)
    if inv_uniform:
        start = 1.0 / near
        step = (1.0 / far - start) / (n - 1)
        return 1.0 / torch.stack([start + i * step * torch.ones(n_rays) for i in range(n)], 1)
    step = (far - near) / (n - 1)
    return torch.stack([near + i * step * torch.ones(n_rays) for i in range(n)], 1)


def coarse_depths(near, far, n_samples, inv_uniform, det, u):
    """[R,n_samples] stratified depths, jittered by the uniforms u [R,n_samples] unless det."""
    z = evenly_spaced(near, far, n_samples, inv_uniform, u.shape[0])
    if not det:
        mids = 0.5 * (z[:, 1:] + z[:, :-1])
        upper = torch.cat([mids, z[:, -1:]], -1)
        lower = torch.cat([z[:, :1], mids], -1)
        z = lower + (upper - lower) * u
    return z


def coarse(case, p):
    save(case, "depths", coarse_depths(p["near"], p["far"], p["n_samples"], p["inv_uniform"],
                                       p["det"], load(case, "u")))


def sample_pdf(bins, weights, u):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, -1)], -1)
    above = torch.zeros_like(u, dtype=torch.long)
    for i in range(weights.shape[1]):
        above += (u >= cdf[:, i:i + 1]).long()
    below = torch.clamp(above - 1, min=0)
    index = torch.stack([below, above], 2)
    n = u.shape[1]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(-1, n, -1), 2, index)
    bins_g = torch.gather(bins.unsqueeze(1).expand(-1, n, -1), 2, index)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


def importance_depths(z, w, n_importance, inv_uniform, det, u):
    """The coarse depths z [R,S] and n_importance samples of their weights w [R,S], sorted."""
    if det:
        u = torch.linspace(0, 1, n_importance).expand(z.shape[0], n_importance)
    if inv_uniform:
        inv = 1.0 / z
        mids = 0.5 * (inv[:, 1:] + inv[:, :-1])
        samples = 1.0 / sample_pdf(torch.flip(mids, [1]), torch.flip(w[:, 1:-1], [1]), u)
    else:
        samples = sample_pdf(0.5 * (z[:, 1:] + z[:, :-1]), w[:, 1:-1], u)
    return torch.sort(torch.cat([z, samples], -1), -1)[0]


def importance(case, p):
    u = None if p["det"] else load(case, "u")
    save(case, "merged", importance_depths(load(case, "depths"), load(case, "weights"),
                                           p["n_importance"], p["inv_uniform"], p["det"], u))


def gather_points(points, moved, cameras, images, features, target_center, dynibar):
    """rgb_features [P,V,3+C], ray_diff [P,V,4], mask [P,V]: view v read where moved [V,P,3]
    projects (IBRNet's Projector; DynIBaR's compute_with_motions, whose direction feature
    compares the target's direction from points [P,3] with the source's from the moved point
    and normalises with F.normalize)."""
    V, H, W = images.shape[:3]
    moved_h = torch.cat([moved, torch.ones_like(moved[..., :1])], -1)  # [V,P,4]
    Ks, poses = zip(*[intrinsics_and_pose(c) for c in cameras])
    Ks, poses = torch.stack(Ks), torch.stack(poses)
    projections = (Ks @ torch.inverse(poses) @ moved_h.transpose(1, 2)).permute(0, 2, 1)
    pixels = projections[..., :2] / torch.clamp(projections[..., 2:3], min=1e-8)
    pixels = torch.clamp(pixels, min=-1e6, max=1e6)
    in_front = projections[..., 2] > 0
    normalized = (2 * pixels / torch.tensor([W - 1.0, H - 1.0]) - 1.0)[:, None]  # [V,1,P,2]
    rgb = F.grid_sample(images.permute(0, 3, 1, 2), normalized, align_corners=True)
    feat = F.grid_sample(features.permute(0, 3, 1, 2), normalized, align_corners=True)
    rgb_features = torch.cat([rgb, feat], 1)[:, :, 0].permute(2, 0, 1)  # [P,V,3+C]
    inbound = (pixels[..., 0] >= 0) & (pixels[..., 0] <= W - 1) & (pixels[..., 1] >= 0) & (pixels[..., 1] <= H - 1)
    mask = (inbound & in_front).to(images.dtype).t()  # [P,V]

    def unit(x):
        if dynibar:
            return F.normalize(x, dim=-1)
        return x / (torch.norm(x, dim=-1, keepdim=True) + 1e-6)

    to_target = unit(target_center[None] - points)[None]  # [1,P,3]
    to_source = unit(poses[:, None, :3, 3] - moved)  # [V,P,3]
    difference = to_target - to_source
    if dynibar:
        direction = F.normalize(difference, dim=-1)
    else:
        direction = difference / torch.clamp(torch.norm(difference, dim=-1, keepdim=True),
                                             min=1e-6)
    ray_diff = torch.cat([direction, torch.sum(to_target * to_source, -1, keepdim=True)], -1)
    return rgb_features, ray_diff.permute(1, 0, 2), mask


def gather_samples(origins, directions, depths, cameras, images, features, target_center):
    """The samples at depths [R,S] along the rays, every view reading the same point."""
    V = images.shape[0]
    R, S = depths.shape
    xyz = (origins[:, None, :] + depths[..., None] * directions[:, None, :]).reshape(-1, 3)
    rgb_features, ray_diff, mask = gather_points(xyz, xyz[None].expand(V, -1, -1), cameras,
                                                 images, features, target_center, False)
    return (rgb_features.reshape(R, S, V, -1), ray_diff.reshape(R, S, V, 4),
            mask.reshape(R, S, V))


def gather(case, p):
    images = load(case, "images").requires_grad_()      # [V,H,W,3]
    features = load(case, "features").requires_grad_()  # [V,Hf,Wf,C]
    rgb_features, ray_diff, mask = gather_samples(
        load(case, "origins"), load(case, "directions"), load(case, "depths"),
        load(case, "cameras"), images, features, load(case, "target_center"))
    save(case, "rgb_features", rgb_features)
    save(case, "ray_diff", ray_diff)
    save(case, "mask", mask)
    grad_images, grad_features = torch.autograd.grad(
        rgb_features, [images, features], load(case, "grad_rgb_features"))
    save(case, "grad_images", grad_images)
    save(case, "grad_features", grad_features)


def gather_moved(case, p):
    """DynIBaR's gather of moving samples: points [R,S,3], moved_points [R,S,V,3]."""
    images = load(case, "images").requires_grad_()
    features = load(case, "features").requires_grad_()
    points, moved = load(case, "points"), load(case, "moved_points").requires_grad_()
    R, S, V = moved.shape[:3]
    rgb_features, ray_diff, mask = gather_points(
        points.reshape(-1, 3), moved.reshape(-1, V, 3).transpose(0, 1), load(case, "cameras"),
        images, features, load(case, "target_center"), True)
    save(case, "rgb_features", rgb_features.reshape(R, S, V, -1))
    save(case, "ray_diff", ray_diff.reshape(R, S, V, 4))
    save(case, "mask", mask.reshape(R, S, V))
    grad_images, grad_features, grad_moved = torch.autograd.grad(
        rgb_features, [images, features, moved],
        load(case, "grad_rgb_features").reshape(R * S, V, -1))
    save(case, "grad_images", grad_images)
    save(case, "grad_features", grad_features)
    save(case, "grad_moved_points", grad_moved)


def flows(case, p):
    """DynIBaR's compute_optical_flow: the weighted expected point of each ray at each of K
    source views' times, projected into that view (no depth clamp), minus the target pixel."""
    weights = load(case, "weights").requires_grad_()  # [R,S]
    points = load(case, "points").requires_grad_()    # [K,R,S,3]
    Ks, poses = zip(*[intrinsics_and_pose(c) for c in load(case, "cameras")])
    Ks, w2c = torch.stack(Ks), torch.inverse(torch.stack(poses))  # [K,4,4]
    expected = torch.sum(weights[None, ..., None] * points, dim=-2)[..., None]  # [K,R,3,1]
    in_camera = w2c[:, None, :3, :3] @ expected + w2c[:, None, :3, 3:4]
    pixels = Ks[:, None, :3, :3] @ in_camera
    pixels = pixels / pixels[:, :, -1:, :]
    rendered = pixels[..., :2, 0] - load(case, "pixels")[None]  # [K,R,2]
    save(case, "flows", rendered)
    grad_weights, grad_points = torch.autograd.grad(rendered, [weights, points],
                                                    load(case, "grad_flows"))
    save(case, "grad_weights", grad_weights)
    save(case, "grad_points", grad_points)


def composite_rays(sigma, rgb, z, directions, delta, white_bkgd):
    """rgb_map [R,3], depth_map [R], acc_map [R], weights [R,S] of sigma [R,S], rgb [R,S,3]."""
    if delta == "interval":
        dists = torch.cat([z[:, 1:] - z[:, :-1], torch.full_like(z[:, :1], 1e10)], -1)
        alpha = 1.0 - torch.exp(-sigma * dists * torch.norm(directions, dim=-1, keepdim=True))
    else:
        alpha = 1.0 - torch.exp(-sigma)
    T = torch.cumprod(1.0 - alpha + 1e-10, -1)[:, :-1]
    T = torch.cat([torch.ones_like(alpha[:, :1]), T], -1)  # T_0 = 1, also for a single sample
    weights = alpha * T
    rgb_map = torch.sum(weights[..., None] * rgb, 1)
    if white_bkgd:
        rgb_map = rgb_map + (1.0 - torch.sum(weights, -1, keepdim=True))
    return rgb_map, torch.sum(weights * z, -1), torch.sum(weights, -1), weights


def composite(case, p):
    sigma = load(case, "sigma").requires_grad_()
    rgb = load(case, "rgb").requires_grad_()
    rgb_map, depth_map, acc_map, weights = composite_rays(
        sigma, rgb, load(case, "depths"), load(case, "directions"), p["delta"], p["white_bkgd"])
    for name, value in [("rgb_map", rgb_map), ("depth_map", depth_map), ("acc_map", acc_map), ("weights", weights)]:
        save(case, name, value)
    grad_sigma, grad_rgb = torch.autograd.grad(
        [rgb_map, depth_map, acc_map, weights], [sigma, rgb],
        [load(case, "grad_rgb_map"), load(case, "grad_depth_map"), load(case, "grad_acc_map"),
         load(case, "grad_weights")])
    save(case, "grad_sigma", grad_sigma)
    save(case, "grad_rgb", grad_rgb)


def dynibar_alpha(sigma):
    """DynIBaR's per-component alpha: softplus density, unit intervals, 1e10 after the last."""
    dists = torch.cat([torch.ones_like(sigma[:, 1:]), torch.full_like(sigma[:, :1], 1e10)], -1)
    return 1.0 - torch.exp(-F.softplus(sigma) * dists)


def dynamic_composite(case, p):
    """DynIBaR's raw2outputs (mode both) and raw2outputs_vanilla (static or dynamic alone)."""
    names = ["sigma_static", "rgb_static", "sigma_dynamic", "rgb_dynamic"]
    inputs = {name: load(case, name).requires_grad_() for name in names}
    z = load(case, "depths")
    zero = torch.zeros_like(z)
    a_s = zero if p["mode"] == "dynamic" else dynibar_alpha(inputs["sigma_static"])
    a_d = zero if p["mode"] == "static" else dynibar_alpha(inputs["sigma_dynamic"])
    alpha = 1.0 - (1.0 - a_s) * (1.0 - a_d)
    T = torch.cumprod(1.0 - alpha + 1e-10, -1)[:, :-1]
    T = torch.cat([torch.ones_like(alpha[:, :1]), T], -1)
    w_s, w_d, w = a_s * T, a_d * T, alpha * T
    rgb_map = torch.sum(w_d[..., None] * inputs["rgb_dynamic"], 1) + torch.sum(
        w_s[..., None] * inputs["rgb_static"], 1)
    outputs = {"rgb_map": rgb_map, "depth_map": torch.sum(w * z, -1), "weights": w,
               "weights_static": w_s, "weights_dynamic": w_d}
    for name, value in outputs.items():
        save(case, name, value)
    grads = torch.autograd.grad(list(outputs.values()), [inputs[n] for n in names],
                                [load(case, "grad_" + n) for n in outputs], allow_unused=True)
    for name, grad in zip(names, grads):
        save(case, "grad_" + name, torch.zeros_like(inputs[name]) if grad is None else grad)


def rays_that_count(mask, min_views, min_samples):
    """[R] 1 for the rays of which at least min_samples samples are seen by at least min_views
    views (mask [R,S,V]), else 0."""
    samples = mask.sum(dim=2) > min_views - 1
    return (samples.to(mask.dtype).sum(dim=1) > min_samples - 1).to(mask.dtype)


def ray_mask(case, p):
    save(case, "ray_mask", rays_that_count(load(case, "sample_mask"), p["min_views"], p["min_samples"]))


def masked_mse_loss(predicted, target, mask):
    """IBRNet's img2mse: the mean squared error over the rays with mask 1."""
    return torch.sum((predicted - target) ** 2 * mask[:, None]) / (torch.sum(mask) * 3 + 1e-6)


def masked_mse(case, p):
    predicted = load(case, "predicted").requires_grad_()
    loss = masked_mse_loss(predicted, load(case, "target"), load(case, "ray_mask"))
    save(case, "loss", loss.reshape(1))
    (grad,) = torch.autograd.grad(loss, [predicted], torch.tensor(p["grad_loss"]))
    save(case, "grad_predicted", grad)


OPS = {f.__name__: f for f in [rays, coarse, importance, gather, gather_moved, composite,
                               dynamic_composite, flows, ray_mask, masked_mse]}


def case_folders(script):
    """The folders under the first argument that hold a case.json; none ends `script`."""
    root = pathlib.Path(sys.argv[1])
    cases = sorted(path.parent for path in root.glob("*/case.json"))
    if not cases:
        sys.exit(f"{script}: no case.json under {root}")
    return cases


def main():
    cases = case_folders("render_ops_reference.py")
    for case in cases:
        spec = json.loads((case / "case.json").read_text())
        OPS[spec["op"]](case, spec)
    print(f"render_ops_reference.py: {len(cases)} cases")


if __name__ == "__main__":
    main()
