#!/usr/bin/env bash
# Set up, build (CUDA compiled and linked when nvcc is present) and run the whole test suite,
# then the emulated GPU suite under AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ctest runs two tests at once on two cores: OpenMP threads that wait by spinning would take the
# cores the other test needs (the pose learning test ran 5x slower beside a busy core).
export OMP_WAIT_POLICY=passive
ctest --test-dir build --output-on-failure -j "$(nproc)"
# The emulated suite's kernel coverage into the log: every __global__ kernel and its launches.
if [[ -f build/emulated_kernels.txt ]]; then
  /usr/bin/python3 test/emulated_cuda/kernel_coverage.py build/emulated_kernels.txt .
fi
# The emulated GPU suite once more under AddressSanitizer (build-asan/).
bash scripts/emulated_asan.sh
