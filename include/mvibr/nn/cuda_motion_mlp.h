// DynIBaR's motion network and its Fourier features on the GPU, forward and backward, in fp32.
// - What nn/motion_mlp.h and nn/periodic_embed.h compute, on device pointers.
// - The same parameter layout (the network's run of the ParameterSet, here a device copy, with
//   each layer's offsets taken from the CPU network's Linear layers) and the same buffer layouts
//   (MotionMlpLayout: `saved` and `scratch`, which the caller owns and sizes with saved_size and
//   scratch_size), so a model can move between backends, keep or recompute activations, and
//   compare buffers.
// - Dense layers are nn::cuda::linear_forward / linear_backward (cuBLAS, bias and ReLU fused);
//   the embedding, the skip's concatenation and split, and the division by sf_mag_div are the
//   kernels of kernels/periodic_embed.cu and kernels/motion_mlp.cu. Nothing is reduced with
//   atomics: the same inputs give the same bits on every run.
// - The embedding's backward is the CPU's function (periodic_embed_input_gradient) compiled
//   without contraction: the CPU's bits from the same inputs. Its forward differs from the CPU's
//   only by the device's cosf and sinf (within 2 ulp).
// Exists only in a build with the CUDA backend (MVIBR_HAVE_CUDA, library mvibr_cuda).
#pragma once

#include <cstddef>
#include <vector>

#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/motion_mlp.h"
#include "mvibr/nn/periodic_embed.h"

namespace mvibr::nn::cuda {

// PeriodicEmbed::forward: x [n, dim] -> y [n, width], overwritten.
void periodic_embed_forward(const nn::PeriodicEmbed& embed, size_t n, const float* x, float* y,
                            StreamHandle stream);
// PeriodicEmbed::backward: grad_x [n, dim] from the forward's y and grad_y [n, width],
// overwritten or (accumulate) added to.
void periodic_embed_backward(const nn::PeriodicEmbed& embed, size_t n, const float* y,
                             const float* grad_y, float* grad_x, bool accumulate,
                             StreamHandle stream);

class MotionMlp {
 public:
  // Copies the options, the embedding and the layers' offsets of `network`, which may then go.
  explicit MotionMlp(const nn::MotionMlp& network);

  int outputs() const { return 3 * options_.basis; }
  size_t saved_size(size_t n) const { return layout(n).saved_size; }
  size_t scratch_size(size_t n) const { return layout(n).scratch_size; }
  MotionMlpLayout layout(size_t n) const { return motion_mlp_layout(options_, embed_.width(), n); }

  // As nn::MotionMlp::forward, on the context's stream: xyzt [n, inputs] -> coefficients
  // [n, 3 K]; fills `saved` (saved_size(n) floats). `params` is the device copy of the run.
  void forward(Context& context, const float* params, size_t n, const float* xyzt, float* saved,
               float* coefficients) const;
  // As nn::MotionMlp::backward: accumulates (+=) into `grads` (the run's layout, device),
  // overwrites grad_xyzt [n, inputs] (nullable: not computed), works in `scratch`
  // (scratch_size(n) floats).
  void backward(Context& context, const float* params, float* grads, size_t n, const float* saved,
                const float* grad_coefficients, float* grad_xyzt, float* scratch) const;

 private:
  MotionMlpOptions options_;
  nn::PeriodicEmbed embed_;
  std::vector<Linear> hidden_;
  Linear head_;
};

}  // namespace mvibr::nn::cuda
