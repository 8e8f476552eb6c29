#!/usr/bin/env python3
"""PyTorch reference of the feature network: the oracle for its layers and the whole ResUNet.

Written from the description of IBRNet's ResUNet (ibrnet/feature_network.py): float64, with
autograd for every gradient. Used by test/nn/feature_net_test.cpp, which writes each case as .npy
inputs plus case.json into a folder; this script writes the reference outputs next to them as
ref_<name>.npy. A ResUNet case holds its parameters as params/<name>.npy under their PyTorch
names; the script builds the network from the options and fails unless it uses exactly those.
It also holds the fp32 side's ReLU masks (mask_<conv>.npy), which the reference follows: see
relu_on_our_side.

    feature_net_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

EPS = 1e-5


def load(case, name, grad=False):
    tensor = torch.from_numpy(np.load(case / f"{name}.npy")).to(torch.float64)
    return tensor.requires_grad_(grad)


def save(case, name, tensor):
    values = np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float64)
    np.save(case / f"ref_{name}.npy", values)


def backward_and_save(case, name, output, **inputs):
    """Saves `output` as `name` and, backpropagating the case's grad_<name> into it, the gradient
    of each of `inputs` (those not None) as grad_<input>."""
    (output * load(case, "grad_" + name)).sum().backward()
    save(case, name, output)
    for input_name, tensor in inputs.items():
        if tensor is not None:
            save(case, "grad_" + input_name, tensor.grad)


def instance_norm(x, gamma, beta):
    """InstanceNorm2d(affine, track_running_stats=False): biased variance per (view, channel)."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
    normalised = (x - mean) / torch.sqrt(var + EPS)
    return normalised * gamma[None, :, None, None] + beta[None, :, None, None]


def activate(x, activation):
    if activation == "relu":
        return F.relu(x)
    if activation == "elu":
        return F.elu(x)
    return x


def upsample(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)


# --- single layers ---------------------------------------------------------------------------

def conv(case, p):
    x, weight = load(case, "x", True), load(case, "weight", True)
    bias = load(case, "bias", True) if p["bias"] else None
    pad = p.get("pad", 0)
    source = upsample(x) if p.get("upsample") else x
    padded = F.pad(source, (pad, pad, pad, pad), mode="reflect") if pad else source
    y = (conv2d_bf16 if p.get("operands") == "bf16" else F.conv2d)(padded, weight, bias, p["stride"])
    backward_and_save(case, "y", y, x=x, weight=weight, bias=bias)


def reflect_pad(case, p):
    x = load(case, "x", True)  # [planes, H, W]
    pad = p["pad"]
    y = F.pad(x[None], (pad, pad, pad, pad), mode="reflect")[0]
    backward_and_save(case, "y", y, x=x)


def norm(case, p):
    x, gamma, beta = load(case, "x", True), load(case, "gamma", True), load(case, "beta", True)
    z = instance_norm(x, gamma, beta)
    residual = None
    if p["residual"]:
        residual = load(case, "residual", True)
        z = z + residual
    out = activate(z, p["activation"])
    backward_and_save(case, "out", out, x=x, gamma=gamma, beta=beta, residual=residual)


def upsample_case(case, p):
    x = load(case, "x", True)  # [planes, H, W]
    y = upsample(x[None])[0]
    backward_and_save(case, "y", y, x=x)


# --- the whole network -----------------------------------------------------------------------

class Parameters:
    """The case's params/*.npy by name, recording which the network asked for."""

    def __init__(self, case, prefix):
        self.folder, self.prefix, self.tensors = case / "params", prefix, {}

    def __call__(self, name):
        full = self.prefix + name
        if full not in self.tensors:
            self.tensors[full] = load(self.folder, full, True)
        return self.tensors[full]

    def given(self):
        return {path.name[:-len(".npy")] for path in self.folder.glob("*.npy")}

    def check_all_used(self):
        given = self.given()
        if given != set(self.tensors):
            raise RuntimeError(f"parameters given but unused: {sorted(given - set(self.tensors))}; "
                               f"used but not given: {sorted(set(self.tensors) - given)}")


