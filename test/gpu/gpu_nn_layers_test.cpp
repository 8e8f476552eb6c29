// Every layer of nn/cuda_layers.h, forward and each gradient, against its CPU layer on the same
// random inputs, at IBRNet's sizes and at odd ones (1-wide, single rows, planes of one value,
// strides that skip input columns). Plain C++ (device memory through core/device.h), so it
// builds in every build: without the CUDA backend it is one skipped test, and without a device
// every test skips.
//
// Bounds, all normwise (max |a - b| / max |b|, core/relative_error.h):
// - GEMM-like sums (Linear, convolutions, parameter-gradient sums over rows): 8 sqrt(K) 2^-24 for
//   sums of K products, at least 1e-6. A sum of K rounded fp32 additions of zero-mean terms has
//   a rounding error of standard deviation about sqrt(K/2) 2^-24 relative to its partial sums
//   (sequential order; blocked and tree orders are smaller), and the partial sums are no larger
//   than the largest output in these tests. The difference of two such results (GPU and the
//   fp32 CPU layer) has a deviation of sqrt(K) 2^-24, and 8 deviations cover the maximum over
//   the ~10^6 outputs of a test (a Gaussian's maximum over 10^6 draws is about 5 deviations).
//   Where the CPU layer runs in double (Linear, LayerNorm, activations), it is the oracle and
//   only the GPU's error counts, so the same bound has twice the margin. The 1e-6 floor covers
//   the few roundings outside the sums (bias, activation, normalisation: a few ulp).
// - TF32 would miss these bounds by orders of magnitude (10-bit mantissa: ~1e-3), so they also
//   check that cuBLAS and cuDNN stay in fp32.
// - Instance norm: both backends evaluate the same double expressions per element and round
//   once to float; they differ only in the order of the double sums (~1e-16) and expm1f's last
//   ulp, so 1e-6 (8 ulp of the largest value).
// - ReLU, reflect padding and upsampling: 0. The GPU does the CPU's float operations in the
//   CPU's order with the same roundings (no contraction, explicit _rn intrinsics), so the bits
//   must agree. ELU and sigmoid slopes: one rounding each, 2.5e-7. ELU and sigmoid themselves
//   against the double layer: 1e-6 (expm1f and expf are within 2 ulp).
#include <gtest/gtest.h>

#if MVIBR_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_fixture.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/cuda_optimizer.h"
#include "mvibr/nn/layers.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

using nn::Activation;
using synthetic::cast_values;

constexpr double kEps32 = 1.0 / 16777216.0;  // 2^-24, fp32's unit roundoff

// The bound on a GEMM-like sum of k products (see the file comment).
double max_abs_difference(const std::vector<float>& a, const std::vector<double>& b) {
  double difference = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    difference = std::max(difference, std::abs(double(a[i]) - b[i]));
  }
  return std::isnan(difference) ? INFINITY : difference;
}

double sum_bound(double k) {
  return std::max(1e-6, 8.0 * std::sqrt(std::max(k, 1.0)) * kEps32);
}

std::vector<float> random_floats(size_t count, double lo, double hi, uint64_t seed) {
  return cast_values<float>(synthetic::random_values(count, lo, hi, seed));
}

std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

std::vector<float> to_float(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

const char* name_of(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kElu:
      return "elu";
  }
  return "?";
}

using CudaLayers = testing::CudaContextTest;

// ---- Linear ----

struct LinearCase {
  size_t rows;
  int in, out;
  bool bias;
  Activation activation;
  int layer_in = 0;  // > in: the columns [first, first + in) of a layer this wide
  int first = 0;
  bool accumulate = false;
};

// The CPU layer in double: the oracle.
void apply_activation(Activation activation, std::vector<double>& y) {
  if (activation == Activation::kElu) nn::elu(y.size(), y.data());
  if (activation == Activation::kRelu) nn::relu(y.size(), y.data());
}

void activation_slope(Activation activation, const std::vector<double>& y,
                      std::vector<double>& grad) {
  if (activation == Activation::kElu) nn::elu_backward(y.size(), y.data(), grad.data());
  if (activation == Activation::kRelu) nn::relu_backward(y.size(), y.data(), grad.data());
}

