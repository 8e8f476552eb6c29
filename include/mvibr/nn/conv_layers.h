// The layers of IBRNet's convolutional feature network on the CPU, each with a hand-written
// backward pass: convolution (oneDNN), reflect padding, instance norm with its activation, and
// bilinear upsampling. Tensors are batches of float maps (batch = source views), NCHW unless a
// shape says channels last (MapLayout). Weights are OIHW, PyTorch's state_dict shapes.
// Convolutions pad only by reflection (IBRNet's padding_mode='reflect'), which oneDNN and cuDNN
// lack: each backend pads a copy of the input for them (on the CPU, with bf16 operands, rounded in
// the same pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "mvibr/core/enum_names.h"
#include "mvibr/nn/layers.h"  // Activation

namespace mvibr::nn {

// How a batch of maps lies in memory:
// - kPlanar: NCHW, each channel's plane contiguous; PyTorch's and cuDNN's layout.
// - kChannelsLast: NHWC, each pixel's channels contiguous; what oneDNN's direct and AMX
//   convolutions read and write, so the CPU's convolutions run on it without transposing.
enum class MapLayout { kPlanar, kChannelsLast };

// A view of a batch of float maps; owns nothing.
struct MapBatch {
  float* data = nullptr;
  int batch = 0, channels = 0, height = 0, width = 0;
  MapLayout layout = MapLayout::kPlanar;
  size_t plane_size() const { return size_t(height) * size_t(width); }
  size_t size() const { return size_t(batch) * size_t(channels) * plane_size(); }
  // Where value (n, c, y, x) lies in data.
  size_t offset(int n, int c, int y, int x) const {
    const size_t pixel = size_t(y) * size_t(width) + size_t(x);
    return layout == MapLayout::kPlanar
               ? (size_t(n) * size_t(channels) + size_t(c)) * plane_size() + pixel
               : (size_t(n) * plane_size() + pixel) * size_t(channels) + size_t(c);
  }
};

// How the CPU runs 3x3 stride-1 convolutions (every other one is direct; cuDNN picks its own):
// oneDNN's direct kernels, or its Winograd F(4x4, 3x3), about 2x faster on the small ResUNet's
// (bench/conv_bench) with errors against a float64 reference like direct's. Where oneDNN has no
// Winograd kernel for the CPU or the shape, direct runs.
enum class ConvAlgorithm { kDirect, kWinograd };

// The CPU's convolutions with a kernel above 1x1 take Operands (layers.h; cuDNN's are fp32).
// bf16 ones run on AMX or AVX512-BF16: 1.4x fp32 Winograd over the pose backbone's layers,
// reorders counted (bench/conv_bench). 1x1 convolutions stay fp32: a GEMM at memory speed, where
// the conversions cost more than they save.

// A 2-D convolution of the input reflect-padded by `pad` on every side (0: unpadded): input
// [batch, in_channels, in_height, in_width] (unpadded), weights [out_channels, in_channels,
// kernel, kernel] (PyTorch's layout), output [batch, out_channels, out_height(), out_width()];
// input and output in `layout`. Reflection needs pad < in_height and pad < in_width.
// - upsample: x holds the input at half its size, [batch, in_channels, source_height(),
//   source_width()], and the convolution reads it upsampled by 2 (upsample2x below; the
//   decoder's upconvs), in the same pass as the padding; in_height and in_width are even. The
//   input gradient is x's.
struct ConvShape {
  int batch = 1, in_channels = 1, out_channels = 1;
  int in_height = 1, in_width = 1, kernel = 1, stride = 1;
  ConvAlgorithm algorithm = ConvAlgorithm::kDirect;
  Operands operands = Operands::kFp32;
  MapLayout layout = MapLayout::kPlanar;
  int pad = 0;
  bool upsample = false;
  int source_height() const { return upsample ? in_height / 2 : in_height; }
  int source_width() const { return upsample ? in_width / 2 : in_width; }
  int padded_height() const { return in_height + 2 * pad; }
  int padded_width() const { return in_width + 2 * pad; }
  int out_height() const { return (padded_height() - kernel) / stride + 1; }
  int out_width() const { return (padded_width() - kernel) / stride + 1; }
  // Values in x, the padded input and the output.
  size_t input_size() const {
    return size_t(batch) * size_t(in_channels) * size_t(source_height()) * size_t(source_width());
  }
  size_t padded_input_size() const {
    return size_t(batch) * size_t(in_channels) * size_t(padded_height()) * size_t(padded_width());
  }
  size_t output_size() const {
    return size_t(batch) * size_t(out_channels) * size_t(out_height()) * size_t(out_width());
  }
};

// How the channels-last layers walk a batch of maps, {images, channels}: planar maps are
// channels-last maps of one channel, a batch of planes.
inline std::pair<int, int> channels_last_walk(int batch, int channels, MapLayout layout) {
  if (layout == MapLayout::kPlanar) return {batch * channels, 1};
  return {batch, channels};
}

// InvalidArgument, in one line starting with `who` ("conv2d"), unless both backends can run the
// shape: positive sizes, a kernel within the padded map, a reflection within the map, an
// upsampled input of even size.
void check_conv_shape(const ConvShape& shape, const char* who);

// InvalidArgument, in one line, unless this CPU runs convolutions with these operands.
void check_conv_operands(Operands operands);

// y = conv(x, weight) + bias; bias may be null. oneDNN's primitives are built on a shape's first
// call and cached. kept_input (null: none) receives conv2d_kept_input_floats(shape) floats for
// the backward, which then reads them instead of x.
void conv2d_forward(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                    float* y, float* kept_input = nullptr);
// Where conv2d_backward puts the gradients, each pointer null for none: the input's is added to
// `x` (the padding's folded back onto the values it copies), or written over it with overwrite_x
// (then `x` need not be initialised); the weights' and the bias's (with the weights' only) are
// added.
struct ConvGradients {
  float* x = nullptr;
  float* weight = nullptr;
  float* bias = nullptr;
  bool overwrite_x = false;
};

// The backward from grad_y: the input's gradient reads weight, the weights' x, or the forward's
// kept_input when given. With bf16 operands grad_y is rounded once for both passes, or comes
// rounded already (rounded_grad_y; grad_y is then read for the bias gradient alone).
void conv2d_backward(const ConvShape& shape, const float* x, const float* weight,
                     const float* grad_y, const ConvGradients& grads,
                     const float* kept_input = nullptr, const uint16_t* rounded_grad_y = nullptr);
// Whether conv2d_backward reads the output gradient rounded to bf16 (the shape's operands), so
// that the layer making it may round it as it goes.
bool conv2d_rounds_output_gradient(const ConvShape& shape);
// The size of a forward's kept input: the input as both passes read it, reflect-padded and rounded,
// where the operands are bf16 (half a float a value); 0 otherwise, where x itself is read or
// padding it again costs no more than keeping it padded (fp32, measured).
size_t conv2d_kept_input_floats(const ConvShape& shape);

// Reflect padding by `pad` on every side of `planes` maps [height, width], as PyTorch's 'reflect'
// (the edge is not repeated: row -1 is row 1). Needs pad < height and pad < width.
void reflect_pad_forward(int planes, int height, int width, int pad, const float* x, float* padded);
// The index that padded index i (0 at the padding's start) copies along an axis of n values.
int reflect_pad_source(int i, int pad, int n);
// grad_x += the gradient of the padded map folded back onto the map it was padded from.
void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x);
// The same on channels-last maps [batch, height, width, channels].
void reflect_pad_forward_channels_last(int batch, int height, int width, int channels, int pad,
                                       const float* x, float* padded);
