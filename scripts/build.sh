#!/usr/bin/env bash
# Configures and builds mvibr into build/ (CUDA on when nvcc is found). Extra arguments go to
# the CMake configure step, e.g. -DMVIBR_CUDA=OFF; MVIBR_TARGET=NAME builds that target alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)" ${MVIBR_TARGET:+--target "$MVIBR_TARGET"}
