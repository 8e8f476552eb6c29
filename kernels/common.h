// What every kernel file shares.
// - CUDA error checks and the launch macro, MVIBR_LAUNCH (src/cuda/check.h).
// - Grid-stride indices and the usual block size, in both kernel namespaces.
// - launch_threads: a grid-stride kernel over a count of threads, checked.
#pragma once

#include <cstddef>
#include <utility>

#include "../src/cuda/check.h"

namespace mvibr::cuda_detail {

// The block size of grid-stride kernels.
constexpr int kThreadsPerBlock = 256;

// `kernel` over `threads` grid-stride threads on `stream`, kThreadsPerBlock a block; no launch
// when there are none (a zero grid is an error).
template <typename... Params, typename... Args>
void launch_threads(size_t threads, cudaStream_t stream, void (*kernel)(Params...),
                    Args&&... args) {
  if (threads == 0) return;
  MVIBR_LAUNCH(kernel, blocks_for(threads, kThreadsPerBlock), kThreadsPerBlock, 0, stream)
  (std::forward<Args>(args)...);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::cuda_detail

// The render kernels (ops/render_ops.h) and the network layers' (nn/cuda_layers.h).
namespace mvibr::cuda {
using cuda_detail::blocks_for;
using cuda_detail::grid_thread_count;
using cuda_detail::grid_thread_index;
using cuda_detail::kThreadsPerBlock;
using cuda_detail::launch_threads;
}  // namespace mvibr::cuda
namespace mvibr::nn::cuda {
using cuda_detail::blocks_for;
using cuda_detail::grid_thread_count;
using cuda_detail::grid_thread_index;
using cuda_detail::kThreadsPerBlock;
using cuda_detail::launch_threads;
}  // namespace mvibr::nn::cuda
