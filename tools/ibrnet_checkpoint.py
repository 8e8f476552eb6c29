#!/usr/bin/python3
"""IBRNet's PyTorch checkpoints and mvibr's, both ways: start mvibr from IBRNet's published
weights (to fine-tune or render them), or take weights trained here back to IBRNet's code.

    tools/ibrnet_checkpoint.py import MODEL.pth OUT.h5
    tools/ibrnet_checkpoint.py export CKPT.h5 OUT.pth

IBRNet saves {"net_coarse": state_dict, "net_fine": state_dict, "feature_net": state_dict} (plus
"optimizer" and "scheduler", which are not carried over); an mvibr checkpoint holds every
parameter as the float32 dataset "model/<network>.<state_dict name>" (train/checkpoint.h), the same
names, so the conversion renames nothing. Keys saved from a DistributedDataParallel wrapper
("module." in front) are accepted.

import writes a checkpoint of weights alone: step 0, Adam's moments zero (a fresh optimiser, as
IBRNet's --no_load_opt) and no data position. Use it with the model settings the weights were
trained with (IBRNet's published model: feature_net = ibrnet, coarse_feat_dim = fine_feat_dim =
32, and N_samples = N_importance = 64, which size the ray transformers' positional encodings):

    mvibr train --config configs/fern.txt --feature_net ibrnet --init_ckpt OUT.h5   (fine-tune)
    mvibr render --run runs/fern --ckpt OUT.h5 --path spiral                        (render)

(init_ckpt starts a new run from the weights and is ignored once the run has checkpoints, so a
requeued Slurm job continues; IBRNet's ckpt_path takes the file over the run's own every time.)

mvibr checks every name and shape when it loads the file and names the first that does not fit.
export writes the three state dicts (float32 tensors) for IBRNet's IBRNetModel.load_model, with
IBRNet's --no_load_opt --no_load_scheduler.

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

NETWORKS = ("feature_net", "net_coarse", "net_fine")


class BadInput(Exception):
    pass


def state_dicts_of(path):
    """IBRNet's three state dicts from MODEL.pth, as float32 numpy arrays by name."""
    try:
        saved = torch.load(path, map_location="cpu")
    except Exception as e:  # torch raises many kinds for a file that is not a checkpoint
        raise BadInput(f"{path}: not a PyTorch checkpoint ({e})")
    if not isinstance(saved, dict) or "feature_net" not in saved or "net_coarse" not in saved:
        raise BadInput(f"{path}: not an IBRNet checkpoint (it needs the state dicts "
                       "'feature_net' and 'net_coarse', and 'net_fine' unless coarse-only)")
    networks = {}
    for network in NETWORKS:
        if saved.get(network) is None:
            continue  # coarse-only models have no fine network
        params = {}
        for name, value in saved[network].items():
            if name.startswith("module."):
                name = name[len("module."):]
            if not torch.is_tensor(value) or not value.is_floating_point():
                raise BadInput(f"{path}: {network}.{name} is not a floating-point tensor")
            array = value.detach().to(torch.float32).numpy()
            if not np.isfinite(array).all():
                raise BadInput(f"{path}: {network}.{name} holds a value that is not finite")
            params[name] = array
        networks[network] = params
    return networks


def import_checkpoint(pth, out):
    networks = state_dicts_of(pth)
    temporary = f"{out}.tmp-{os.getpid()}"
    with h5py.File(temporary, "w") as f:
        f.attrs["format"] = np.bytes_("mvibr-checkpoint")
        f.attrs["format_version"] = np.int64(1)
        f.attrs["step"] = np.uint64(0)
        f.attrs["mvibr_version"] = np.bytes_("tools/ibrnet_checkpoint.py")
        f.attrs["config"] = np.bytes_(f"# weights imported from {os.path.abspath(pth)}\n")
        f.attrs["random_seed"] = np.uint64(0)
        f.attrs["lr_feature"] = np.float64(0)
        f.attrs["lr_mlp"] = np.float64(0)
        for tree in ("model", "optimizer/exp_avg", "optimizer/exp_avg_sq"):
            group = f.require_group(tree)
            for network, params in networks.items():
                for name, value in params.items():
                    data = value if tree == "model" else np.zeros_like(value)
                    group.create_dataset(f"{network}.{name}", data=data)
        f.create_dataset("data_cursors", shape=(0, 2), dtype=np.uint64)
    os.replace(temporary, out)
    count = sum(len(p) for p in networks.values())
    print(f"{out}: {count} parameters of {', '.join(networks)} from {pth}")


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
        saved = {network: collections.OrderedDict() for network in NETWORKS}
        for full_name, dataset in f["model"].items():
            network, _, name = full_name.partition(".")
            if network not in saved or not name:
                raise BadInput(f"{h5}: parameter '{full_name}' belongs to no IBRNet network")
            saved[network][name] = torch.from_numpy(np.asarray(dataset, dtype=np.float32))
    saved = {network: params for network, params in saved.items() if params}
    temporary = f"{out}.tmp-{os.getpid()}"
    torch.save(saved, temporary)
    os.replace(temporary, out)
    count = sum(len(p) for p in saved.values())
    print(f"{out}: {count} parameters of {', '.join(saved)} from {h5}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    to_mvibr = commands.add_parser("import", help="IBRNet MODEL.pth to an mvibr checkpoint")
    to_mvibr.add_argument("pth")
    to_mvibr.add_argument("out")
    to_ibrnet = commands.add_parser("export", help="an mvibr checkpoint to IBRNet's MODEL.pth")
    to_ibrnet.add_argument("h5")
    to_ibrnet.add_argument("out")
    args = parser.parse_args()
    try:
        if args.command == "import":
            import_checkpoint(args.pth, args.out)
        else:
            export_checkpoint(args.h5, args.out)
    except BadInput as e:
        print(f"ibrnet_checkpoint.py: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
