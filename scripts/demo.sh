#!/usr/bin/env bash
# The main job on the built-in default: set up, build, print what was built and run the
# self-check of the rendering core on random data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh "$@"
./build/mvibr --version
./build/mvibr selfcheck --config configs/selfcheck.txt