TEST_F(CudaLayers, LinearMatchesCpu) {
  const LinearCase cases[] = {
      // IBRNet's aggregation network: wide rows of features, ELU, 16-wide and 1-wide heads.
      {40960, 99, 64, true, Activation::kElu},
      {40960, 64, 32, true, Activation::kElu, 0, 0, true},
      {40960, 16, 1, true, Activation::kNone},
      {20000, 32, 16, true, Activation::kRelu},
      // Odd sizes; no bias; a column slice (forward_slice) of a wider layer.
      {1, 1, 1, true, Activation::kRelu},
      {3, 7, 5, false, Activation::kRelu},
      {1001, 33, 17, true, Activation::kElu, 0, 0, true},
      {257, 9, 3, false, Activation::kNone},
      {777, 20, 9, true, Activation::kNone, 45, 13},
      {513, 6, 40, false, Activation::kNone, 35, 29},
  };
  uint64_t seed = 100;
  for (const LinearCase& c : cases) {
    const bool slice = c.layer_in > 0;
    const int layer_in = slice ? c.layer_in : c.in;
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " in " + std::to_string(c.in) + " out " +
                 std::to_string(c.out) + " layer_in " + std::to_string(layer_in) + " first " +
                 std::to_string(c.first) + " bias " + std::to_string(c.bias) + " activation " +
                 name_of(c.activation) + " accumulate " + std::to_string(c.accumulate));
    nn::ParameterSet set;
    nn::ParameterBlock block(set, "", nn::ParameterGroup::kMlp);
    const nn::Linear layer(block, "fc", layer_in, c.out, c.bias);
    const size_t weight_count = size_t(c.out) * size_t(layer_in);
    const double bound_w = 1.0 / std::sqrt(double(layer_in));
    std::vector<float> params = random_floats(set.size(), -bound_w, bound_w, ++seed);
    if (c.bias) {
      for (size_t i = weight_count; i < params.size(); ++i) params[i] *= 0.5f / float(bound_w);
    }
    const std::vector<float> x = random_floats(c.rows * c.in, -1, 1, ++seed);
    const std::vector<float> grad_y = random_floats(c.rows * c.out, -1, 1, ++seed);
    const std::vector<float> grads0 = random_floats(set.size(), -1, 1, ++seed);
    const std::vector<float> grad_x0 = random_floats(c.rows * c.in, -1, 1, ++seed);

    // CPU, double.
    const std::vector<double> params_d = to_double(params), x_d = to_double(x);
    std::vector<double> y_d(c.rows * c.out);
    if (slice) {
      layer.forward_slice(params_d.data(), c.rows, c.first, c.in, c.bias, x_d.data(), y_d.data());
      apply_activation(c.activation, y_d);
    } else {
      layer.forward(params_d.data(), c.rows, x_d.data(), y_d.data(), c.activation);
    }
    // Both backward passes start from the same (float) forward output.
    const std::vector<float> y = to_float(y_d);
    std::vector<double> grad_pre_d = to_double(grad_y);
    activation_slope(c.activation, to_double(y), grad_pre_d);
    std::vector<double> grads_d = to_double(grads0), grad_x_d = to_double(grad_x0);
    if (slice) {
      layer.backward_slice(params_d.data(), grads_d.data(), c.rows, c.first, c.in, c.bias,
                           x_d.data(), grad_pre_d.data(), grad_x_d.data());
    } else {
      layer.backward(params_d.data(), grads_d.data(), c.rows, x_d.data(), grad_pre_d.data(),
                     grad_x_d.data(), c.accumulate);
    }

    // GPU.
    const nn::cuda::LinearShape shape{c.rows, c.in, c.out, slice ? layer_in : 0};
    const DeviceArray<float> device_params(params), device_x(x), device_y_in(y);
    DeviceArray<float> device_y(y.size()), device_grad(grad_y), device_grads(grads0),
        device_grad_x(grad_x0);
    const float* weight = device_params.data() + c.first;
    const float* bias = c.bias ? device_params.data() + weight_count : nullptr;
    nn::cuda::linear_forward(context(), shape, device_x.data(), weight, bias, c.activation,
                             device_y.data());
    nn::cuda::linear_backward(context(), shape, c.activation, device_y_in.data(),
                              device_grad.data(), device_x.data(), weight, device_grad_x.data(),
                              c.accumulate, device_grads.data() + c.first,
                              c.bias ? device_grads.data() + weight_count : nullptr);
    device_synchronize();

    EXPECT_LE(normwise_relative_error(device_y.to_host(), y_d), sum_bound(c.in)) << "y";
    EXPECT_LE(normwise_relative_error(device_grad.to_host(), grad_pre_d), 2.5e-7)
        << "gradient of the pre-activation";
    if (c.activation == Activation::kNone) {
      EXPECT_EQ(device_grad.to_host(), grad_y) << "grad_y must be left alone without activation";
    }
    EXPECT_LE(normwise_relative_error(device_grad_x.to_host(), grad_x_d), sum_bound(c.out))
        << "grad_x";
    const std::vector<float> grads = device_grads.to_host();
    const std::vector<float> grad_w(grads.begin(), grads.begin() + long(weight_count));
    const std::vector<double> grad_w_d(grads_d.begin(), grads_d.begin() + long(weight_count));
    EXPECT_LE(normwise_relative_error(grad_w, grad_w_d), sum_bound(double(c.rows)))
        << "grad_weight";
    if (c.bias) {
      const std::vector<float> grad_b(grads.begin() + long(weight_count), grads.end());
      const std::vector<double> grad_b_d(grads_d.begin() + long(weight_count), grads_d.end());
      EXPECT_LE(normwise_relative_error(grad_b, grad_b_d), sum_bound(double(c.rows)))
          << "grad_bias";
    }
  }
}

