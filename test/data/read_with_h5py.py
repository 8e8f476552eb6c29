#!/usr/bin/env python3
"""Reads a prepared folder with h5py alone, as users' own tools would, and checks that
scene.h5 and every shard agree: the documented attributes and shapes, frames as uint8
[M, H, W, 3], rigid cameras, and each shard's cameras equal to scene.h5's rows for its frames.

    read_with_h5py.py PREPARED_DIR
"""
import pathlib
import sys

import h5py
import numpy as np


def check(condition, what):
    if not condition:
        sys.exit(f"read_with_h5py.py: {what}")


def text(value):
    """A string attribute: h5py gives fixed-length strings as bytes."""
    return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)


def main():
    root = pathlib.Path(sys.argv[1])
    with h5py.File(root / "scene.h5", "r") as scene:
        check(text(scene.attrs["format"]) == "mvibr-scene", "scene.h5 format attribute")
        check(scene.attrs["format_version"] == 1, "scene.h5 version")
        n, n_shards = int(scene.attrs["n_views"]), int(scene.attrs["n_shards"])
        width, height = int(scene.attrs["width"]), int(scene.attrs["height"])
        c2w = scene["views/c2w"][()]
        check(c2w.shape == (n, 3, 4), f"views/c2w shape {c2w.shape}")
        rotations = c2w[:, :, :3]
        check(np.allclose(rotations @ rotations.transpose(0, 2, 1), np.eye(3), atol=1e-6),
              "rotations are not orthonormal")
        names = [text(x) for x in scene["views/name"][()]]
        check(len(names) == n, "views/name length")
        check(scene["neighbours"].shape[0] == n, "neighbours rows")
        frames_total = 0
        for s in range(n_shards):
            path = root / f"shard-{s:05d}-of-{n_shards:05d}.h5"
            with h5py.File(path, "r") as shard:
                check(text(shard.attrs["format"]) == "mvibr-shard", f"{path} format attribute")
                frames = shard["frames"]
                m = int(shard.attrs["n_frames"])
                check(frames.shape == (m, height, width, 3) and frames.dtype == np.uint8,
                      f"{path} frames {frames.shape} {frames.dtype}")
                check(frames.chunks == (1, height, width, 3), f"{path} chunks {frames.chunks}")
                check(frames.fletcher32, f"{path} frames without Fletcher32")
                pixels = frames[()]  # every chunk, checksums verified by HDF5
                check(pixels.std() > 0, f"{path} frames are constant")
                view = shard["frame_view"][()]
                check(np.array_equal(shard["views/c2w"][()], c2w[view]),
                      f"{path} cameras differ from scene.h5")
                targets = shard["targets"][()]
                check(targets.min() >= 0 and targets.max() < m, f"{path} target range")
                frames_total += m
    print(f"read_with_h5py.py: {n} views, {n_shards} shards, {frames_total} frames: ok")


if __name__ == "__main__":
    main()
