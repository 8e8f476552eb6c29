#!/usr/bin/env python3
"""PyTorch reference of IBRNet's aggregation network: the oracle for mvibr's IbrnetAggregator.

Written from the network's description (Wang et al., CVPR 2021, and the layer list in
include/mvibr/nn/aggregator.h) in float64, with autograd for every gradient. Used by
test/nn/aggregator_test.cpp, which writes each case into a folder:

    case.json                  {"anti_alias_pooling": bool, "attention_mask": "queries"|"keys"}
    rgb_features.npy           [R,S,V,3+C]  colour, then features
    ray_diff.npy               [R,S,V,4]    direction difference, then the dot product
    mask.npy                   [R,S,V]      1 valid, 0 invalid
    grad_rgb.npy, grad_sigma.npy            the upstream gradient, [R,S,3] and [R,S]
    param.<name>.npy           every parameter under its state_dict name (no prefix)

and this script writes ref_rgb.npy, ref_sigma.npy, ref_grad_rgb_features.npy and
ref_grad_param.<name>.npy next to them.

    aggregator_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

WEIGHT_EPS = 1e-8  # guards the normalisation of pooling and visibility weights
MASKED = -1e9      # fill for masked attention scores and blending logits


def linear(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


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


def positional_encoding(n_samples, d=16):
    position = torch.arange(n_samples, dtype=torch.float64)[:, None]
    j = torch.arange(d)[None, :]
    angle = position / torch.pow(torch.tensor(10000.0), (2 * (j // 2)).double() / d)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle))


def ray_attention(p, x, valid, mask_keys, n_head=4, d_k=4):
    """x [R,L,16]; valid [R,L] bool. Multi-head self-attention over the samples of each ray."""
    rays, length, d_model = x.shape

    def heads(name):
        return linear(p, "ray_attention." + name, x).view(rays, length, n_head, d_k).transpose(1, 2)

    q, k, v = heads("w_qs"), heads("w_ks"), heads("w_vs")
    scores = torch.matmul(q / math.sqrt(d_k), k.transpose(2, 3))  # [R,H,Lq,Lk]
    keep = valid[:, None, None, :] if mask_keys else valid[:, None, :, None]
    scores = scores.masked_fill(~keep, MASKED)
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    out = out.transpose(1, 2).reshape(rays, length, n_head * d_k)
    out = linear(p, "ray_attention.fc", out) + x
    return F.layer_norm(out, (d_model,), p["ray_attention.layer_norm.weight"],
                        p["ray_attention.layer_norm.bias"], eps=1e-6)


def aggregate(p, rgb_features, ray_diff, mask, anti_alias_pooling, mask_keys):
    """rgb [R,S,3], sigma [R,S] from the gathered inputs."""
    n_samples, n_views = rgb_features.shape[1], rgb_features.shape[2]
    mask = mask[..., None]  # [R,S,V,1]
    colours = rgb_features[..., :3]
    features = rgb_features + mlp(p, "ray_dir_fc", ray_diff, 2)

    if anti_alias_pooling:
        sharp = torch.exp(torch.abs(p["s"]) * (ray_diff[..., 3:] - 1))
        pool = (sharp - torch.min(sharp, dim=2, keepdim=True)[0]) * mask
    else:
        pool = mask
    pool = pool / (torch.sum(pool, dim=2, keepdim=True) + WEIGHT_EPS)

    mean, var = weighted_mean_var(features, pool)
    pooled = torch.cat([mean, var], dim=-1).expand(-1, -1, n_views, -1)
    x = mlp(p, "base_fc", torch.cat([pooled, features], dim=-1), 2)

    x_vis = mlp(p, "vis_fc", x * pool, 2)
    residual, vis = x_vis[..., :-1], x_vis[..., -1:]
    vis = torch.sigmoid(vis) * mask
    x = x + residual
    vis = mlp(p, "vis_fc2", x * vis, 2, last=torch.sigmoid) * mask
    weight = vis / (torch.sum(vis, dim=2, keepdim=True) + WEIGHT_EPS)

    mean, var = weighted_mean_var(x, weight)
    tokens = torch.cat([mean.squeeze(2), var.squeeze(2), weight.mean(dim=2)], dim=-1)
    tokens = mlp(p, "geometry_fc", tokens, 2) + positional_encoding(n_samples)
    n_valid = torch.sum(mask, dim=2)  # [R,S,1]
    tokens = ray_attention(p, tokens, n_valid[..., 0] > 1, mask_keys)
    sigma = mlp(p, "out_geometry_fc", tokens, 2, last=F.relu)
    sigma = sigma.masked_fill(n_valid < 1, 0.0)

    logits = mlp(p, "rgb_fc", torch.cat([x, vis, ray_diff], dim=-1), 3, last=None)
    logits = logits.masked_fill(mask == 0, MASKED)
    blend = torch.softmax(logits, dim=2)
    rgb = torch.sum(colours * blend, dim=2)
    return rgb, sigma[..., 0]


def run_case(case):
    spec = json.loads((case / "case.json").read_text())

    def load(name):
        return torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)

    params = {f.name[len("param."):-len(".npy")]: load(f.name[:-len(".npy")]).requires_grad_()
              for f in sorted(case.glob("param.*.npy"))}
    rgb_features = load("rgb_features").requires_grad_()
    rgb, sigma = aggregate(params, rgb_features, load("ray_diff"), load("mask"),
                           spec["anti_alias_pooling"], spec["attention_mask"] == "keys")
    loss = torch.sum(rgb * load("grad_rgb")) + torch.sum(sigma * load("grad_sigma"))
    names = list(params)
    grads = torch.autograd.grad(loss, [rgb_features] + [params[n] for n in names])

    def save(name, tensor):
        np.save(case / f"ref_{name}.npy",
                np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float64))

    save("rgb", rgb)
    save("sigma", sigma)
    save("grad_rgb_features", grads[0])
    for name, grad in zip(names, grads[1:]):
        save(f"grad_param.{name}", grad)


def main():
    root = pathlib.Path(sys.argv[1])
    for case in sorted(p.parent for p in root.glob("*/case.json")):
        run_case(case)


if __name__ == "__main__":
    main()
