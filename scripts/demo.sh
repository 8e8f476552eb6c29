#!/usr/bin/env bash
# The main job on the built-in default: set up, build, prepare the built-in synthetic scene
# into HDF5 shards, check them, self-check the rendering core, train IBRNet on the scene with
# one MPI rank per core, and report held-out PSNR and SSIM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh "$@"
./build/mvibr --version
./build/mvibr prep --config configs/synthetic_prep.txt
./build/mvibr inspect runs/data/synthetic
./build/mvibr selfcheck --config configs/selfcheck.txt
# Data-parallel: one rank per core, one OpenMP thread each (MVIBR_RANKS overrides). Ranks beyond
# the scene's 2 shards share them.
ranks=${MVIBR_RANKS:-$(nproc)}
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
OMP_NUM_THREADS=1 mpirun -np "$ranks" --oversubscribe --bind-to none \
  ./build/mvibr train --config configs/synthetic.txt --no_reload --allow_shared_shards
./build/mvibr eval --run runs/synthetic
