#!/usr/bin/env bash
# The main job on the built-in default: set up, build, prepare the built-in synthetic scene
# into HDF5 shards, check them, self-check the rendering core, train IBRNet on the scene and
# report held-out PSNR and SSIM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh "$@"
./build/mvibr --version
./build/mvibr prep --config configs/synthetic_prep.txt
./build/mvibr inspect runs/data/synthetic
./build/mvibr selfcheck --config configs/selfcheck.txt
./build/mvibr train --config configs/synthetic.txt --no_reload
./build/mvibr eval --run runs/synthetic
