// The CUDA versions of the CPU layers in layers.h and conv_layers.h, forward and backward, on
// device pointers: the same layouts (row-major [rows, features] for the dense layers, NCHW maps
// with PyTorch's weight layouts for the convolutional ones) and the same semantics, documented
// there and repeated here only where the GPU call differs. Parameters are passed as pointers (the
// caller finds them in its device copy of the ParameterSet by offset), float only.
//
// Dense layers run on cuBLAS, convolutions on cuDNN (the legacy convolution API), everything else
// on the hand-written kernels in kernels/. All arithmetic stays fp32: cuBLAS in its default math
// mode (no TF32 for fp32 GEMMs) and cuDNN convolutions in CUDNN_FMA_MATH (cuDNN's default math
// type would allow TF32 on sm_80 and newer). Reductions into parameter gradients are
// deterministic (fixed-order partial sums, no atomics), and so is the default choice of
// convolution algorithms, so the same inputs give the same bits on every run.
//
// Everything is asynchronous on a stream: layers with parameters take a Context (the stream, the
// cuBLAS and cuDNN handles and a workspace), the others a stream. One Context per stream and
// thread. These functions exist only in a build with the CUDA backend (MVIBR_HAVE_CUDA, library
// mvibr_cuda); code that calls them must be compiled only there.
#pragma once

#include <cstddef>
#include <memory>

#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/layers.h"

struct CUstream_st;

namespace mvibr {
using StreamHandle = CUstream_st*;  // as in ops/render_ops.h
}  // namespace mvibr

namespace mvibr::nn::cuda {

// How convolution algorithms are chosen, once per shape and pass, then cached in the Context.
enum class ConvSearch {
  kHeuristic,  // cudnnGet*Algorithm_v7: cuDNN's ranking, no runs, the same choice every time
  kBenchmark,  // cudnnFind*Algorithm: times each algorithm once (synchronises the device)
};

// The arithmetic of the dense layers' GEMMs. Weights, activations, outputs and gradients are fp32
// in every mode (the master weights the optimiser updates are fp32); the 16-bit modes let cuBLAS
// round each GEMM's inputs to bf16 or fp16 and multiply on tensor cores, accumulating in fp32
// (CUBLAS_COMPUTE_32F_FAST_16BF / _16F): PyTorch autocast's matmuls, without its casts through
// memory. Convolutions stay fp32 in every mode.
enum class GemmPrecision { kFp32, kBf16, kFp16 };

// Owns the cuBLAS and cuDNN handles bound to one stream and a device workspace that grows on
// demand (shared by cuDNN's algorithms and the kernels' partial sums; growing it waits for the
// stream). Creating one needs a device: it throws RuntimeFailure without one.
class Context {
 public:
  explicit Context(StreamHandle stream = nullptr);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  StreamHandle stream() const;
  void set_stream(StreamHandle stream);
  // Waits for the work queued on this stream (not the device's other streams); throws
  // RuntimeFailure on an asynchronous error.
  void synchronize();

  // Convolution algorithm choice (defaults: heuristic, deterministic only, 256 MiB). Whatever
  // the setting, only the algorithms that sum in fp32 like a GEMM are used (implicit GEMM, GEMM,
  // direct; not FFT or Winograd, whose transforms lose digits): accuracy like the CPU layer.
  // Changing a setting forgets the algorithms chosen so far.
  void set_conv_search(ConvSearch search);
  void set_deterministic(bool deterministic);  // only algorithms without atomics
  void set_workspace_limit(size_t bytes);      // an algorithm needing more is skipped
  // kFp32 by default; takes effect from the next GEMM.
  void set_gemm_precision(GemmPrecision precision);
  GemmPrecision gemm_precision() const;