// overwrite: grad_x = the folded gradient instead (grad_x need not be initialised).
void reflect_pad_backward_channels_last(int batch, int height, int width, int channels, int pad,
                                        const float* grad_padded, float* grad_x,
                                        bool overwrite = false);
// The forward into bfloat16 values (their bits), rounded to nearest even as oneDNN and PyTorch
// round (a NaN stays a NaN): a convolution's bf16 operand in one pass.
void reflect_pad_forward_bf16_channels_last(int batch, int height, int width, int channels, int pad,
                                            const float* x, uint16_t* padded);
// The same rounding of `count` values, in order.
void round_to_bf16(size_t count, const float* x, uint16_t* rounded);

constexpr float kInstanceNormEps = 1e-5f;

// One instance norm layer: `batch` x `channels` planes of plane_size values each, in `layout`.
struct InstanceNormShape {
  int batch = 1, channels = 1, plane_size = 1;
  MapLayout layout = MapLayout::kPlanar;
};

// Floats per plane that hold an instance norm's statistics from its forward to its backward:
// the mean and the inverse deviation, each a double's bytes.
constexpr size_t kInstanceNormStatisticsFloats = 4;

// InstanceNorm2d(affine, biased variance, no running statistics), then an optional residual,
// then the activation: out = act(gamma[c] (x - mean) / sqrt(var + eps) + beta[c] + residual)
// per plane. residual may be null. statistics: null, or kInstanceNormStatisticsFloats per plane
// to keep the statistics in for the backward.
void instance_norm_forward(const InstanceNormShape& shape, const float* x, const float* gamma,
                           const float* beta, const float* residual, Activation activation,
                           float* out, float* statistics);
