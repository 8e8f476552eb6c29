#!/usr/bin/env python3
"""The PyTorch side of bench/pose_vs_pytorch.sh: the pose model trained as the users' guide trains
it, under DistributedDataParallel (gloo) on CPU processes, float32, torch.optim.Adam.

The network is the tested reference (test/reference/pose_model_reference.step, checked against
mvibr's PoseModel by pose_model_test) in float32, with the choices a PyTorch user makes: F.relu
and F.instance_norm; triangulation batched over every instant and joint (torch.linalg.solve).
Its weights are mvibr's checkpoint's, loaded by name. Each rank reads the instants of its own
shards (shard s on rank s % ranks, as mvibr deals them) from the prepared folder with h5py, all
into memory before the clock starts, so the data costs PyTorch nothing.

Runs WARMUP + STEPS updates of the config's pose_batch instants per rank (its datadir,
heatmap_multiplier, w_joints_2d and learning rates) and prints one JSON line on rank 0: seconds
per update and instants per second over the STEPS, and the last loss. PRECISION bf16 runs the
forward under torch.autocast("cpu", torch.bfloat16), PyTorch's own mixed precision on the CPU
(its convolutions and linear layers in bf16).

    pose_torch_ddp.py CHECKPOINT CONFIG RANKS THREADS WARMUP STEPS [PRECISION: fp32 | bf16]
"""
import json
import os
import pathlib
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "test" / "reference"))
import feature_net_reference  # noqa: E402  (the references set float64; switched back below)
import pose_model_reference as reference  # noqa: E402

CONFIDENCE = "confidence."


def projection(intrinsics, c2w):
    """P = K [R | t] of a camera-to-world pose, mvibr's convention (geom/triangulation.h)."""
    fx, fy, cx, cy = intrinsics
    rotation, centre = c2w[:, :3], c2w[:, 3]
    w2c = np.concatenate([rotation.T, (-rotation.T @ centre)[:, None]], axis=1)
    k = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
    return k @ w2c


def load_instants(data_dir, rank, ranks):
    """Every training instant of this rank's shards: images [V,H,W,3], projections [V,3,4],
    joints [J,3], 2D joints [V,J,2], visibility [V,J]."""
    with h5py.File(data_dir / "scene.h5", "r") as scene:
        shards = int(scene.attrs["n_shards"])
    instants = []
    for s in range(rank, shards, ranks):
        with h5py.File(data_dir / f"shard-{s:05d}-of-{shards:05d}.h5", "r") as f:
            split, targets = f["views/split"][:], f["targets"][:]
            sources = f["target_sources"][:]
            intrinsics, c2w = f["views/intrinsics"][:], f["views/c2w"][:]
            joints, joints_2d = f["pose/joints_world"][:], f["pose/joints_image"][:]
            visible = f["pose/visible"][:]
            for t, frame in enumerate(targets):
                if split[frame] != 0:
                    continue
                frames = [int(frame)] + [int(x) for x in sources[t] if x >= 0]
                instants.append({
                    "images": np.stack([f["frames"][i] for i in frames]),
                    "projections": np.stack([projection(intrinsics[i], c2w[i]) for i in frames]),
                    "joints": joints[frame],
                    "joints_2d": joints_2d[frames],
                    "visible": visible[frames]})
    return instants


def batch(instants):
    """B instants as the reference's inputs (float32 tensors)."""
    tensor = lambda name: torch.from_numpy(np.stack([i[name] for i in instants]).astype(np.float32))
    images = tensor("images")
    b, v = images.shape[:2]
    return {"images": images.reshape(b * v, *images.shape[2:]),
            "projections": tensor("projections"), "joints": tensor("joints"),
            "joints_2d": tensor("joints_2d").reshape(b * v, -1, 2),
            "visible": tensor("visible").reshape(b * v, -1)}