// ---- Activations ----

// The GPU step's gradient division: each element rounded once, as the CPU's x[i] *= factor.
TEST_F(CudaLayers, ScaleRoundsEachElementAsTheCpu) {
  for (size_t count : {size_t(1), size_t(1000003)}) {
    const std::vector<float> x = random_floats(count, -3, 3, count + 5);
    const float factor = float(1.0 / 3072.0 / 7.0);
    std::vector<float> expected = x;
    for (float& value : expected) value *= factor;
    DeviceArray<float> device_x(x);
    nn::cuda::scale(count, factor, device_x.data(), nullptr);
    device_synchronize();
    EXPECT_EQ(device_x.to_host(), expected) << "count " << count;
  }
}

// ---- The optimiser ----

// Adam and AdamW on the device against nn::Adam: two parameter groups, three updates, with and
// without clipping, AdamW decaying the 2-D tensor only; adam_update_value is one function
// compiled for both without fused multiply-adds, so values and moments agree bit for bit. The
// norm sums each 2^14-value chunk in another order (in double): within 1e-12; a NaN or infinite
// gradient makes it non-finite.
TEST_F(CudaLayers, AdamAndTheGradientNormMatchTheCpus) {
  for (const auto& [kind, max_grad_norm] :
       {std::pair(nn::OptimizerKind::kAdam, 0.0), std::pair(nn::OptimizerKind::kAdam, 0.5),
        std::pair(nn::OptimizerKind::kAdamW, 0.0), std::pair(nn::OptimizerKind::kAdamW, 0.5)}) {
    nn::ParameterSet cpu;
    cpu.add("feature.w", {200, 200}, nn::ParameterGroup::kFeature);
    cpu.add("mlp.b", {1001}, nn::ParameterGroup::kMlp);
    cpu.values() = random_floats(cpu.size(), -1, 1, 3);
    nn::AdamOptions options;
    options.max_grad_norm = max_grad_norm;
    options.kind = kind;
    options.weight_decay = kind == nn::OptimizerKind::kAdamW ? 0.1 : 0.0;
    nn::Adam cpu_adam(cpu, options), gpu_adam(cpu, options);
    DeviceArray<float> values(cpu.values()), exp_avg(cpu.size()), exp_avg_sq(cpu.size());
    exp_avg.zero();
    exp_avg_sq.zero();
    DeviceArray<double> partials(nn::cuda::gradient_norm_partials(cpu.size()));
    for (uint64_t update = 0; update < 3; ++update) {
      cpu.grads() = random_floats(cpu.size(), -0.01, 0.01, 10 + update);
      DeviceArray<float> grads(cpu.grads());
      const double gpu_norm =
          nn::cuda::gradient_norm(cpu.size(), grads.data(), partials.data(), nullptr);
      const double cpu_norm = nn::global_grad_norm(cpu.grads().data(), cpu.size());
      EXPECT_NEAR(gpu_norm, cpu_norm, 1e-12 * cpu_norm);
      cpu_adam.step(&cpu, cpu_norm);
      const double clip = max_grad_norm > 0 ? max_grad_norm / (cpu_norm + 1e-6) : 1.0;
      const nn::AdamCoefficients c = gpu_adam.begin_update();
      for (const nn::Adam::Span& span : gpu_adam.spans()) {
        nn::cuda::adam_update(span.begin, span.end, c, span.group, span.decays,
                              clip < 1 ? float(clip) : 1.0f, values.data(), grads.data(),
                              exp_avg.data(), exp_avg_sq.data(), nullptr);
      }
      device_synchronize();
      EXPECT_EQ(values.to_host(), cpu.values())
          << (kind == nn::OptimizerKind::kAdamW ? "adamw" : "adam") << " update " << update
          << ", clip " << max_grad_norm;
    }
    EXPECT_EQ(exp_avg.to_host(), cpu_adam.exp_avg());
    EXPECT_EQ(exp_avg_sq.to_host(), cpu_adam.exp_avg_sq());
  }
  for (float bad : {NAN, INFINITY}) {
    std::vector<float> grads = random_floats(30000, -1, 1, 4);
    grads[20000] = bad;
    DeviceArray<float> device_grads(grads);
    DeviceArray<double> partials(nn::cuda::gradient_norm_partials(grads.size()));
    EXPECT_FALSE(std::isfinite(
        nn::cuda::gradient_norm(grads.size(), device_grads.data(), partials.data(), nullptr)));
  }
}