// The backward of instance_norm_forward, in place: grad holds the gradient of `out` (its output)
// and becomes that of x, its input. grad_residual (may be null) += the residual's gradient;
// grad_gamma and grad_beta [channels] accumulate (+=). Through the activation, the residual and
// the norm one plane (one image, channels last) at a time, while it is in cache. The statistics
// are the forward's, in double (or taken again from x where `statistics` is null): the Jacobian
// subtracts two nearly equal terms on small planes, which normalised values stored in fp32
// would not resolve. rounded_grad (null: none): x's gradient goes there instead, rounded to
// bf16 (round_to_bf16's rounding), for a convolution that reads it so
// (conv2d_rounds_output_gradient); grad is left spent.
void instance_norm_backward(const InstanceNormShape& shape, const float* x, const float* gamma,
                            const float* statistics, Activation activation, const float* out,
                            float* grad, float* grad_residual, float* grad_gamma, float* grad_beta,
                            uint16_t* rounded_grad = nullptr);

// Bilinear upsampling by 2 with align_corners=True (F.interpolate(scale_factor=2)): `planes`
// maps [height, width] to [2 height, 2 width].
void upsample2x_forward(int planes, int height, int width, const float* x, float* y);
// grad_x (overwritten) from grad_y [planes, 2 height, 2 width].
void upsample2x_backward(int planes, int height, int width, const float* grad_y, float* grad_x);
// The same on channels-last maps [batch, height, width, channels].
void upsample2x_forward_channels_last(int batch, int height, int width, int channels,
                                      const float* x, float* y);
void upsample2x_backward_channels_last(int batch, int height, int width, int channels,
                                       const float* grad_y, float* grad_x);
// Upsampled and reflect-padded by `pad` in one pass: y [batch, 2 height + 2 pad, 2 width + 2 pad,
// channels], in fp32 or rounded to bf16 (their bits, as reflect_pad_forward_bf16_channels_last).
void upsample2x_pad_forward_channels_last(int batch, int height, int width, int channels, int pad,
                                          const float* x, float* y);
void upsample2x_pad_forward_bf16_channels_last(int batch, int height, int width, int channels,
                                               int pad, const float* x, uint16_t* y);
// grad_x from the padded, upsampled map's gradient: added, or written with overwrite.
void upsample2x_pad_backward_channels_last(int batch, int height, int width, int channels, int pad,
                                           const float* grad_padded, float* grad_x, bool overwrite);

}  // namespace mvibr::nn

namespace mvibr {
template <>
struct EnumNames<nn::ConvAlgorithm> {
  static constexpr std::pair<nn::ConvAlgorithm, const char*> values[] = {
      {nn::ConvAlgorithm::kDirect, "direct"}, {nn::ConvAlgorithm::kWinograd, "winograd"}};
};
}  // namespace mvibr
