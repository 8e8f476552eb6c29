#!/usr/bin/env python3
"""PyTorch reference of DynIBaR's whole training step: the oracle for mvibr's DynibarModel.

A transcription of google/dynibar's train.py step (its feature nets on the three source sets)
and render_ray.py's render_rays_mono, composed from this folder's tensor-level references:
feature_net_reference.py (the shallow ResUNets), motion_mlp_reference.py (the motion MLP),
render_ops_reference.py (rays, the gather of moving samples, DynIBaR's alpha),
aggregator_reference.py (DynibarStatic, DynibarDynamic) and dynibar_losses_reference.py (every
term, the schedule's weights); autograd differentiates the composition in float64. Used by
test/train/dynibar_parity_test.cpp, which writes each case into a folder:

    case.json            frame, anchor_frame, num_frames, num_basis, N_samples, feature widths
                         and blocks, coarse_feat_dim, anti_alias_pooling, shift, the networks'
                         linear_operands (fp32 or bf16), the step and the schedule
                         (dynibar_losses_reference.weights_at reads them)
    checkpoint.h5        an mvibr checkpoint: every parameter as "model/<state_dict name>"
    dynamic_images.npy   [Vd+Va,H,W,3] in [0,1]: the dynamic sources (t + kFlowOffsets present),
                         then the anchor's (ascending frames)
    static_images.npy    [Vs,H,W,3] in [0,1], moving pixels blacked out
    dynamic_cameras.npy, anchor_cameras.npy, static_cameras.npy  [V,16]; target_camera.npy [16]
    dynamic_frames.npy, anchor_frames.npy   [V] their frames
    pixels.npy [R,2], depths.npy [R,S] (mvibr's Philox samples), target_rgb [R,3],
    target_disparity [R], target_flows [K,R,2], flow_validity [K,R] (the dynamic sources'
    offsets, in their order), motion_mask [R], static_mask [R]
    mask_dy_<conv>.npy, mask_st_<conv>.npy  the fp32 side's ReLU masks in each feature net
    mask_motion_ref_<i>.npy, mask_motion_anchor_<i>.npy  [R,S,W] and in the motion MLP's hidden
                         layer i at the target's and the anchor's time (many pre-activations lie
                         within fp32 rounding of 0 there)

and this script writes ref_terms.json (every weighted term, rgb, static_loss, total, and the
texel_edge_distance of the moving samples) and
ref_grad.<name>.npy for every parameter of the checkpoint (zeros for those the step leaves
unused: the feature nets' decoders, everything but the static branch in the bootstrap).

    dynibar_model_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import aggregator_reference as aggregator
import dynibar_losses_reference as losses
import feature_net_reference as feature_net
import motion_mlp_reference as motion
import render_ops_reference as render_ops

torch.set_default_dtype(torch.float64)

MOTION_SPEC = {"depth": 8, "skips": [4], "sf_mag_div": 1.0, "frequencies": 16}
UNSEEN_COLOUR_SUM = 1e-3  # DynibarStatic's mask_rgb


def load_case(case, dtype=torch.float64):
    """case.json, the parameters (requiring grad), the inputs and the ReLU masks, as dtype."""
    cfg = json.loads((case / "case.json").read_text())
    with h5py.File(case / "checkpoint.h5", "r") as checkpoint:
        params = {name: torch.from_numpy(np.asarray(value)).to(dtype).requires_grad_()
                  for name, value in checkpoint["model"].items()}
    x = {path.stem: torch.from_numpy(np.load(path)).to(dtype)
         for path in case.glob("*.npy") if not path.name.startswith(("ref_", "mask_"))}
    masks = {path.stem: torch.from_numpy(np.load(path)).to(dtype) for path in case.glob("mask_*.npy")}
    return cfg, params, x, masks


def network(params, prefix):
    return {name[len(prefix):]: value for name, value in params.items() if name.startswith(prefix)}


def feature_maps(cfg, params, masks, prefix, tag, images):
    """The coarse half [V,Hf,Wf,C] of a shallow ResUNet's output."""
    out = feature_net.resunet_forward(
        lambda name: params[prefix + name], images, cfg["widths"], cfg["blocks"],
        lambda y, name: feature_net.relu_on_our_side(masks[f"mask_{tag}_{name}"], y, name),
        shallow=True)
    return out[:, :cfg["coarse_feat_dim"]].permute(0, 2, 3, 1)