TEST_F(CudaLayers, ActivationsMatchCpu) {
  for (size_t count : {size_t(1), size_t(1000), size_t(1000003)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const std::vector<float> x = random_floats(count, -6, 4, count + 1);
    const std::vector<float> grad = random_floats(count, -1, 1, count + 2);
    for (Activation activation : {Activation::kElu, Activation::kRelu, Activation::kNone}) {
      SCOPED_TRACE(name_of(activation));
      std::vector<float> y = x, grad_cpu = grad;
      if (activation == Activation::kElu) {
        nn::elu(count, y.data());
        nn::elu_backward(count, y.data(), grad_cpu.data());
      } else if (activation == Activation::kRelu) {
        nn::relu(count, y.data());
        nn::relu_backward(count, y.data(), grad_cpu.data());
      }
      DeviceArray<float> device_y(x), device_grad(grad);
      const DeviceArray<float> device_y_cpu(y);
      nn::cuda::activation_forward(activation, count, device_y.data(), nullptr);
      nn::cuda::activation_backward(activation, count, device_y_cpu.data(), device_grad.data(),
                                    nullptr);
      device_synchronize();
      // ELU against the double layer: the float CPU ELU takes exp(x) - 1, an ulp of 1 off near
      // zero, which is far more than 1e-6 of a single small value (count 1).
      std::vector<double> y_d = to_double(x);
      apply_activation(activation, y_d);
      EXPECT_LE(normwise_relative_error(device_y.to_host(), y_d), 1e-6);
      if (activation != Activation::kElu) {
        EXPECT_EQ(device_y.to_host(), y);
      }
      const double backward_bound = activation == Activation::kElu ? 2.5e-7 : 0.0;
      EXPECT_LE(normwise_relative_error(device_grad.to_host(), grad_cpu), backward_bound);
    }
    std::vector<float> s = x, grad_cpu = grad;
    nn::sigmoid(count, s.data());
    nn::sigmoid_backward(count, s.data(), grad_cpu.data());
    DeviceArray<float> device_s(x), device_grad(grad);
    const DeviceArray<float> device_s_cpu(s);
    nn::cuda::sigmoid_forward(count, device_s.data(), nullptr);
    nn::cuda::sigmoid_backward(count, device_s_cpu.data(), device_grad.data(), nullptr);
    device_synchronize();
    std::vector<double> s_d = to_double(x);
    nn::sigmoid(count, s_d.data());
    EXPECT_LE(normwise_relative_error(device_s.to_host(), s_d), 1e-6) << "sigmoid";
    EXPECT_LE(normwise_relative_error(device_grad.to_host(), grad_cpu), 2.5e-7)
        << "sigmoid backward";
  }
}

// ---- LayerNorm ----

TEST_F(CudaLayers, LayerNormMatchesCpu) {
  struct Case {
    size_t rows;
    int dim;
    double eps;
  };
  // IBRNet's ray transformer: 16 wide, eps 1e-6, a row per sample.
  const Case cases[] = {{65536, 16, 1e-6}, {1, 1, 1e-5},    {1001, 7, 1e-5},
                        {333, 33, 1e-6},   {50, 100, 1e-5}, {3, 64, 1e-6}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " dim " + std::to_string(c.dim));
    nn::ParameterSet set;
    nn::ParameterBlock block(set, "", nn::ParameterGroup::kMlp);
    const nn::LayerNorm layer(block, "norm", c.dim, c.eps);
    const std::vector<float> params = random_floats(set.size(), 0.5, 1.5, ++seed);
    const std::vector<float> x = random_floats(c.rows * c.dim, -2, 3, ++seed);
    const std::vector<float> grad_y = random_floats(c.rows * c.dim, -1, 1, ++seed);
    const std::vector<float> grads0 = random_floats(set.size(), -1, 1, ++seed);

    const std::vector<double> params_d = to_double(params), x_d = to_double(x);
    std::vector<double> y_d(x.size()), xhat_d(x.size()), rstd_d(c.rows);
    layer.forward(params_d.data(), c.rows, x_d.data(), y_d.data(), xhat_d.data(), rstd_d.data());
    // Both backward passes start from the same saved values (as float).
    const std::vector<float> xhat = to_float(xhat_d), rstd = to_float(rstd_d);
    std::vector<double> grads_d = to_double(grads0), grad_x_d(x.size());
    layer.backward(params_d.data(), grads_d.data(), c.rows, to_double(xhat).data(),
                   to_double(rstd).data(), to_double(grad_y).data(), grad_x_d.data());

    const DeviceArray<float> device_params(params), device_x(x), device_xhat_in(xhat),
        device_rstd_in(rstd), device_grad_y(grad_y);
    DeviceArray<float> device_y(x.size()), device_xhat(x.size()), device_rstd(c.rows),
        device_grad_x(x.size()), device_grads(grads0);
    const float* weight = device_params.data();
    const float* bias = device_params.data() + c.dim;
    nn::cuda::layer_norm_forward(context(), c.rows, c.dim, c.eps, weight, bias, device_x.data(),
                                 device_y.data(), device_xhat.data(), device_rstd.data());
    nn::cuda::layer_norm_backward(context(), c.rows, c.dim, weight, device_xhat_in.data(),
                                  device_rstd_in.data(), device_grad_y.data(), device_grad_x.data(),
                                  device_grads.data(), device_grads.data() + c.dim);
    device_synchronize();
    const double row_bound = sum_bound(c.dim);
    EXPECT_LE(normwise_relative_error(device_y.to_host(), y_d), row_bound) << "y";
    EXPECT_LE(normwise_relative_error(device_xhat.to_host(), xhat_d), row_bound) << "xhat";
    EXPECT_LE(normwise_relative_error(device_rstd.to_host(), rstd_d), row_bound) << "rstd";
    // grad_x = rstd (g - mean(g) - ...) cancels to 0 where dim is 1: measured against the size
    // of the terms, rstd |g|, since nvcc contracts g - mean(g) into an FMA that leaves the
    // rounding of g (an H200 gave 5e-8 where the exact value is 0).
    double term_scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      term_scale = std::max(term_scale, std::abs(rstd_d[i / size_t(c.dim)] * grad_y[i] *
                                                 params_d[i % size_t(c.dim)]));
    }
    EXPECT_LE(max_abs_difference(device_grad_x.to_host(), grad_x_d), row_bound * term_scale)
        << "grad_x";
    EXPECT_LE(normwise_relative_error(device_grads.to_host(), grads_d), sum_bound(double(c.rows)))
        << "grad_weight and grad_bias";
  }
}

