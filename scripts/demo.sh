#!/usr/bin/env bash
# The main job on the built-in default, ending with a rendered picture.
# - Sets up, then configures build/ as scripts/build.sh does (extra arguments go to CMake, e.g.
#   -DMVIBR_CUDA=OFF) but builds only the `mvibr` program, not the tests or benchmarks.
# - Prepares the built-in synthetic scene into HDF5 shards, checks them, self-checks the
#   rendering core, and trains IBRNet on the scene with one MPI rank per core (MVIBR_RANKS).
# - Reports held-out PSNR and SSIM, renders one held-out view to PNG and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MVIBR_TARGET=mvibr bash scripts/build.sh "$@"
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
# The first test view as PNGs (colour and _depth) in runs/synthetic/renders/<step>/.
./build/mvibr render --run runs/synthetic --max_views 1
png=$(find runs/synthetic/renders -maxdepth 2 -name '*.png' ! -name '*_depth.png' -printf '%T@ %p\n' |
  sort -n | tail -n 1 | cut -d' ' -f2-)
[[ -n $png ]] || { echo "demo: no PNG under runs/synthetic/renders" >&2; exit 1; }
echo "demo: the rendered held-out view is $png (depth: ${png%.png}_depth.png)"
