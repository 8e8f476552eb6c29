#!/usr/bin/env python3
"""numpy reference of the spiral camera path: LLFF's render_path_spiral as NeRF's and IBRNet's
load_llff_data compute it (poses averaged, recentred, radii the 90th percentile of the recentred
camera centres, the focus depth a disparity-weighted mean of the close and far depths), written
here from that description in LLFF's own axes [right, up, backward], so that the C++ path, which
works in OpenCV axes [right, down, forward], is checked across the change of convention too.

mvibr's scenes are not recentred, so the path is computed in LLFF's recentred frame and mapped
back to the world by the average pose, as mvibr's is drawn around that pose directly.

    spiral_reference.py CASE.json OUT.json
CASE.json: {"c2w": [[12 numbers, OpenCV camera-to-world, row-major 3x4], ...],
            "close_depth", "far_depth", "frames", "rotations", "z_rate"}
OUT.json:  {"c2w": [[12 numbers, OpenCV], ...]} one per frame.
"""
import json
import sys

import numpy as np


def unit(v):
    return v / np.linalg.norm(v)


def view_matrix(backward, up, position):
    """LLFF's camera from its z axis (pointing back), an up hint and its centre: 3x4."""
    z = unit(backward)
    x = unit(np.cross(up, z))
    y = unit(np.cross(z, x))
    return np.stack([x, y, z, position], 1)


def average_pose(poses):
    return view_matrix(poses[:, :3, 2].sum(0), poses[:, :3, 1].sum(0), poses[:, :3, 3].mean(0))


def homogeneous(m):
    return np.concatenate([m[..., :3, :4], np.broadcast_to([0, 0, 0, 1.0], m.shape[:-2] + (1, 4))], -2)


def opencv_to_llff(c2w):
    """Columns y and z flip between OpenCV [right, down, forward] and LLFF [right, up, backward]."""
    out = np.array(c2w, dtype=np.float64).reshape(-1, 3, 4)
    out[:, :, 1:3] *= -1
    return out


def main():
    case = json.load(open(sys.argv[1]))
    poses = opencv_to_llff(case["c2w"])
    world_from_average = homogeneous(average_pose(poses))
    recentred = np.linalg.inv(world_from_average) @ homogeneous(poses)

    c2w = average_pose(recentred)
    up = unit(recentred[:, :3, 1].sum(0))
    # LLFF: 0.9x the smallest bound and 5x the largest; mvibr's depths carry IBRNet's margins
    # (near 0.9x, far 1.6x the bound), so its far depth is 1.6x LLFF's largest bound.
    close, far = case["close_depth"], 5.0 * case["far_depth"] / 1.6
    weight = 0.75
    focal = 1.0 / ((1.0 - weight) / close + weight / far)
    radii = np.percentile(np.abs(recentred[:, :3, 3]), 90, axis=0)
    radii = np.append(radii, 1.0)

    frames = []
    for theta in np.linspace(0.0, 2.0 * np.pi * case["rotations"], case["frames"] + 1)[:-1]:
        centre = c2w @ (np.array([np.cos(theta), -np.sin(theta),
                                  -np.sin(theta * case["z_rate"]), 1.0]) * radii)
        backward = unit(centre - c2w @ np.array([0.0, 0.0, -focal, 1.0]))
        pose = world_from_average @ homogeneous(view_matrix(backward, up, centre))
        pose[:3, 1:3] *= -1  # back to OpenCV axes
        frames.append(pose[:3, :4].reshape(-1).tolist())
    json.dump({"c2w": frames}, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
