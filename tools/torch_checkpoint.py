#!/usr/bin/python3
"""The published PyTorch checkpoints of IBRNet and DynIBaR and mvibr's, both ways: start mvibr from
published weights (to fine-tune or render them), or take weights trained here back to the
published code.

    tools/torch_checkpoint.py import MODEL.pth OUT.h5
    tools/torch_checkpoint.py export CKPT.h5 OUT.pth

IBRNet saves {"net_coarse", "net_fine", "feature_net": state_dict}; DynIBaR's monocular model
(DynibarMono.save_model) {"net_coarse_st", "net_coarse_dy", "feature_net", "feature_net_st",
"motion_mlp": state_dict, "traj_basis": tensor [frames, 6], "global_step"}; both add "optimizer"
and "scheduler", which are not carried over. An mvibr checkpoint holds every parameter as the
float32 dataset "model/<network>.<state_dict name>" (train/checkpoint.h), the same names, and
DynIBaR's basis as "model/trajectory_basis". Keys saved from a DataParallel or
DistributedDataParallel wrapper ("module." in front) are accepted. Which model a file holds is
read from its networks.

import writes a checkpoint of weights alone: step 0, Adam's moments zero (a fresh optimiser, as
IBRNet's --no_load_opt) and no data position. Use it with the model settings the weights were
trained with (IBRNet's published model: feature_net = ibrnet, coarse_feat_dim = fine_feat_dim =
32, and N_samples = N_importance = 64, which size the ray transformers' positional encodings;
DynIBaR's: configs/dynibar_kid.txt, num_frames the video's):

    mvibr train --config configs/fern.txt --feature_net ibrnet --init_ckpt OUT.h5   (fine-tune)
    mvibr render --run runs/fern --ckpt OUT.h5 --path spiral                        (render)

(init_ckpt starts a new run from the weights and is ignored once the run has checkpoints, so a
requeued Slurm job continues; IBRNet's ckpt_path takes the file over the run's own every time.)

mvibr checks every name and shape when it loads the file and names the first that does not fit.
export writes the state dicts (float32 tensors), and DynIBaR's basis and step, for the published
load_model with --no_load_opt --no_load_scheduler.

Bad input (a file that is not one of these checkpoints, a parameter that is not finite) ends with
one line naming the file and exit status 2.
"""
import argparse
import collections
import os
import sys

import h5py
import numpy as np
import torch

# Each model's state dicts, and its plain tensors under their mvibr names.
MODELS = {
    "IBRNet": {"networks": ("feature_net", "net_coarse", "net_fine"), "tensors": {}},
    "DynIBaR": {"networks": ("feature_net", "feature_net_st", "net_coarse_st", "net_coarse_dy",
                             "motion_mlp"),
                "tensors": {"traj_basis": "trajectory_basis"}},
}


class BadInput(Exception):
    pass


def float_array(path, name, value):
    if not torch.is_tensor(value) or not value.is_floating_point():
        raise BadInput(f"{path}: {name} is not a floating-point tensor")
    array = value.detach().to(torch.float32).numpy()
    if not np.isfinite(array).all():
        raise BadInput(f"{path}: {name} holds a value that is not finite")
    return array


def parameters_of(path):
    """The model a MODEL.pth holds, and its parameters under mvibr's names as float32 arrays."""
    try:
        saved = torch.load(path, map_location="cpu")
    except Exception as e:  # torch raises many kinds for a file that is not a checkpoint
        raise BadInput(f"{path}: not a PyTorch checkpoint ({e})")
    model = None
    if isinstance(saved, dict):
        model = "DynIBaR" if "net_coarse_dy" in saved else "IBRNet" if "net_coarse" in saved else None
    if model is None or "feature_net" not in saved:
        raise BadInput(f"{path}: not an IBRNet or DynIBaR checkpoint (IBRNet's has the state dicts "
                       "'feature_net' and 'net_coarse', DynIBaR's 'feature_net' and "
                       "'net_coarse_dy' among others)")
    params = {}
    for network in MODELS[model]["networks"]:
        if saved.get(network) is None:
            if model == "IBRNet" and network == "net_fine":
                continue  # coarse-only models have no fine network
            raise BadInput(f"{path}: the {model} checkpoint has no '{network}'")
        for name, value in saved[network].items():
            if name.startswith("module."):
                name = name[len("module."):]
            params[f"{network}.{name}"] = float_array(path, f"{network}.{name}", value)
    for key, name in MODELS[model]["tensors"].items():
        if key not in saved:
            raise BadInput(f"{path}: the {model} checkpoint has no '{key}'")
        params[name] = float_array(path, key, saved[key])
    return model, params


