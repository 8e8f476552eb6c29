#!/usr/bin/env bash
# The emulated GPU suite (ctest label gpu-emulated) under AddressSanitizer: the emulated device,
# the kernels, the GPU host code and the tests compiled with -fsanitize=address in build-asan/,
# every cudaMalloc a heap block of its own (an access past it is a report), leaks checked.
#   bash scripts/emulated_asan.sh [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMVIBR_CUDA=OFF \
  -DMVIBR_BENCHMARKS=OFF -DMVIBR_EMULATED_ASAN=ON >/dev/null
cmake --build build-asan -j "$(nproc)" --target mvibr_emulated_suite
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build-asan -L gpu-emulated --output-on-failure -j "$(nproc)" "$@"
