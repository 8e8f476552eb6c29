#!/usr/bin/env bash
# Run here, before a device check: the GPU machine has nvcc but neither GoogleTest nor Google
# Benchmark and cannot fetch them, so the GPU test and the benchmark are built here (CUDA,
# sm_80 + sm_90) and packed with the shared libraries they need into device-bundle/, which the
# device tool carries (`carry: ["device-bundle"]`). scripts/device_check.sh runs it there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DMVIBR_CUDA=ON >/dev/null
rm -rf device-bundle
mkdir -p device-bundle/lib
cp build/test/gpu_render_ops_test build/bench/render_ops_bench device-bundle/
for library in libbenchmark.so.1debian libgomp.so.1 libcudart.so.13; do
  path=$(ldd build/bench/render_ops_bench build/test/gpu_render_ops_test |
    awk -v name="$library" '$1 == name { print $3; exit }')
  [[ -n $path ]] && cp -L "$path" device-bundle/lib/
done
git rev-parse --short HEAD >device-bundle/REVISION
du -sh device-bundle