// ---- Convolution ----

std::string describe(const nn::ConvShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.in_channels) + "x" +
         std::to_string(s.in_height) + "x" + std::to_string(s.in_width) + " -> " +
         std::to_string(s.out_channels) + ", kernel " + std::to_string(s.kernel) + " stride " +
         std::to_string(s.stride) + " reflect " + std::to_string(s.pad);
}

nn::ConvShape reflected(nn::ConvShape s, int pad) {
  s.pad = pad;
  return s;
}

nn::ConvShape upsampled(nn::ConvShape s) {
  s.upsample = true;
  return s;
}

TEST_F(CudaLayers, Conv2dMatchesCpu) {
  // {batch, in_channels, out_channels, in_height, in_width, kernel, stride}, then the reflect
  // padding. IBRNet's ResUNet: the 7x7 stride-2 stem, 3x3 convolutions in and between stages, the
  // 1x1 shortcut, and a 3x3 on the deepest 2x3 maps; then unpadded odd shapes, a stride that
  // leaves the last row and column uncovered (their input gradient gets nothing), a kernel as
  // large as the map; the decoder's upsampling convolutions, padded and not.
  const nn::ConvShape shapes[] = {
      reflected({4, 3, 64, 100, 80, 7, 2}, 3),
      reflected({2, 64, 64, 25, 20, 3, 1}, 1),
      reflected({2, 64, 128, 25, 20, 3, 2}, 1),
      {3, 128, 64, 13, 11, 1, 2},
      reflected({2, 32, 32, 49, 37, 3, 1}, 1),
      reflected({3, 16, 8, 2, 3, 3, 1}, 1),
      {2, 32, 32, 51, 39, 3, 1},
      {1, 5, 7, 8, 7, 3, 2},
      {1, 1, 1, 1, 1, 1, 1},
      {2, 3, 5, 11, 13, 5, 3},
      {1, 2, 3, 4, 4, 4, 1},
      upsampled(reflected({2, 32, 16, 26, 20, 3, 1}, 1)),
      upsampled({2, 6, 5, 10, 14, 3, 1}),
  };
  struct Setting {
    nn::cuda::ConvSearch search;
    bool deterministic;
  };
  const Setting settings[] = {{nn::cuda::ConvSearch::kHeuristic, true},
                              {nn::cuda::ConvSearch::kHeuristic, false},
                              {nn::cuda::ConvSearch::kBenchmark, true}};
  uint64_t seed = 900;
  for (const nn::ConvShape& s : shapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(describe(s) + (with_bias ? " with bias" : " without bias"));
      const size_t in_count = s.input_size();
      const size_t out_count = size_t(s.batch) * s.out_channels * s.out_height() * s.out_width();
      const int fan_in = s.in_channels * s.kernel * s.kernel;
      const size_t weight_count = size_t(s.out_channels) * fan_in;
      const double bound_w = 1.0 / std::sqrt(double(fan_in));
      const std::vector<float> x = random_floats(in_count, -1, 1, ++seed);
      const std::vector<float> weight = random_floats(weight_count, -bound_w, bound_w, ++seed);
      const std::vector<float> bias = random_floats(size_t(s.out_channels), -0.5, 0.5, ++seed);
      const std::vector<float> grad_y = random_floats(out_count, -1, 1, ++seed);
      const std::vector<float> grad_x0 = random_floats(in_count, -1, 1, ++seed);
      const std::vector<float> grad_weight0 = random_floats(weight_count, -1, 1, ++seed);
      const std::vector<float> grad_bias0 = random_floats(size_t(s.out_channels), -1, 1, ++seed);

      // Every gradient accumulates.
      std::vector<float> y(out_count), grad_x = grad_x0, grad_weight = grad_weight0,
                                       grad_bias = grad_bias0;
      nn::conv2d_forward(s, x.data(), weight.data(), with_bias ? bias.data() : nullptr, y.data());
      nn::conv2d_backward(s, x.data(), weight.data(), grad_y.data(),
                          nn::ConvGradients{grad_x.data(), grad_weight.data(),
                                            with_bias ? grad_bias.data() : nullptr});
      // The input gradient written over a buffer's contents instead (overwrite_x).
      std::vector<float> grad_x_written(in_count, 7.0f);
      nn::conv2d_backward(s, nullptr, weight.data(), grad_y.data(),
                          nn::ConvGradients{grad_x_written.data(), nullptr, nullptr, true});

      // Products summed per output: forward fan_in (and the upsampling's 4 taps); input gradient
      // at most out_channels ceil(k/stride)^2, each up to 4 times where the padding folds back
      // and 16 more where the upsampling's taps gather, and the value it adds to; weight and bias
      // gradients batch x output plane.
      const int taps = (s.kernel + s.stride - 1) / s.stride;
      const double data_terms =
          double(s.out_channels) * taps * taps * (s.pad > 0 ? 4 : 1) * (s.upsample ? 16 : 1) + 1;
      const double weight_terms = double(s.batch) * s.out_height() * s.out_width();

      const DeviceArray<float> device_x(x), device_weight(weight), device_bias(bias),
          device_grad_y(grad_y);
      for (const Setting& setting : settings) {
        SCOPED_TRACE(std::string(setting.search == nn::cuda::ConvSearch::kHeuristic ? "heuristic"
                                                                                    : "benchmark") +
                     (setting.deterministic ? ", deterministic" : ""));
        context().set_conv_search(setting.search);
        context().set_deterministic(setting.deterministic);
        DeviceArray<float> device_y(std::vector<float>(out_count, 7.0f));
        DeviceArray<float> device_grad_x(grad_x0);
        DeviceArray<float> device_grad_weight(grad_weight0), device_grad_bias(grad_bias0);
        nn::cuda::conv2d_forward(context(), s, device_x.data(), device_weight.data(),
                                 with_bias ? device_bias.data() : nullptr, device_y.data());
        nn::cuda::conv2d_backward(context(), s, device_x.data(), device_weight.data(),
                                  device_grad_y.data(),
                                  nn::ConvGradients{device_grad_x.data(), device_grad_weight.data(),
                                                    with_bias ? device_grad_bias.data() : nullptr});
        DeviceArray<float> device_grad_x_written(std::vector<float>(in_count, 7.0f));
        nn::cuda::conv2d_backward(
            context(), s, nullptr, device_weight.data(), device_grad_y.data(),
            nn::ConvGradients{device_grad_x_written.data(), nullptr, nullptr, true});
        device_synchronize();
        EXPECT_LE(normwise_relative_error(device_grad_x_written.to_host(), grad_x_written),
                  sum_bound(data_terms))
            << "grad_x written";
        EXPECT_LE(normwise_relative_error(device_y.to_host(), y),
                  sum_bound(fan_in * (s.upsample ? 4 : 1)))
            << "y";
        EXPECT_LE(normwise_relative_error(device_grad_x.to_host(), grad_x), sum_bound(data_terms))
            << "grad_x";
        EXPECT_LE(normwise_relative_error(device_grad_weight.to_host(), grad_weight),
                  sum_bound(weight_terms))
            << "grad_weight";
        EXPECT_LE(normwise_relative_error(device_grad_bias.to_host(), grad_bias),
                  sum_bound(weight_terms))
            << "grad_bias";
      }
    }
  }
}