  struct Impl;  // defined in src/cuda/nn_context.h, for the .cu files
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Linear (layers.h): y[rows, out] = act(x[rows, in] W^T + b), W [out, in] row-major ----

struct LinearShape {
  size_t rows = 0;
  int in = 0, out = 0;
  // Floats between consecutive rows of W; 0 means `in`. A column slice W[:, first:first+count]
  // of a layer with `in` inputs (Linear::forward_slice) passes weight + first, in = count and
  // weight_stride = the layer's in.
  int weight_stride = 0;
  int stride() const { return weight_stride ? weight_stride : in; }
};

// One cuBLAS GEMM, then one kernel adding the bias (null: none) and applying the activation.
// Throws InvalidArgument when rows or a width does not fit cuBLAS's int or stride < in.
void linear_forward(Context& context, const LinearShape& shape, const float* x, const float* weight,
                    const float* bias, Activation activation, float* y);

// The backward of linear_forward, activation included. grad_y holds dL/dy of the forward's
// output y (after the activation) and is turned in place into the gradient of the
// pre-activation, in one kernel that also sums its columns into grad_bias (+=, null: no bias).
// y is read only for kElu and kRelu (the slopes come from the output, as elu_backward). Then
// grad_x = grad W (null: not wanted; overwritten, or added to when accumulate_grad_x) and
// grad_weight += grad^T x, two GEMMs. With kNone this is exactly Linear::backward (or
// backward_slice) and grad_y is left untouched.
void linear_backward(Context& context, const LinearShape& shape, Activation activation,
                     const float* y, float* grad_y, const float* x, const float* weight,
                     float* grad_x, bool accumulate_grad_x, float* grad_weight, float* grad_bias);

// ---- Activations (layers.h, conv_layers.h), in place over `count` floats ----

// kNone does nothing. ELU has alpha 1.
void activation_forward(Activation activation, size_t count, float* x, StreamHandle stream);
// grad *= act'(·) from the activation's output: elu_backward, relu_backward, and the first
// step of conv_layers.h's instance_norm_backward.
void activation_backward(Activation activation, size_t count, const float* y, float* grad,
                         StreamHandle stream);
void sigmoid_forward(size_t count, float* x, StreamHandle stream);
// x *= factor, each element rounded once as the CPU's `x[i] *= factor` (gradient division).
void scale(size_t count, float factor, float* x, StreamHandle stream);
void sigmoid_backward(size_t count, const float* y, float* grad, StreamHandle stream);
// target[i] += values[i], the CPU's add in one rounding per element (kernels/feature_maps.cu).
void add_into(size_t count, const float* values, float* target, StreamHandle stream);

// ---- LayerNorm (layers.h) over the last dimension, biased variance ----

// Saves xhat [rows, dim] and rstd [rows] for the backward, as LayerNorm::forward.
void layer_norm_forward(Context& context, size_t rows, int dim, double eps, const float* weight,
                        const float* bias, const float* x, float* y, float* xhat, float* rstd);
// grad_x overwritten; grad_weight and grad_bias [dim] accumulate (+=).
void layer_norm_backward(Context& context, size_t rows, int dim, const float* weight,
                         const float* xhat, const float* rstd, const float* grad_y, float* grad_x,
                         float* grad_weight, float* grad_bias);

// ---- Convolution (conv_layers.h): NCHW, OIHW weights, reflect padding, stride ----

// y = conv(x, weight) + bias (null: none). Throws InvalidArgument on a shape the CPU layer
// rejects, or one whose tensors exceed 2^31 elements (cuDNN's 4-D descriptors).
void conv2d_forward(Context& context, const ConvShape& shape, const float* x, const float* weight,
                    const float* bias, float* y);
// The gradients as conv_layers.h's ConvGradients says: backward filter and bias (read x), then
// backward data (reads weight).
void conv2d_backward(Context& context, const ConvShape& shape, const float* x, const float* weight,
                     const float* grad_y, const ConvGradients& grads);

// ---- Instance norm with residual and activation (conv_layers.h) ----

// out = act(gamma[c] (x - mean) / sqrt(var + eps) + beta[c] + residual), residual nullable;
// statistics in double per plane, as the CPU layer.
void instance_norm_forward(Context& context, const InstanceNormShape& shape, const float* x,
                           const float* gamma, const float* beta, const float* residual,
                           Activation activation, float* out);
// The norm's step of conv_layers.h's instance_norm_backward (after activation_backward and the
// residual's add_into), in place: grad (of the norm's output) becomes the gradient of x;
// grad_gamma and grad_beta [channels] accumulate, summed over the batch in the CPU's order.
void instance_norm_backward(Context& context, const InstanceNormShape& shape, const float* x,
                            const float* gamma, float* grad, float* grad_gamma, float* grad_beta);

// ---- Reflect padding and bilinear upsampling (conv_layers.h) ----

// Throws InvalidArgument unless 0 <= pad < height and pad < width.
void reflect_pad_forward(int planes, int height, int width, int pad, const float* x, float* padded,
                         StreamHandle stream);
// grad_x += the padded gradient folded back, each element's terms added in the CPU's order.
void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x, StreamHandle stream);

// By 2, align_corners=True: [planes, height, width] -> [planes, 2 height, 2 width].
void upsample2x_forward(int planes, int height, int width, const float* x, float* y,
                        StreamHandle stream);
// grad_x overwritten, or added to with accumulate.
void upsample2x_backward(int planes, int height, int width, const float* grad_y, float* grad_x,
                         StreamHandle stream, bool accumulate = false);

}  // namespace mvibr::nn::cuda
