#!/usr/bin/env bash
# Run here, before a device check: the GPU machine has nvcc but neither GoogleTest nor Google
# Benchmark and cannot fetch them, so the GPU tests and the benchmarks are built here (CUDA,
# sm_80 + sm_90) and packed with the shared libraries they need into device-bundle/, which the
# device tool carries (`carry: ["device-bundle"]`, 64 MiB at most with the working tree).
# scripts/device_check.sh runs it there.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "device_bundle: no nvcc (/usr/local/cuda/bin)" >&2; exit 1; }
bash scripts/setup.sh >/dev/null
targets=(gpu_render_ops_test gpu_nccl_test gpu_nn_layers_test gpu_feature_net_test
  gpu_aggregator_test gpu_motion_mlp_test gpu_train_step_test gpu_dynibar_step_test
  render_ops_bench train_step_bench mvibr)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMVIBR_CUDA=ON >/dev/null
cmake --build build -j "$(nproc)" --target "${targets[@]}" >/dev/null
rm -rf device-bundle
mkdir -p device-bundle/lib
binaries=(build/test/gpu_render_ops_test build/test/gpu_nccl_test build/test/gpu_nn_layers_test
  build/test/gpu_feature_net_test build/test/gpu_aggregator_test build/test/gpu_motion_mlp_test
  build/test/gpu_train_step_test build/test/gpu_dynibar_step_test
  build/bench/render_ops_bench build/bench/train_step_bench build/mvibr)
cp "${binaries[@]}" device-bundle/
for binary in "${binaries[@]}"; do
  strip --strip-unneeded "device-bundle/$(basename "$binary")"
  chmod +x "device-bundle/$(basename "$binary")"
done
# Every shared library they need except the C library's own (the machine's glibc must serve
# them), the driver's, NCCL (218 MB), cuDNN and cuBLAS (cublasLt alone is 517 MB): the device
# image has those in its nvidia-nccl-cu13, nvidia-cudnn-cu13 and nvidia-cublas Python packages.
# Open MPI, HDF5, BLAS, oneDNN travel.
ldd "${binaries[@]}" | awk '$3 ~ /^\// { print $1, $3 }' | sort -u |
  while read -r name path; do
    case $name in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libresolv.so* | \
        libnsl.so* | libutil.so* | libanl.so* | libmvec.so* | libnss_* | libcuda.so* | \
        libnccl.so* | libcudnn*.so* | libcublas*.so*) ;;
      *) cp -L "$path" device-bundle/lib/ ;;
    esac
  done
# Libraries over 1 MB travel xz-compressed (oneDNN and OpenBLAS, 38 and 35 MB, become 7 and 4);
# scripts/device_check.sh unpacks them.
find device-bundle/lib -type f -size +1M -exec xz -T0 -6 {} +
git describe --always --dirty >device-bundle/REVISION
bytes=$(du -sb device-bundle | cut -f1)
echo "device-bundle: $((bytes / 1024 / 1024)) MiB ($(cat device-bundle/REVISION))"
# The device tool carries 64 MiB with the working tree (about 2 MiB): leave a margin.
if ((bytes > 58 * 1024 * 1024)); then
  echo "device_bundle: device-bundle is over 58 MiB and would not travel with the tree" >&2
  exit 1
fi