// ---- Instance norm ----

TEST_F(CudaLayers, InstanceNormMatchesCpu) {
  // {batch, channels, plane size}: the stem's planes, a mid-network stage, the encoder's deepest
  // 2x3 planes, planes of one value, one large plane; each block size of the kernels.
  const nn::InstanceNormShape shapes[] = {
      {4, 64, 53 * 43}, {8, 128, 25 * 19}, {10, 512, 6}, {2, 3, 1}, {1, 1, 70001}, {3, 5, 257},
  };
  uint64_t seed = 1300;
  for (const nn::InstanceNormShape& s : shapes) {
    for (Activation activation : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
      for (bool with_residual : {false, true}) {
        SCOPED_TRACE("batch " + std::to_string(s.batch) + " channels " +
                     std::to_string(s.channels) + " plane " + std::to_string(s.plane_size) + " " +
                     name_of(activation) + (with_residual ? " with residual" : ""));
        const size_t count = size_t(s.batch) * s.channels * s.plane_size;
        const std::vector<float> x = random_floats(count, -1, 3, ++seed);
        const std::vector<float> gamma = random_floats(size_t(s.channels), 0.5, 1.5, ++seed);
        const std::vector<float> beta = random_floats(size_t(s.channels), -0.5, 0.5, ++seed);
        const std::vector<float> residual = random_floats(count, -1, 1, ++seed);
        const std::vector<float> grad_out = random_floats(count, -1, 1, ++seed);
        const std::vector<float> grad_gamma0 = random_floats(size_t(s.channels), -1, 1, ++seed);
        const std::vector<float> grad_beta0 = random_floats(size_t(s.channels), -1, 1, ++seed);

        std::vector<float> out(count), grad = grad_out, grad_gamma = grad_gamma0,
                                       grad_beta = grad_beta0;
        nn::instance_norm_forward(s, x.data(), gamma.data(), beta.data(),
                                  with_residual ? residual.data() : nullptr, activation, out.data(),
                                  nullptr);
        nn::instance_norm_backward(s, x.data(), gamma.data(), nullptr, activation, out.data(),
                                   grad.data(), nullptr, grad_gamma.data(), grad_beta.data());

        const DeviceArray<float> device_x(x), device_gamma(gamma), device_beta(beta),
            device_residual(residual), device_out_cpu(out);
        DeviceArray<float> device_out(count), device_grad(grad_out), device_grad_gamma(grad_gamma0),
            device_grad_beta(grad_beta0);
        nn::cuda::instance_norm_forward(
            context(), s, device_x.data(), device_gamma.data(), device_beta.data(),
            with_residual ? device_residual.data() : nullptr, activation, device_out.data());
        // The backward from the CPU's output, so both see the same slopes.
        nn::cuda::activation_backward(activation, count, device_out_cpu.data(), device_grad.data(),
                                      context().stream());
        nn::cuda::instance_norm_backward(context(), s, device_x.data(), device_gamma.data(),
                                         device_grad.data(), device_grad_gamma.data(),
                                         device_grad_beta.data());
        device_synchronize();
        EXPECT_LE(normwise_relative_error(device_out.to_host(), out), 1e-6) << "out";
        EXPECT_LE(normwise_relative_error(device_grad.to_host(), grad), 1e-6) << "grad_x";
        EXPECT_LE(normwise_relative_error(device_grad_gamma.to_host(), grad_gamma), 1e-6)
            << "grad_gamma";
        EXPECT_LE(normwise_relative_error(device_grad_beta.to_host(), grad_beta), 1e-6)
            << "grad_beta";
      }
    }
  }
}

