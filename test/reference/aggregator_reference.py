#!/usr/bin/env python3
"""PyTorch reference of the IBR aggregation networks: the oracle for mvibr's aggregators.

Written from the networks' descriptions in float64, with autograd for every gradient:
IBRNet's (Wang et al., CVPR 2021, and the layer list in include/mvibr/nn/aggregator.h) and
DynIBaR's static and dynamic networks (Li et al., CVPR 2023; DynibarStatic and DynibarDynamic
in google/dynibar's ibrnet/mlp_network.py). Used by test/nn/aggregator_test.cpp, which writes
each case into a folder:

    case.json          {"network": "ibrnet" (default) | "dynibar_static" | "dynibar_dynamic",
                        "anti_alias_pooling": bool (dynibar_dynamic ignores it),
                        "attention_mask": "queries" | "keys", "shift": float (dynibar_dynamic)}
    rgb_features.npy   [R,S,V,3+C]  colour, then features
    ray_diff.npy       [R,S,V,4]    direction difference, then the dot product (not dynamic)
    mask.npy           [R,S,V]      1 valid, 0 invalid; for dynibar_static already multiplied by
                                    the published mask_rgb test (colour sum > 1e-3), if wanted
    xyz.npy            [R,S,3]      sample points (dynibar networks)
    src_rays.npy       [R,S,V,6]    Plücker coordinates (direction, moment) of each source ray
    target_rays.npy    [R,6]        and of the target ray (dynibar_static; inputs, no gradient)
    time.npy           [R]          the ray's time embedding, frame / frames (dynibar_dynamic)
    view_dir.npy       [R,3]        the normalised target ray direction (dynibar_dynamic)
    grad_rgb.npy, grad_sigma.npy    the upstream gradient, [R,S,3] and [R,S]
    param.<name>.npy   every parameter under its state_dict name (no prefix)

and this script writes ref_rgb.npy, ref_sigma.npy (IBRNet: relu'd density, 0 where no view is
valid; DynIBaR: raw density before softplus, -1e9 there), ref_grad_rgb_features.npy,
ref_grad_xyz.npy (dynibar networks) and ref_grad_param.<name>.npy next to them.

    aggregator_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

WEIGHT_EPS = 1e-8  # guards the normalisation of pooling and visibility weights
MASKED = -1e9      # fill for masked attention scores, blending logits and DynIBaR's density


# Every Linear layer's product: F.linear, or feature_net_reference.linear_bf16 where a case's
# networks multiply bf16 operands (dynibar_model_reference.py sets it).
LINEAR = F.linear


def linear(p, name, x):
    return LINEAR(x, p[name + ".weight"], p.get(name + ".bias"))


def mlp(p, name, x, n_layers, last=F.elu):
    """Linear layers at indices 0, 2, 4, ... of an nn.Sequential, ELU between, `last` after."""
    for i in range(n_layers):
        x = linear(p, f"{name}.{2 * i}", x)
        if i + 1 < n_layers:
            x = F.elu(x)
        elif last is not None:
            x = last(x)
    return x


def weighted_mean_var(x, weight):
    """Over views (dim 2): mean = sum w x, var = sum w (x - mean)^2, mean not detached."""
    mean = torch.sum(x * weight, dim=2, keepdim=True)
    var = torch.sum(weight * (x - mean) ** 2, dim=2, keepdim=True)
    return mean, var


def positional_encoding(n_samples, d):
    position = torch.arange(n_samples, dtype=torch.get_default_dtype())[:, None]
    j = torch.arange(d)[None, :]
    angle = position / torch.pow(torch.tensor(10000.0), (2 * (j // 2)).to(position.dtype) / d)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle))


def periodic_embed(x, n_freqs):
    """[x, cos(f x) for every f, sin(f x) for every f], f = 2^0 .. 2^(n-1) (float32, exact)."""
    freqs = (2 ** torch.linspace(0, n_freqs - 1, n_freqs, dtype=torch.float32)).to(x.dtype)
    fx = x[..., None, :] * freqs[:, None]  # [..., n, D]
    return torch.cat([x, torch.cos(fx).flatten(-2), torch.sin(fx).flatten(-2)], dim=-1)


def ray_attention(p, x, valid, mask_keys, n_head=4):
    """x [R,L,d]; valid [R,L] bool. Multi-head self-attention over the samples of each ray."""
    rays, length, d_model = x.shape
    d_k = d_model // n_head

    def heads(name):
        return linear(p, "ray_attention." + name, x).view(rays, length, n_head, d_k).transpose(1, 2)

    q, k, v = heads("w_qs"), heads("w_ks"), heads("w_vs")
    scores = torch.matmul(q / d_k ** 0.5, k.transpose(2, 3))  # [R,H,Lq,Lk]
    keep = valid[:, None, None, :] if mask_keys else valid[:, None, :, None]
    scores = scores.masked_fill(~keep, MASKED)
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    out = out.transpose(1, 2).reshape(rays, length, d_model)
    out = linear(p, "ray_attention.fc", out) + x
    return F.layer_norm(out, (d_model,), p["ray_attention.layer_norm.weight"],
                        p["ray_attention.layer_norm.bias"], eps=1e-6)


def pooling_weights(p, ray_diff, mask, anti_alias_pooling):
    if anti_alias_pooling:
        sharp = torch.exp(torch.abs(p["s"]) * (ray_diff[..., 3:] - 1))
        pool = (sharp - torch.min(sharp, dim=2, keepdim=True)[0]) * mask
    else:
        pool = mask
    return pool / (torch.sum(pool, dim=2, keepdim=True) + WEIGHT_EPS)


def trunk(p, features, pool, mask):
    """The layers all three share: per-view x [R,S,V,W], visibility [R,S,V,1], tokens [R,S,W']."""
    mean, var = weighted_mean_var(features, pool)
    pooled = torch.cat([mean, var], dim=-1).expand(-1, -1, features.shape[2], -1)
    x = mlp(p, "base_fc", torch.cat([pooled, features], dim=-1), 2)

    x_vis = mlp(p, "vis_fc", x * pool, 2)
    residual, vis = x_vis[..., :-1], x_vis[..., -1:]
    vis = torch.sigmoid(vis) * mask
    x = x + residual
    vis = mlp(p, "vis_fc2", x * vis, 2, last=torch.sigmoid) * mask
    weight = vis / (torch.sum(vis, dim=2, keepdim=True) + WEIGHT_EPS)

    mean, var = weighted_mean_var(x, weight)
    tokens = torch.cat([mean.squeeze(2), var.squeeze(2), weight.mean(dim=2)], dim=-1)
    return x, vis, mlp(p, "geometry_fc", tokens, 2)


def blend(p, colours, inputs, mask):
    """Colours blended over views by softmax(rgb_fc(inputs)), invalid views excluded."""
    logits = mlp(p, "rgb_fc", inputs, 3, last=None).masked_fill(mask == 0, MASKED)
    return torch.sum(colours * torch.softmax(logits, dim=2), dim=2)


def ibrnet(p, spec, rgb_features, ray_diff, mask):
    """rgb [R,S,3], sigma [R,S] from the gathered inputs."""
    mask = mask[..., None]  # [R,S,V,1]
    features = rgb_features + mlp(p, "ray_dir_fc", ray_diff, 2)
    pool = pooling_weights(p, ray_diff, mask, spec["anti_alias_pooling"])
    x, vis, tokens = trunk(p, features, pool, mask)
    tokens = tokens + positional_encoding(tokens.shape[1], tokens.shape[2])
    n_valid = torch.sum(mask, dim=2)  # [R,S,1]
    tokens = ray_attention(p, tokens, n_valid[..., 0] > 1, spec["attention_mask"] == "keys")
    sigma = mlp(p, "out_geometry_fc", tokens, 2, last=F.relu).masked_fill(n_valid < 1, 0.0)
    rgb = blend(p, rgb_features[..., :3], torch.cat([x, vis, ray_diff], dim=-1), mask)
    return rgb, sigma[..., 0]


def dynibar_static(p, spec, rgb_features, ray_diff, mask, xyz, src_rays, target_rays):
    """DynIBaR's time-invariant network: view features modulated by Plücker ray embeddings."""
    mask = mask[..., None]
    n_views = rgb_features.shape[2]
    pts_pe = periodic_embed(xyz, 5)[:, :, None, :].expand(-1, -1, n_views, -1)
    src_feat = mlp(p, "ray_dir_fc", torch.cat([pts_pe, periodic_embed(src_rays, 5), ray_diff],
                                              dim=-1), 2, last=None)
    ref_feat = mlp(p, "ref_feature_fc", periodic_embed(target_rays, 5), 1, last=None)
    features = torch.cat([rgb_features, src_feat * ref_feat[:, None, None, :]], dim=-1)
    pool = pooling_weights(p, ray_diff, mask, spec["anti_alias_pooling"])
    x, vis, tokens = trunk(p, features, pool, mask)
    n_valid = torch.sum(mask, dim=2)
    tokens = ray_attention(p, tokens, n_valid[..., 0] > 1, spec["attention_mask"] == "keys")
    sigma = mlp(p, "out_geometry_fc", tokens, 2, last=None).masked_fill(n_valid < 1, MASKED)
    token_per_view = tokens[:, :, None, :].expand(-1, -1, n_views, -1)
    rgb = blend(p, rgb_features[..., :3], torch.cat([token_per_view, x, vis, ray_diff], dim=-1),
                mask)
    return rgb, sigma[..., 0]


def dynibar_dynamic(p, spec, rgb_features, mask, xyz, time, view_dir):
    """DynIBaR's time-varying network: colour regressed from the token, not blended."""
    mask = mask[..., None]
    time_feat = mlp(p, "ray_dir_fc", periodic_embed(time[:, None], 10), 2)  # [R,C+3]
    features = rgb_features + time_feat[:, None, None, :]
    pool = mask / (torch.sum(mask, dim=2, keepdim=True) + WEIGHT_EPS)
    _, _, tokens = trunk(p, features, pool, mask)
    tokens = tokens + positional_encoding(tokens.shape[1], tokens.shape[2])
    n_valid = torch.sum(mask, dim=2)
    tokens = ray_attention(p, tokens, n_valid[..., 0] > 1, spec["attention_mask"] == "keys")
    h = mlp(p, "ref_pts_fc", torch.cat([tokens, periodic_embed(xyz, 5)], dim=-1), 2)
    sigma = mlp(p, "out_geometry_fc", h, 2, last=None) - spec["shift"]
    sigma = sigma.masked_fill(n_valid < 1, MASKED)
    dir_pe = periodic_embed(view_dir, 4)[:, None, :].expand(-1, h.shape[1], -1)
    rgb = mlp(p, "rgb_fc", torch.cat([h, dir_pe], dim=-1), 3, last=torch.sigmoid)
    return rgb.masked_fill(n_valid < 1, 0.0), sigma[..., 0]


NETWORKS = {  # each network and the inputs it reads besides rgb_features
    "ibrnet": (ibrnet, ("ray_diff", "mask")),
    "dynibar_static": (dynibar_static, ("ray_diff", "mask", "xyz", "src_rays", "target_rays")),
    "dynibar_dynamic": (dynibar_dynamic, ("mask", "xyz", "time", "view_dir")),
}


def run_case(case):
    spec = json.loads((case / "case.json").read_text())
    network, input_names = NETWORKS[spec.get("network", "ibrnet")]

    def load(name):
        return torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)

    params = {f.name[len("param."):-len(".npy")]: load(f.name[:-len(".npy")]).requires_grad_()
              for f in sorted(case.glob("param.*.npy"))}
    inputs = {name: load(name) for name in ("rgb_features",) + input_names}
    differentiable = [name for name in ("rgb_features", "xyz") if name in inputs]
    for name in differentiable:
        inputs[name].requires_grad_()
    rgb, sigma = network(params, spec, **inputs)
    loss = torch.sum(rgb * load("grad_rgb")) + torch.sum(sigma * load("grad_sigma"))
    names = list(params)
    grads = torch.autograd.grad(loss, [inputs[n] for n in differentiable] +
                                [params[n] for n in names])

    def save(name, tensor):
        np.save(case / f"ref_{name}.npy",
                np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float64))

    save("rgb", rgb)
    save("sigma", sigma)
    for name, grad in zip(differentiable, grads):
        save(f"grad_{name}", grad)
    for name, grad in zip(names, grads[len(differentiable):]):
        save(f"grad_param.{name}", grad)


def main():
    root = pathlib.Path(sys.argv[1])
    for case in sorted(p.parent for p in root.glob("*/case.json")):
        run_case(case)


if __name__ == "__main__":
    main()
