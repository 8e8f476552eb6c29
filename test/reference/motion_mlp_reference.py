#!/usr/bin/env python3
"""PyTorch reference of DynIBaR's motion network: the oracle for mvibr's PeriodicEmbed and
MotionMlp (include/mvibr/nn/periodic_embed.h, motion_mlp.h).

Written here in float64 from the published module's semantics (google/dynibar,
ibrnet/mlp_network.py: PeriodicEmbed and MotionMLP), with autograd for every gradient:
the embedding cat([x, cos(f_1 x) .. cos(f_F x), sin(f_1 x) .. sin(f_F x)]) with the float32
frequencies torch.linspace(1, max_freq + 1, F) the published module computes; ReLU hidden layers,
cat([embedding, h]) after every skip layer; a linear head divided by sf_mag_div. Used by
test/nn/motion_mlp_test.cpp, which writes each case into a folder:

    case.json                {"basis", "depth", "width", "inputs", "frequencies", "skips",
                              "sf_mag_div", optional "frequency_checks": [[spacing, max_freq,
                              count], ...], spacing "linear" or "log"}
    xyzt.npy                 [n, inputs]
    grad_coefficients.npy    [n, 3 K]: the weights of the linear functional whose gradients
                             are wanted, L = sum(grad_coefficients * coefficients)
    param.<name>.npy         every parameter under its state_dict name (no prefix)

and this script writes ref_coefficients.npy, ref_grad_xyzt.npy, ref_grad_param.<name>.npy and
ref_frequencies.npy (the float32 frequencies, as float64) next to them, and for each frequency
check ref_frequencies_<spacing>_<max_freq>_<count>.npy.

    motion_mlp_reference.py CASES_DIR      (every sub-folder holding a case.json)
"""
import json
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def frequencies(count, max_freq, spacing="linear"):
    """The published spacings, computed as the published module does: in float32."""
    if spacing == "log":
        return (2 ** torch.linspace(0, count - 1, steps=count, dtype=torch.float32)).to(
            torch.get_default_dtype())
    return torch.linspace(1, max_freq + 1, steps=count, dtype=torch.float32).to(
        torch.get_default_dtype())


def embed(x, freqs):
    cosines = [torch.cos(f * x) for f in freqs]
    sines = [torch.sin(f * x) for f in freqs]
    return torch.cat([x] + cosines + sines, dim=-1)


def motion_mlp(p, spec, xyzt, freqs, relu=lambda z, layer: F.relu(z), linear=F.linear):
    """relu(z, layer): the ReLU after hidden layer `layer` (feature_net_reference's
    relu_on_our_side in the whole-step parity test); linear: every layer's product (F.linear, or
    feature_net_reference.linear_bf16)."""
    embedding = embed(xyzt, freqs)
    h = embedding
    for i in range(spec["depth"]):
        h = relu(linear(h, p[f"pts_linears.{i}.weight"], p[f"pts_linears.{i}.bias"]), i)
        if i in spec["skips"]:
            h = torch.cat([embedding, h], dim=-1)
    out = linear(h, p["coeff_linear.weight"], p["coeff_linear.bias"])
    return out / spec["sf_mag_div"]


def save(case, name, tensor):
    np.save(case / f"ref_{name}.npy", np.ascontiguousarray(tensor.detach().numpy(),
                                                          dtype=np.float64))


def run(case):
    spec = json.loads((case / "case.json").read_text())
    params = {}
    for path in sorted(case.glob("param.*.npy")):
        name = path.name[len("param."):-len(".npy")]
        params[name] = torch.tensor(np.load(path), requires_grad=True)
    xyzt = torch.tensor(np.load(case / "xyzt.npy"), requires_grad=True)
    weights = torch.tensor(np.load(case / "grad_coefficients.npy"))
    freqs = frequencies(spec["frequencies"], spec["frequencies"])
    out = motion_mlp(params, spec, xyzt, freqs)
    (out * weights).sum().backward()
    save(case, "coefficients", out)
    save(case, "grad_xyzt", xyzt.grad)
    save(case, "frequencies", freqs)
    for name, value in params.items():
        save(case, f"grad_param.{name}", value.grad)
    for spacing, max_freq, count in spec.get("frequency_checks", []):
        save(case, f"frequencies_{spacing}_{max_freq}_{count}",
             frequencies(count, max_freq, spacing))


def main():
    for spec in sorted(pathlib.Path(sys.argv[1]).glob("*/case.json")):
        run(spec.parent)


if __name__ == "__main__":
    main()
