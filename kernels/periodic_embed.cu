// DynIBaR's Fourier features on the GPU (see nn/cuda_motion_mlp.h): one thread per value
// written, in grid-stride loops, consecutive threads on consecutive addresses. The frequencies
// travel by value in the kernel's arguments. Compiled with -fmad=false (CMakeLists.txt): the
// backward is the CPU's float arithmetic, operation for operation.
#include "common.h"
#include "mvibr/nn/cuda_motion_mlp.h"

namespace mvibr::nn::cuda {

namespace {

struct Frequencies {
  int count;
  float value[kMaxEmbedFrequencies];
};

Frequencies frequencies_of(const nn::PeriodicEmbed& embed) {
  Frequencies f{};
  f.count = embed.count();
  for (int k = 0; k < f.count; ++k) f.value[k] = embed.frequencies()[size_t(k)];
  return f;
}

// Thread e writes y[e]: row e / width, column c = block * dim + j; block 0 is x, blocks
// 1..count the cosines, then the sines.
__global__ void periodic_embed_kernel(size_t total, int dim, Frequencies f, const float* x,
                                      float* y) {
  const size_t width = size_t(dim) * size_t(1 + 2 * f.count);
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t row = e / width, column = e % width;
    const int block = int(column / size_t(dim)), j = int(column % size_t(dim));
    const float value = x[row * size_t(dim) + size_t(j)];
    if (block == 0) {
      y[e] = value;
      continue;
    }
    const int k = (block - 1) % f.count;
    const float angle = __fmul_rn(f.value[k], value);  // the CPU's (and PyTorch's) f * x
    y[e] = block <= f.count ? cosf(angle) : sinf(angle);
  }
}

// Thread e writes grad_x[e] (row e / dim, input e % dim) from its row of y and grad_y.
__global__ void periodic_embed_backward_kernel(size_t total, int dim, Frequencies f, const float* y,
                                               const float* grad_y, float* grad_x,
                                               bool accumulate) {
  const size_t width = size_t(dim) * size_t(1 + 2 * f.count);
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t row = e / size_t(dim);
    const float g = periodic_embed_input_gradient(dim, f.count, f.value, y + row * width,
                                                  grad_y + row * width, int(e % size_t(dim)));
    grad_x[e] = accumulate ? grad_x[e] + g : g;
  }
}

}  // namespace

void periodic_embed_forward(const nn::PeriodicEmbed& embed, size_t n, const float* x, float* y,
                            StreamHandle stream) {
  launch_threads(n * size_t(embed.width()), stream, periodic_embed_kernel,
                 n * size_t(embed.width()), embed.dim(), frequencies_of(embed), x, y);
}

void periodic_embed_backward(const nn::PeriodicEmbed& embed, size_t n, const float* y,
                             const float* grad_y, float* grad_x, bool accumulate,
                             StreamHandle stream) {
  launch_threads(n * size_t(embed.dim()), stream, periodic_embed_backward_kernel,
                 n * size_t(embed.dim()), embed.dim(), frequencies_of(embed), y, grad_y, grad_x,
                 accumulate);
}

}  // namespace mvibr::nn::cuda