def bf16(x):
    """x rounded to bfloat16 (to nearest even, through float32, as the fp32 side rounds)."""
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


class Bf16Conv2d(torch.autograd.Function):
    """A convolution on bf16 operands (nn/conv_layers.h: Operands::kBf16): the input and
    weights rounded for the output, the output gradient and weights for the input's gradient, the
    input and output gradient for the weights'; the products summed exactly. The bias is added
    unrounded, and its gradient sums the unrounded output gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride):
        ctx.save_for_backward(x, weight)
        ctx.stride = stride
        ctx.has_bias = bias is not None
        return F.conv2d(bf16(x), bf16(weight), bias, stride=stride)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        g = bf16(grad_y)
        grad_x = torch.nn.grad.conv2d_input(x.shape, bf16(weight), g, stride=ctx.stride)
        grad_weight = torch.nn.grad.conv2d_weight(bf16(x), weight.shape, g, stride=ctx.stride)
        grad_bias = grad_y.sum(dim=(0, 2, 3)) if ctx.has_bias else None
        return grad_x, grad_weight, grad_bias, None


class Bf16Linear(torch.autograd.Function):
    """A Linear layer on bf16 operands (nn/layers.h: Operands::kBf16), rounded as Bf16Conv2d's:
    x and the weight for the output, the output gradient and the weight for x's gradient, x and
    the output gradient for the weight's; the bias added unrounded, its gradient the sum of the
    unrounded output gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(bf16(x), bf16(weight), bias)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        g = bf16(grad_y)
        grad_x = g @ bf16(weight)
        rows = g.reshape(-1, g.shape[-1])
        grad_weight = rows.T @ bf16(x).reshape(-1, x.shape[-1])
        grad_bias = grad_y.reshape(-1, grad_y.shape[-1]).sum(0) if ctx.has_bias else None
        return grad_x, grad_weight, grad_bias


def linear_bf16(x, weight, bias=None):
    """F.linear on bf16 operands."""
    return Bf16Linear.apply(x, weight, bias)


def conv2d_bf16(x, weight, bias=None, stride=1):
    """F.conv2d with bf16 operands above 1x1; a 1x1 convolution stays as it is."""
    if weight.shape[-1] == 1:
        return F.conv2d(x, weight, bias, stride=stride)
    return Bf16Conv2d.apply(x, weight, bias, stride)


def relu_on_our_side(mask, z, name, rounding=1e-4):
    """ReLU with the mask the fp32 side took (mask_<conv>.npy: 1 where its output is positive).

    Both sides then differentiate the same branch. Where our mask disagrees with float64's sign,
    the pre-activation must be within `rounding` (of the largest) of the kink, or ours is simply
    wrong: fp32's, or with bf16 operands a bf16 step (2^-8), since a value within fp32 rounding
    of a bf16 tie rounds one way on each side.
    """
    disagree = (z > 0).to(z.dtype) != mask
    if disagree.any():
        worst = z.detach().abs()[disagree].max().item()
        if worst > rounding * z.detach().abs().max().item():
            raise RuntimeError(f"{name}: our ReLU mask differs where the pre-activation is {worst}")
    return z * mask