def import_checkpoint(pth, out):
    model, params = parameters_of(pth)
    temporary = f"{out}.tmp-{os.getpid()}"
    with h5py.File(temporary, "w") as f:
        f.attrs["format"] = np.bytes_("mvibr-checkpoint")
        f.attrs["format_version"] = np.int64(1)
        f.attrs["step"] = np.uint64(0)
        f.attrs["mvibr_version"] = np.bytes_("tools/torch_checkpoint.py")
        f.attrs["config"] = np.bytes_(f"# {model} weights imported from {os.path.abspath(pth)}\n")
        f.attrs["random_seed"] = np.uint64(0)
        f.attrs["lr_feature"] = np.float64(0)
        f.attrs["lr_mlp"] = np.float64(0)
        for tree in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
            group = f.require_group(tree)
            for name, value in params.items():
                group.create_dataset(name, data=value if tree == "model" else np.zeros_like(value))
        f.create_dataset("data_cursors", shape=(0, 2), dtype=np.uint64)
    os.replace(temporary, out)
    print(f"{out}: {len(params)} parameters of {model} from {pth}")


def export_checkpoint(h5, out):
    try:
        f = h5py.File(h5, "r")
    except OSError as e:
        raise BadInput(f"{h5}: cannot open ({e})")
    with f:
        kind = f.attrs.get("format", b"")
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind != "mvibr-checkpoint" or "model" not in f:
            raise BadInput(f"{h5}: not an mvibr checkpoint (format '{kind}')")
        names = list(f["model"])
        model = "DynIBaR" if any(n.startswith("net_coarse_dy.") for n in names) else "IBRNet"
        spec = MODELS[model]
        tensors = {name: key for key, name in spec["tensors"].items()}
        saved = {network: collections.OrderedDict() for network in spec["networks"]}
        for full_name in names:
            value = torch.from_numpy(np.asarray(f["model"][full_name], dtype=np.float32))
            if full_name in tensors:
                saved[tensors[full_name]] = value
                continue
            network, _, name = full_name.partition(".")
            if network not in spec["networks"] or not name:
                raise BadInput(f"{h5}: parameter '{full_name}' belongs to no {model} network")
            saved[network][name] = value
        if model == "DynIBaR":
            saved["global_step"] = int(f.attrs["step"])
    saved = {key: value for key, value in saved.items() if not isinstance(value, dict) or value}
    temporary = f"{out}.tmp-{os.getpid()}"
    torch.save(saved, temporary)
    os.replace(temporary, out)
    count = sum(len(v) for v in saved.values() if isinstance(v, dict)) + len(spec["tensors"])
    print(f"{out}: {count} parameters of {model} from {h5}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    to_mvibr = commands.add_parser("import", help="a published MODEL.pth to an mvibr checkpoint")
    to_mvibr.add_argument("pth")
    to_mvibr.add_argument("out")
    to_ibrnet = commands.add_parser("export", help="an mvibr checkpoint to the published MODEL.pth")
    to_ibrnet.add_argument("h5")
    to_ibrnet.add_argument("out")
    args = parser.parse_args()
    try:
        if args.command == "import":
            import_checkpoint(args.pth, args.out)
        else:
            export_checkpoint(args.h5, args.out)
    except BadInput as e:
        print(f"torch_checkpoint.py: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
