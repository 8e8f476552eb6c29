// Convolution forward, backward data and backward weights through oneDNN (see conv_layers.h).
// oneDNN rather than a hand-rolled im2col + sgemm: it picks its best implementation per shape
// and ISA for all three passes (on plain NCHW that is its own im2col + JIT sgemm, "gemm:jit";
// its direct kernels would need blocked layouts and reorders around every layer). Creating a
// primitive costs far more than running a small one, so each shape's are built once and cached.
#include <dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"

namespace mvibr::nn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The primitives of one shape; the backward ones are built on first use (inference never needs
// them).
struct ConvPrimitives {
  memory::desc src, weights, bias, dst;
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  std::unique_ptr<dnnl::convolution_backward_data> backward_data;
  std::unique_ptr<dnnl::convolution_backward_weights> backward_weights;
};

using ConvKey = std::tuple<int, int, int, int, int, int, int, bool>;

memory::dims dims(int a, int b, int c, int d) {
  return {memory::dim(a), memory::dim(b), memory::dim(c), memory::dim(d)};
}

void check_shape(const ConvShape& s) {
  if (s.batch < 1 || s.in_channels < 1 || s.out_channels < 1 || s.kernel < 1 || s.stride < 1 ||
      s.in_height < s.kernel || s.in_width < s.kernel) {
    throw InvalidArgument("conv2d: a " + std::to_string(s.kernel) + "x" + std::to_string(s.kernel) +
                          " convolution cannot run on a " + std::to_string(s.in_height) + "x" +
                          std::to_string(s.in_width) + " map");
  }
}

// Plain NCHW and OIHW descriptors: what the callers hold, so nothing is reordered.
ConvPrimitives& primitives(const ConvShape& s, bool with_bias) {
  static std::mutex mutex;
  static std::map<ConvKey, std::unique_ptr<ConvPrimitives>> cache;
  check_shape(s);
  const ConvKey key{s.batch,    s.in_channels, s.out_channels, s.in_height,
                    s.in_width, s.kernel,      s.stride,       with_bias};
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ConvPrimitives>& entry = cache[key];
  if (entry) return *entry;
  auto p = std::make_unique<ConvPrimitives>();
  const auto f32 = memory::data_type::f32;
  p->src = memory::desc(dims(s.batch, s.in_channels, s.in_height, s.in_width), f32, Tag::nchw);
  p->weights =
      memory::desc(dims(s.out_channels, s.in_channels, s.kernel, s.kernel), f32, Tag::oihw);
  p->bias = with_bias ? memory::desc({memory::dim(s.out_channels)}, f32, Tag::x) : memory::desc();
  p->dst =
      memory::desc(dims(s.batch, s.out_channels, s.out_height(), s.out_width()), f32, Tag::nchw);
  const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
  const dnnl::convolution_forward::desc forward(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, p->src, p->weights,
      p->bias, p->dst, strides, no_padding, no_padding);
  p->forward_pd = dnnl::convolution_forward::primitive_desc(forward, cpu_engine());
  p->forward = dnnl::convolution_forward(p->forward_pd);
  entry = std::move(p);
  return *entry;
}

dnnl::convolution_backward_data& backward_data(const ConvShape& s, ConvPrimitives& p) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!p.backward_data) {
    const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
    const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, p.src,
                                                     p.weights, p.dst, strides, no_padding,
                                                     no_padding);
    p.backward_data = std::make_unique<dnnl::convolution_backward_data>(
        dnnl::convolution_backward_data::primitive_desc(desc, cpu_engine(), p.forward_pd));
  }
  return *p.backward_data;
}

dnnl::convolution_backward_weights& backward_weights(const ConvShape& s, ConvPrimitives& p) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!p.backward_weights) {
    const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
    const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, p.src,
                                                        p.weights, p.bias, p.dst, strides,
                                                        no_padding, no_padding);
    p.backward_weights = std::make_unique<dnnl::convolution_backward_weights>(
        dnnl::convolution_backward_weights::primitive_desc(desc, cpu_engine(), p.forward_pd));
  }
  return *p.backward_weights;
}

// oneDNN takes non-const handles; the primitives only read the inputs.
memory wrap(const memory::desc& desc, const float* data) {
  return memory(desc, cpu_engine(), const_cast<float*>(data));
}

void run(const dnnl::primitive& primitive, const std::unordered_map<int, memory>& arguments) {
  dnnl::stream stream(cpu_engine());
  primitive.execute(stream, arguments);
  stream.wait();
}

// oneDNN's failures (no implementation for a shape, memory) as the project's error type.
[[noreturn]] void fail(const char* pass, const dnnl::error& e) {
  throw RuntimeFailure(std::string("oneDNN convolution ") + pass + " failed: " + e.what());
}

}  // namespace

void conv2d_forward(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                    float* y) {
  try {
    ConvPrimitives& p = primitives(shape, bias != nullptr);
    std::unordered_map<int, memory> arguments{{DNNL_ARG_SRC, wrap(p.src, x)},
                                              {DNNL_ARG_WEIGHTS, wrap(p.weights, weight)},
                                              {DNNL_ARG_DST, wrap(p.dst, y)}};
    if (bias) arguments.emplace(DNNL_ARG_BIAS, wrap(p.bias, bias));
    run(p.forward, arguments);
  } catch (const dnnl::error& e) {
    fail("forward", e);
  }
}

void conv2d_backward_data(const ConvShape& shape, const float* weight, const float* grad_y,
                          float* grad_x) {
  try {
    ConvPrimitives& p = primitives(shape, false);
    run(backward_data(shape, p), {{DNNL_ARG_DIFF_SRC, wrap(p.src, grad_x)},
                                  {DNNL_ARG_WEIGHTS, wrap(p.weights, weight)},
                                  {DNNL_ARG_DIFF_DST, wrap(p.dst, grad_y)}});
  } catch (const dnnl::error& e) {
    fail("backward data", e);
  }
}

void conv2d_backward_weights(const ConvShape& shape, const float* x, const float* grad_y,
                             float* grad_weight, float* grad_bias) {
  // oneDNN overwrites its outputs; parameter gradients accumulate.
  const size_t weight_count =
      size_t(shape.out_channels) * size_t(shape.in_channels) * size_t(shape.kernel * shape.kernel);
  std::vector<float> weight_step(weight_count), bias_step(size_t(shape.out_channels));
  try {
    ConvPrimitives& p = primitives(shape, grad_bias != nullptr);
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, wrap(p.src, x)},
        {DNNL_ARG_DIFF_DST, wrap(p.dst, grad_y)},
        {DNNL_ARG_DIFF_WEIGHTS, wrap(p.weights, weight_step.data())}};
    if (grad_bias) arguments.emplace(DNNL_ARG_DIFF_BIAS, wrap(p.bias, bias_step.data()));
    run(backward_weights(shape, p), arguments);
  } catch (const dnnl::error& e) {
    fail("backward weights", e);
  }
  for (size_t i = 0; i < weight_count; ++i) grad_weight[i] += weight_step[i];
  if (grad_bias) {
    for (int o = 0; o < shape.out_channels; ++o) grad_bias[o] += bias_step[size_t(o)];
  }
}

}  // namespace mvibr::nn