def resunet_forward(param, images, widths, blocks, relu, norm=instance_norm, shallow=False,
                    conv=F.conv2d):
    """The ResUNet's output [V, coarse + fine channels, Hf, Wf] of images [V, H, W, 3] in [0, 1].

    param(name) gives a parameter by its name without prefix; relu(y, conv_name) is the ReLU
    after that convolution's norm (relu_on_our_side for the parity tests, F.relu elsewhere);
    norm(x, gamma, beta) is InstanceNorm2d(affine) (F.instance_norm computes the same).
    shallow: DynIBaR's forward, conv1 -> layer1 -> out_conv. conv: F.conv2d, or conv2d_bf16.
    """

    def unit(x, conv_name, norm_name, stride, activation, bias=False, residual=None):
        weight = param(conv_name + ".weight")
        pad = (weight.shape[-1] - 1) // 2
        if pad > 0:
            x = F.pad(x, (pad, pad, pad, pad), mode="reflect")
        y = conv(x, weight, param(conv_name + ".bias") if bias else None, stride=stride)
        y = norm(y, param(norm_name + ".weight"), param(norm_name + ".bias"))
        if residual is not None:
            y = y + residual
        if activation == "relu":
            return relu(y, conv_name)
        return activate(y, activation)

    def skipconnect(encoder, decoded):
        """cat([decoded, encoder zero-padded to its size (diff // 2 before, the rest after)])."""
        dy = decoded.shape[2] - encoder.shape[2]
        dx = decoded.shape[3] - encoder.shape[3]
        encoder = F.pad(encoder, (dx // 2, dx - dx // 2, dy // 2, dy - dy // 2))
        return torch.cat([decoded, encoder], dim=1)

    x = images.permute(0, 3, 1, 2)  # [V, H, W, 3] -> [V, 3, H, W]
    x = unit(x, "conv1", "bn1", 2, "relu")
    in_channels, encoded = widths[0], []
    for stage in range(1 if shallow else 3):
        for b in range(blocks[stage]):
            name, stride = f"layer{stage + 1}.{b}.", 2 if b == 0 else 1
            identity = x
            if stride != 1 or in_channels != widths[stage]:
                identity = unit(x, name + "downsample.0", name + "downsample.1", stride, "none")
            inner = unit(x, name + "conv1", name + "bn1", stride, "relu")
            x = unit(inner, name + "conv2", name + "bn2", 1, "relu", residual=identity)
            in_channels = widths[stage]
        encoded.append(x)

    if shallow:
        return F.conv2d(x, param("out_conv.weight"), param("out_conv.bias"))
    x = unit(upsample(encoded[2]), "upconv3.conv.conv", "upconv3.conv.bn", 1, "elu", bias=True)
    x = unit(skipconnect(encoded[1], x), "iconv3.conv", "iconv3.bn", 1, "elu", bias=True)
    x = unit(upsample(x), "upconv2.conv.conv", "upconv2.conv.bn", 1, "elu", bias=True)
    x = unit(skipconnect(encoded[0], x), "iconv2.conv", "iconv2.bn", 1, "elu", bias=True)
    return F.conv2d(x, param("out_conv.weight"), param("out_conv.bias"))


def split_maps(out, coarse_channels, fine_channels, coarse_only):
    """The coarse and fine maps [V, Hf, Wf, C] (fine None when coarse_only) of the output."""
    coarse = out[:, :coarse_channels].permute(0, 2, 3, 1)
    fine = None if coarse_only else out[:, -fine_channels:].permute(0, 2, 3, 1)
    return coarse, fine


def resunet(case, p):
    param = Parameters(case, p["prefix"])
    shallow = p.get("shallow", False)
    out = resunet_forward(param, load(case, "images"), p["widths"], p["blocks"],
                          lambda y, name: relu_on_our_side(load(case, "mask_" + name), y, name),
                          shallow=shallow)
    if not shallow:
        param.check_all_used()

    coarse, fine = split_maps(out, p["coarse_out_ch"], p["fine_out_ch"], p["coarse_only"])
    loss = (coarse * load(case, "grad_coarse")).sum()
    save(case, "coarse", coarse)
    if fine is not None:
        loss = loss + (fine * load(case, "grad_fine")).sum()
        save(case, "fine", fine)
    loss.backward()
    for name, tensor in param.tensors.items():
        save(case, "grad_" + name, tensor.grad)
    for name in param.given() - set(param.tensors):  # a shallow forward's unused parameters
        save(case, "grad_" + name, torch.zeros_like(load(param.folder, name)))


OPS = {"conv": conv, "reflect_pad": reflect_pad, "instance_norm": norm, "upsample": upsample_case,
       "resunet": resunet}


def main():
    root = pathlib.Path(sys.argv[1])
    for spec in sorted(root.glob("*/case.json")):
        p = json.loads(spec.read_text())
        OPS[p["op"]](spec.parent, p)


if __name__ == "__main__":
    main()