// ---- Reflect padding and upsampling ----

TEST_F(CudaLayers, ReflectPadMatchesCpu) {
  struct Case {
    int planes, height, width, pad;
  };
  // 3x3 and 7x7 convolutions' padding on IBRNet's maps; pad = size - 1; no padding; 1x1 maps.
  const Case cases[] = {{640, 100, 75, 1}, {12, 212, 160, 3}, {7, 5, 4, 1},
                        {2, 3, 3, 2},      {5, 8, 9, 3},      {3, 1, 1, 0}};
  uint64_t seed = 1700;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.planes) + " planes " + std::to_string(c.height) + "x" +
                 std::to_string(c.width) + " pad " + std::to_string(c.pad));
    const size_t count = size_t(c.planes) * c.height * c.width;
    const size_t padded_count = size_t(c.planes) * (c.height + 2 * c.pad) * (c.width + 2 * c.pad);
    const std::vector<float> x = random_floats(count, -1, 1, ++seed);
    const std::vector<float> grad_padded = random_floats(padded_count, -1, 1, ++seed);
    const std::vector<float> grad_x0 = random_floats(count, -1, 1, ++seed);
    std::vector<float> padded(padded_count), grad_x = grad_x0;
    nn::reflect_pad_forward(c.planes, c.height, c.width, c.pad, x.data(), padded.data());
    nn::reflect_pad_backward(c.planes, c.height, c.width, c.pad, grad_padded.data(), grad_x.data());

    const DeviceArray<float> device_x(x), device_grad_padded(grad_padded);
    DeviceArray<float> device_padded(padded_count), device_grad_x(grad_x0);
    nn::cuda::reflect_pad_forward(c.planes, c.height, c.width, c.pad, device_x.data(),
                                  device_padded.data(), nullptr);
    nn::cuda::reflect_pad_backward(c.planes, c.height, c.width, c.pad, device_grad_padded.data(),
                                   device_grad_x.data(), nullptr);
    device_synchronize();
    EXPECT_EQ(device_padded.to_host(), padded) << "padded";
    EXPECT_EQ(normwise_relative_error(device_grad_x.to_host(), grad_x), 0.0) << "grad_x";
  }
}