def compute_with_motions(points, moved, cameras, images, maps, target_center):
    """projector.compute_with_motions: view v reads moved[v] [V,R,S,3]; ray_diff detached."""
    V = moved.shape[0]
    R, S = points.shape[:2]
    rgb_features, ray_diff, mask = render_ops.gather_points(
        points.reshape(-1, 3), moved.reshape(V, -1, 3), cameras, images, maps, target_center,
        True)
    return (rgb_features.reshape(R, S, V, -1), ray_diff.detach().reshape(R, S, V, 4),
            mask.reshape(R, S, V))


def texel_edge_distance(moved, cameras, images, maps):
    """The smallest distance, in texels, of a moving sample's projection inside a source view to
    a texel edge of its image or feature map: grid_sample's gradient in the position jumps
    there, so fp32 and float64 positions within rounding of an edge take different slopes."""
    V, H, W = images.shape[:3]
    Hf, Wf = maps.shape[1:3]
    nearest = float("inf")
    for v in range(V):
        K, pose = render_ops.intrinsics_and_pose(cameras[v])
        points = moved[v].reshape(-1, 3).detach()
        projected = (K @ torch.inverse(pose) @ torch.cat(
            [points, torch.ones_like(points[:, :1])], -1).t()).t()
        uv = projected[:, :2] / projected[:, 2:3]
        inside = (projected[:, 2] > 0) & (uv[:, 0] >= 0) & (uv[:, 0] <= W - 1) & (
            uv[:, 1] >= 0) & (uv[:, 1] <= H - 1)
        for c in (uv, uv * torch.tensor([(Wf - 1) / (W - 1), (Hf - 1) / (H - 1)])):
            if inside.any():
                nearest = min(nearest, float((c[inside] - c[inside].round()).abs().min()))
    return nearest


def raw2outputs(sigma_dy, rgb_dy, sigma_st, rgb_st, z, mask_dy, mask_st):
    """render_ray.py's raw2outputs: the composite with its components."""
    a_d, a_s = render_ops.dynibar_alpha(sigma_dy), render_ops.dynibar_alpha(sigma_st)
    alpha = 1 - (1 - a_s) * (1 - a_d)
    T = torch.cumprod(1.0 - alpha + 1e-10, -1)[:, :-1]
    T = torch.cat([torch.ones_like(T[:, :1]), T], -1)
    w_dy, w_st = a_d * T, a_s * T
    rgb_map_dy = torch.sum(w_dy[..., None] * rgb_dy, 1)
    rgb_map_st = torch.sum(w_st[..., None] * rgb_st, 1)
    weights = alpha * T
    ray_mask = ((mask_dy.sum(1) > 8) | (mask_st.sum(1) > 8)).to(z.dtype)
    return {"rgb": rgb_map_dy + rgb_map_st, "rgb_static": rgb_map_st, "rgb_dy": rgb_map_dy,
            "depth": torch.sum(weights * z, -1), "weights_dy": w_dy, "weights_st": w_st,
            "weights": weights, "mask": ray_mask}


def raw2outputs_vanilla(sigma, rgb, z, mask):
    alpha = render_ops.dynibar_alpha(sigma)
    T = torch.cumprod(1.0 - alpha + 1e-10, -1)[:, :-1]
    T = torch.cat([torch.ones_like(T[:, :1]), T], -1)
    weights = alpha * T
    return {"rgb": torch.sum(weights[..., None] * rgb, 1), "weights": weights,
            "mask": (mask.sum(1) > 8).to(z.dtype)}


