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
binaries=(build/test/gpu_render_ops_test build/test/gpu_nccl_test build/test/gpu_nn_layers_test
  build/test/gpu_feature_net_test build/test/gpu_aggregator_test build/test/gpu_train_step_test
  build/bench/render_ops_bench build/bench/train_step_bench build/mvibr)
cp "${binaries[@]}" device-bundle/
# Every shared library they need except the C library's own, the driver's, NCCL (218 MB), cuDNN
# and cuBLAS (cublasLt alone is 517 MB): the device image has those in its nvidia-nccl,
# nvidia-cudnn-cu13 and nvidia-cublas Python packages. Open MPI, HDF5, BLAS, oneDNN travel.
ldd "${binaries[@]}" | awk '$3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case $name in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libcuda.so* | \
        libnccl.so* | libcudnn*.so* | libcublas*.so*) ;;
      *) cp -L "$path" device-bundle/lib/ ;;
    esac
  done
# The device tool carries 64 MiB at most: libraries over 4 MB travel xz-compressed (oneDNN and
# OpenBLAS, 38 and 35 MB, become 7 and 4); scripts/device_check.sh unpacks them.
find device-bundle/lib -type f -size +4M -exec xz -T0 -6 {} +
git rev-parse --short HEAD >device-bundle/REVISION
du -sh device-bundle