TEST_F(CudaLayers, Upsample2xMatchesCpu) {
  struct Case {
    int planes, height, width;
  };
  // The decoder's maps; 1-wide and 1-high axes (a scale of 0); small odd sizes.
  const Case cases[] = {{256, 25, 19}, {64, 53, 40}, {3, 1, 1},  {2, 1, 5},
                        {5, 2, 3},     {7, 13, 8},   {1, 100, 2}};
  uint64_t seed = 2100;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.planes) + " planes " + std::to_string(c.height) + "x" +
                 std::to_string(c.width));
    const size_t count = size_t(c.planes) * c.height * c.width;
    const std::vector<float> x = random_floats(count, -1, 1, ++seed);
    const std::vector<float> grad_y = random_floats(4 * count, -1, 1, ++seed);
    std::vector<float> y(4 * count), grad_x(count);
    nn::upsample2x_forward(c.planes, c.height, c.width, x.data(), y.data());
    nn::upsample2x_backward(c.planes, c.height, c.width, grad_y.data(), grad_x.data());

    const DeviceArray<float> device_x(x), device_grad_y(grad_y);
    DeviceArray<float> device_y(4 * count), device_grad_x(std::vector<float>(count, 7.0f));
    nn::cuda::upsample2x_forward(c.planes, c.height, c.width, device_x.data(), device_y.data(),
                                 nullptr);
    nn::cuda::upsample2x_backward(c.planes, c.height, c.width, device_grad_y.data(),
                                  device_grad_x.data(), nullptr);
    device_synchronize();
    EXPECT_EQ(normwise_relative_error(device_y.to_host(), y), 0.0) << "y";
    EXPECT_EQ(normwise_relative_error(device_grad_x.to_host(), grad_x), 0.0) << "grad_x";
  }
}

// ---- Bad shapes are caller errors, reported before any launch ----

TEST_F(CudaLayers, BadShapesAreRejected) {
  EXPECT_THROW(nn::cuda::linear_forward(context(), {10, 0, 4}, nullptr, nullptr, nullptr,
                                        Activation::kNone, nullptr),
               InvalidArgument);
  EXPECT_THROW(nn::cuda::linear_forward(context(), {10, 8, 4, 5}, nullptr, nullptr, nullptr,
                                        Activation::kNone, nullptr),
               InvalidArgument);
  const nn::ConvShape too_small{1, 1, 1, 2, 2, 3, 1};
  EXPECT_THROW(nn::cuda::conv2d_forward(context(), too_small, nullptr, nullptr, nullptr, nullptr),
               InvalidArgument);
  EXPECT_THROW(nn::cuda::reflect_pad_forward(1, 3, 3, 3, nullptr, nullptr, nullptr),
               InvalidArgument);
  EXPECT_THROW(nn::cuda::layer_norm_forward(context(), 4, 0, 1e-5, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, nullptr),
               InvalidArgument);
  EXPECT_THROW(nn::cuda::instance_norm_forward(context(), {1, 0, 4}, nullptr, nullptr, nullptr,
                                               nullptr, Activation::kNone, nullptr),
               InvalidArgument);
  // Nothing was launched on the null pointers.
  EXPECT_NO_THROW(device_synchronize());
}

}  // namespace
}  // namespace mvibr

#else

TEST(GpuNnLayers, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