def optical_flow(weights, points, cameras, pixels):
    """compute_optical_flow: the expected point at each source time, projected, minus uv."""
    Ks, poses = zip(*[render_ops.intrinsics_and_pose(c) for c in cameras])
    Ks, w2c = torch.stack(Ks), torch.inverse(torch.stack(poses))
    expected = torch.sum(weights[None, ..., None] * points, dim=-2)[..., None]
    in_camera = w2c[:, None, :3, :3] @ expected + w2c[:, None, :3, 3:4]
    projected = Ks[:, None, :3, :3] @ in_camera
    projected = projected / projected[:, :, -1:, :]
    return projected[..., :2, 0] - pixels[None]


def plucker(origin, direction):
    d = F.normalize(direction, dim=-1)
    return torch.cat([d, torch.cross(origin.expand_as(d), d, dim=-1)], -1)


def train_step(cfg, params, x, masks):
    """The step's weighted loss terms (dynibar_losses_reference.terms) as tensors, and the
    moving samples' texel_edge_distance (inf in the bootstrap, whose positions get no
    gradient)."""
    w = losses.weights_at(cfg["step"], cfg["schedule"])
    main = w["phase"] != "bootstrap"
    # The networks' Linear layers on bf16 operands, as mvibr's with precision = bf16 on the CPU:
    # a motion MLP pre-activation may then sit a bf16 step from its ReLU's kink on our side.
    bf16 = cfg.get("linear_operands") == "bf16"
    aggregator.LINEAR = feature_net.linear_bf16 if bf16 else F.linear
    relu_rounding = 2.0**-8 if bf16 else 1e-4
    t, j, n_frames = cfg["frame"], cfg["anchor_frame"], cfg["num_frames"]
    # mvibr's times are float32, as the published motion MLP's input (a float() of t / frames).
    ref_time, anchor_time = (float(np.float32(f / float(n_frames))) for f in (t, j))
    target_center = render_ops.intrinsics_and_pose(x["target_camera"])[1][:3, 3]
    n_dynamic = x["dynamic_frames"].shape[0]

    static_maps = feature_maps(cfg, params, masks, "feature_net_st.", "st", x["static_images"])
    if main:
        dynamic_maps = feature_maps(cfg, params, masks, "feature_net.", "dy", x["dynamic_images"])
    else:  # the bootstrap reads only where the dynamic sources see the samples
        dynamic_maps = torch.zeros(x["dynamic_images"].shape[:3] + (0,))
    ref_maps, anchor_maps = dynamic_maps[:n_dynamic], dynamic_maps[n_dynamic:]
    ref_images = x["dynamic_images"][:n_dynamic]
    anchor_images = x["dynamic_images"][n_dynamic:]

    origins, directions = render_ops.ray_bundle(x["target_camera"], x["pixels"])
    z = x["depths"]
    R, S = z.shape
    pts_ref = origins[:, None] + z[..., None] * directions[:, None]
    input_ray_dir = F.normalize(directions, dim=-1)
    num_last = int(round(S * 0.1))
    basis = params["trajectory_basis"]
    K = cfg["num_basis"]
    freqs = motion.frequencies(MOTION_SPEC["frequencies"], MOTION_SPEC["frequencies"])
    p_motion = network(params, "motion_mlp.")

    def coefficients(points, time, tag):
        xyzt = torch.cat([points, torch.full_like(points[..., :1], time)], -1)
        c = motion.motion_mlp(p_motion, MOTION_SPEC, xyzt, freqs, lambda z, layer: (
            feature_net.relu_on_our_side(masks[f"mask_motion_{tag}_{layer}"], z,
                                         f"motion {tag} {layer}", relu_rounding)),
                              aggregator.LINEAR)
        keep = torch.ones(S, 1)
        if num_last > 0:
            keep[-num_last:] = 0
        return c * keep

    def traj(c, frame):
        b = basis[frame]
        return torch.stack([(c[..., a * K:(a + 1) * K] * b).sum(-1) for a in range(3)], -1)

    coeff_ref = coefficients(pts_ref, ref_time, "ref")
    offsets = [o for o in range(-3, 4) if 0 <= t + o < n_frames]
    ref_traj = {o: traj(coeff_ref, t + o) for o in offsets}
    dynamic_offsets = [int(f) - t for f in x["dynamic_frames"].tolist()]
    pts_seq_ref = torch.stack([pts_ref + ref_traj[o] - ref_traj[0] for o in dynamic_offsets])

    # The static branch.
    Vs = x["static_images"].shape[0]
    rgb_feat_st, ray_diff_st, mask_st = compute_with_motions(
        pts_ref, pts_ref[None].expand(Vs, -1, -1, -1), x["static_cameras"], x["static_images"],
        static_maps, target_center)
    src_centers = torch.stack([render_ops.intrinsics_and_pose(c)[1][:3, 3]
                               for c in x["static_cameras"]])
    src_rays = plucker(src_centers[:, None, None], pts_ref[None] - src_centers[:, None, None])
    network_mask = mask_st * (rgb_feat_st[..., :3].sum(-1) > UNSEEN_COLOUR_SUM).to(z.dtype)
    spec_st = {"anti_alias_pooling": cfg["anti_alias_pooling"], "attention_mask": "queries"}
    rgb_st, sigma_st = aggregator.dynibar_static(
        network(params, "net_coarse_st."), spec_st, rgb_feat_st, ray_diff_st, network_mask,
        pts_ref, src_rays.permute(1, 2, 0, 3), plucker(origins, directions))
    pixel_mask_st = mask_st.sum(2) > 1

    # The dynamic branch at the target's time (only its projections in the bootstrap).
    rgb_feat_ref, _, mask_ref = compute_with_motions(pts_ref, pts_seq_ref, x["dynamic_cameras"],
                                                     ref_images, ref_maps, target_center)
    pixel_mask_ref = mask_ref.sum(2) > 1
    outputs_st = raw2outputs_vanilla(sigma_st, rgb_st, z, pixel_mask_st)
    ref_mask = ((pixel_mask_ref.sum(1) > 8) | (pixel_mask_st.sum(1) > 8)).to(z.dtype)
    inputs = {"target_rgb": x["target_rgb"], "static_mask": x["static_mask"],
              "ray_mask": ref_mask, "static_only_rgb": outputs_st["rgb"]}
    if not main:
        return losses.terms(inputs, w), float("inf")

    spec_dy = {"shift": cfg["shift"], "attention_mask": "queries"}
    p_dy = network(params, "net_coarse_dy.")
    rgb_dy, sigma_dy = aggregator.dynibar_dynamic(
        p_dy, spec_dy, rgb_feat_ref, mask_ref, pts_ref, torch.full((R,), ref_time), input_ray_dir)
    out_ref = raw2outputs(sigma_dy, rgb_dy, sigma_st, rgb_st, z, pixel_mask_ref, pixel_mask_st)
    out_ref_dy = raw2outputs_vanilla(sigma_dy, rgb_dy, z, pixel_mask_ref)
    render_flows = optical_flow(out_ref["weights"], pts_seq_ref, x["dynamic_cameras"],
                                x["pixels"])

    # Cross time.
    sf_seq = torch.stack([ref_traj[o] - ref_traj[o - 1] for o in offsets[1:]])
    pts_anchor = pts_ref + ref_traj[j - t] - ref_traj[0]
    coeff_anchor = coefficients(pts_anchor, anchor_time, "anchor")
    anchor_traj_0 = traj(coeff_anchor, j)
    pts_seq_anchor, pts_traj_ref, pts_traj_anchor = [], [], []
    for f in x["anchor_frames"].tolist():
        moved = pts_anchor + traj(coeff_anchor, int(f)) - anchor_traj_0
        pts_seq_anchor.append(moved)
        if int(f) - t in ref_traj:
            pts_traj_anchor.append(moved)
            pts_traj_ref.append(pts_ref + ref_traj[int(f) - t] - ref_traj[0])
    rgb_feat_an, _, mask_an = compute_with_motions(pts_ref, torch.stack(pts_seq_anchor),
                                                   x["anchor_cameras"], anchor_images,
                                                   anchor_maps, target_center)
    pixel_mask_an = mask_an.sum(2) > 0
    rgb_an, sigma_an = aggregator.dynibar_dynamic(
        p_dy, spec_dy, rgb_feat_an, mask_an, pts_anchor, torch.full((R,), anchor_time),
        input_ray_dir)
    out_an = raw2outputs(sigma_an, rgb_an, sigma_st, rgb_st, z, pixel_mask_an, pixel_mask_st)
    out_an_dy = raw2outputs_vanilla(sigma_an, rgb_an, z, pixel_mask_an)
    score_dy = (out_ref_dy["weights"] - out_an_dy["weights"]).detach()
    if abs(t - j) > 1:
        score = (out_ref["weights_dy"] - out_an["weights_dy"]).detach()
    else:
        score = (out_ref["weights"] - out_an["weights"]).detach()

    edges = min(texel_edge_distance(pts_seq_ref, x["dynamic_cameras"], ref_images, ref_maps),
                texel_edge_distance(torch.stack(pts_seq_anchor), x["anchor_cameras"],
                                    anchor_images, anchor_maps))
    inputs.update({
        "target_disparity": x["target_disparity"], "target_flows": x["target_flows"],
        "flow_validity": x["flow_validity"], "motion_mask": x["motion_mask"],
        "dynamic_only_ray_mask": out_ref_dy["mask"], "cross_time_ray_mask": out_an["mask"],
        "cross_time_dynamic_only_ray_mask": out_an_dy["mask"],
        "cross_time_occlusion_map": 1 - torch.abs(score.sum(1)),
        "cross_time_dynamic_only_occlusion_map": 1 - torch.abs(score_dy.sum(1)),
        "occlusion_weights": 1 - torch.abs(score),
        "s_vals": (1 / z - 1 / cfg["near"]) / (1 / cfg["far"] - 1 / cfg["near"]),
        "rgb": out_ref["rgb"], "rgb_static": out_ref["rgb_static"],
        "rgb_dynamic": out_ref["rgb_dy"], "depth": out_ref["depth"],
        "weights": out_ref["weights"], "weights_static": out_ref["weights_st"],
        "weights_dynamic": out_ref["weights_dy"], "render_flows": render_flows,
        "dynamic_only_rgb": out_ref_dy["rgb"], "cross_time_rgb": out_an["rgb"],
        "points_ref": torch.stack(pts_traj_ref), "points_anchor": torch.stack(pts_traj_anchor),
        "scene_flow": sf_seq, "cross_time_dynamic_only_rgb": out_an_dy["rgb"]})
    return losses.terms(inputs, w), edges


def run_case(case):
    cfg, params, x, masks = load_case(case)
    t, edges = train_step(cfg, params, x, masks)
    rgb, static, loss = losses.total(t)
    values = {k: float(v) for k, v in t.items()}
    values.update(rgb=float(rgb), static_loss=float(static), total=float(loss),
                  texel_edge_distance=min(edges, 1e9))
    (case / "ref_terms.json").write_text(json.dumps(values))
    names = sorted(params)
    grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    for name, grad in zip(names, grads):
        grad = torch.zeros_like(params[name]) if grad is None else grad
        np.save(case / f"ref_grad.{name}.npy", np.ascontiguousarray(grad.detach().numpy()))


def main():
    for case in render_ops.case_folders("dynibar_model_reference.py"):
        run_case(case)


if __name__ == "__main__":
    main()