class PoseNet(torch.nn.Module):
    def __init__(self, checkpoint):
        super().__init__()
        with h5py.File(checkpoint, "r") as f:
            values = {name: torch.from_numpy(np.asarray(v, dtype=np.float32))
                      for name, v in f["model"].items()}
        self.names = sorted(values)
        self.weights = torch.nn.ParameterDict(
            {name.replace(".", "__"): torch.nn.Parameter(values[name]) for name in self.names})
        layers = [name for name in self.names if name.startswith("backbone.layer")]
        self.cfg = {
            "widths": [int(values[f"backbone.layer{s}.0.conv1.weight"].shape[0]) for s in (1, 2, 3)],
            "blocks": [len({n.split(".")[2] for n in layers if n.startswith(f"backbone.layer{s}.")})
                       for s in (1, 2, 3)],
            "joints": int(values[CONFIDENCE + "2.weight"].shape[0]),
            "stride": 4, "use_confidences": True}

    def forward(self, inputs, multiplier, w_joints_2d, instants, views):
        params = {name: self.weights[name.replace(".", "__")] for name in self.names}
        cfg = dict(self.cfg, multiplier=multiplier, w_joints_2d=w_joints_2d, instants=instants,
                   views=views)
        norm = lambda x, gamma, beta: F.instance_norm(x, weight=gamma, bias=beta,
                                                      eps=feature_net_reference.EPS)
        return reference.step(cfg, params, inputs, lambda y, _: F.relu(y), norm)[0]


def read_config(path):
    """The config's keys this side needs, with mvibr's defaults (train/config.h)."""
    keys = {"datadir": "", "pose_batch": "4", "heatmap_multiplier": "100", "w_joints_2d": "1",
            "lrate_feature": "1e-3", "lrate_mlp": "5e-4"}
    for line in pathlib.Path(path).read_text().splitlines():
        key, _, value = line.partition("#")[0].partition("=")
        if key.strip() in keys:
            keys[key.strip()] = value.strip()
    return keys


def run(rank, args):
    checkpoint, data_dir = args["checkpoint"], pathlib.Path(args["datadir"])
    ranks, threads = args["ranks"], args["threads"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(threads)
    model = torch.nn.parallel.DistributedDataParallel(PoseNet(checkpoint))
    weights = model.module.weights
    head = [p for name, p in weights.items() if name.startswith(CONFIDENCE.replace(".", "__"))]
    backbone = [p for name, p in weights.items() if not name.startswith("confidence__")]
    optimizer = torch.optim.Adam([{"params": backbone, "lr": args["lrate_feature"]},
                                  {"params": head, "lr": args["lrate_mlp"]}])
    instants = load_instants(data_dir, rank, ranks)
    order = np.random.default_rng(rank).permutation(len(instants))
    b, warmup, steps = args["pose_batch"], args["warmup"], args["steps"]
    views = instants[0]["images"].shape[0]
    batches = [batch([instants[order[(k * b + i) % len(order)]] for i in range(b)])
               for k in range(warmup + steps)]
    loss = None
    for k in range(warmup + steps):
        if k == warmup:
            dist.barrier()
            start = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args["precision"] == "bf16"):
            loss = model(batches[k], args["heatmap_multiplier"], args["w_joints_2d"], b, views)
        loss.backward()
        optimizer.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"step_seconds": seconds / steps,
                          "instants_per_second": steps * b * ranks / seconds,
                          "loss": loss.item(), "ranks": ranks, "threads": threads,
                          "precision": args["precision"],
                          "torch": torch.__version__}))
    dist.destroy_process_group()


def main():
    config = read_config(sys.argv[2])
    args = {"checkpoint": sys.argv[1], "datadir": config["datadir"],
            "pose_batch": int(config["pose_batch"]),
            "port": 29500 + os.getpid() % 1000}
    for key in ["heatmap_multiplier", "w_joints_2d", "lrate_feature", "lrate_mlp"]:
        args[key] = float(config[key])
    args.update(zip(["ranks", "threads", "warmup", "steps"], map(int, sys.argv[3:7])))
    args["precision"] = sys.argv[7] if len(sys.argv) > 7 else "fp32"
    if args["precision"] not in ("fp32", "bf16"):
        sys.exit(f"pose_torch_ddp.py: precision must be fp32 or bf16, got '{args['precision']}'")
    mp.spawn(run, args=(args,), nprocs=args["ranks"])


if __name__ == "__main__":
    main()
