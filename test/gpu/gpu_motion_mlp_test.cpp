// DynIBaR's motion network and its Fourier features on the GPU (nn/cuda_motion_mlp.h) against the
// CPU ones (nn/motion_mlp.h, nn/periodic_embed.h) on the same random problems: the published
// size, two skips with sf_mag_div 2.5, and no skip at all; coefficients, the input's gradient and
// every parameter's gradient, with and without the input's gradient. Plain C++ (device memory
// through core/device.h), so it builds in every build: without the CUDA backend it is one skipped
// test, and without a device every test skips (the emulated device always has one).
//
// Bounds, normwise (max |gpu - reference| / max |reference|) per output and per parameter:
// - Against the CPU network in double, the oracle (motion_mlp_test holds it to 1e-10 of
//   PyTorch's float64): 1e-5, the bound the CPU network in float meets against the same oracle
//   (motion_mlp_test), for the same reasons: fp32 angles up to 34 in the embedding and fp32 sums
//   in the layers, which cuBLAS orders otherwise.
// - Against the CPU network in float: the sum of the two backends' bounds, 2e-5.
// - The embedding's forward: the device's cosf and sinf against glibc's, within 2 ulp each;
//   1e-6 normwise. Its backward: the same float operations in the same order (the kernel is
//   compiled without contraction), so the same bits from the same inputs.
// - Repeated calls, and the backward without the input's gradient: bit for bit (no atomics).
#include <gtest/gtest.h>

#if MVIBR_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda_fixture.h"
#include "mvibr/core/device.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/cuda_motion_mlp.h"
#include "mvibr/nn/motion_mlp.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/nn/periodic_embed.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

using nn::FrequencySpacing;
using nn::MotionMlpOptions;

std::vector<float> random_floats(size_t count, double lo, double hi, uint64_t seed) {
  return synthetic::cast_values<float>(synthetic::random_values(count, lo, hi, seed));
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// The CPU network with nn.Linear's defaults and a non-zero head (so that gradients reach every
// layer), points within a few units with t in [0, 1), and the output's gradient.
struct Problem {
  nn::ParameterSet set;
  std::unique_ptr<nn::MotionMlp> net;
  size_t n = 0;
  std::vector<float> params, xyzt, grad_coefficients;
};

std::unique_ptr<Problem> make_problem(const MotionMlpOptions& options, size_t n, uint64_t seed) {
  auto p = std::make_unique<Problem>();
  p->n = n;
  p->set.add("before.weight", {5}, nn::ParameterGroup::kFeature);
  p->net = std::make_unique<nn::MotionMlp>(p->set, "motion_mlp.", options);
  nn::Initializer init(seed);
  p->net->initialize(init);
  const auto begin = p->set.values().begin() + long(p->net->parameter_offset());
  p->params.assign(begin, begin + long(p->net->parameter_count()));
  const nn::Linear& head = p->net->head();
  const double bound = 1 / std::sqrt(double(head.in()));
  const std::vector<float> w =
      random_floats(size_t(head.out()) * head.in() + head.out(), -bound, bound, seed + 1);
  std::copy(w.begin(), w.end(), p->params.begin() + long(head.weight_offset()));
  p->xyzt = random_floats(n * size_t(options.inputs), -2, 2, seed + 2);
  const std::vector<float> t = random_floats(n, 0, 1, seed + 3);
  for (size_t i = 0; i < n; ++i) p->xyzt[(i + 1) * size_t(options.inputs) - 1] = t[i];
  p->grad_coefficients = random_floats(n * size_t(p->net->outputs()), -1, 1, seed + 4);
  return p;
}

struct Outputs {
  std::vector<double> coefficients, grad_xyzt, grads;
};

template <typename T>
Outputs run_cpu(const Problem& p) {
  const std::vector<T> params(p.params.begin(), p.params.end()), xyzt(p.xyzt.begin(), p.xyzt.end()),
      grad_out(p.grad_coefficients.begin(), p.grad_coefficients.end());
  std::vector<T> saved(p.net->saved_size(p.n)), scratch(p.net->scratch_size(p.n)),
      out(p.n * size_t(p.net->outputs())), grads(params.size(), T(0)), grad_in(xyzt.size());
  p.net->forward(params.data(), p.n, xyzt.data(), saved.data(), out.data());
  p.net->backward(params.data(), grads.data(), p.n, saved.data(), grad_out.data(), grad_in.data(),
                  scratch.data());
  return {to_double(out), to_double(grad_in), to_double(grads)};
}

MotionMlpOptions two_skips() {
  MotionMlpOptions o;
  o.basis = 3;
  o.depth = 5;
  o.width = 24;
  o.frequencies = 5;
  o.skips = {0, 2};
  o.sf_mag_div = 2.5;
  return o;
}

MotionMlpOptions no_skip() {
  MotionMlpOptions o;
  o.basis = 2;
  o.depth = 3;
  o.width = 40;
  o.inputs = 3;
  o.frequencies = 7;
  o.skips = {};
  return o;
}

class CudaMotionMlp : public testing::CudaContextTest {
 protected:
  // Forward and backward on the device from zero gradients; grad_xyzt only when `want_input`.
  Outputs run_gpu(const Problem& p, bool want_input = true) {
    const nn::cuda::MotionMlp gpu(*p.net);
    const DeviceArray<float> params(p.params), xyzt(p.xyzt), grad_out(p.grad_coefficients);
    DeviceArray<float> saved(std::max<size_t>(1, gpu.saved_size(p.n))),
        scratch(std::max<size_t>(1, gpu.scratch_size(p.n))), out(p.n * size_t(gpu.outputs())),
        grads(p.params.size()), grad_in(p.xyzt.size());
    grads.zero();
    gpu.forward(context(), params.data(), p.n, xyzt.data(), saved.data(), out.data());
    gpu.backward(context(), params.data(), grads.data(), p.n, saved.data(), grad_out.data(),
                 want_input ? grad_in.data() : nullptr, scratch.data());
    context().synchronize();
    return {to_double(out.to_host()),
            want_input ? to_double(grad_in.to_host()) : std::vector<double>{},
            to_double(grads.to_host())};
  }

  // Every output and gradient within `bound` of the reference; prints and returns the worst.
  static double compare(const Problem& p, const Outputs& gpu, const Outputs& reference,
                        double bound, const std::string& trace) {
    double worst = normwise_relative_error(gpu.coefficients, reference.coefficients);
    EXPECT_LE(worst, bound) << trace << ": coefficients";
    const double input = normwise_relative_error(gpu.grad_xyzt, reference.grad_xyzt);
    EXPECT_LE(input, bound) << trace << ": grad_xyzt";
    worst = std::max(worst, input);
    for (const nn::ParameterInfo& info : p.set.infos()) {
      if (info.offset < p.net->parameter_offset()) continue;
      const long begin = long(info.offset - p.net->parameter_offset());
      const std::vector<double> ours(gpu.grads.begin() + begin,
                                     gpu.grads.begin() + begin + long(info.size));
      const std::vector<double> expected(reference.grads.begin() + begin,
                                         reference.grads.begin() + begin + long(info.size));
      const double e = normwise_relative_error(ours, expected);
      EXPECT_LE(e, bound) << trace << ": " << info.name;
      worst = std::max(worst, e);
    }
    return worst;
  }
};

TEST_F(CudaMotionMlp, PeriodicEmbedMatchesTheCpu) {
  struct Case {
    int dim;
    FrequencySpacing spacing;
    int max_freq, count;
    size_t n;
  };
  const Case cases[] = {{4, FrequencySpacing::kLinear, 16, 16, 777},  // the motion MLP's
                        {1, FrequencySpacing::kLog, 10, 10, 300},     // DynIBaR's time embedding
                        {3, FrequencySpacing::kLog, 5, 5, 1}};
  uint64_t seed = 40;
  for (const Case& c : cases) {
    const nn::PeriodicEmbed embed(c.dim, c.spacing, c.max_freq, c.count);
    const size_t width = size_t(embed.width());
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " count " + std::to_string(c.count));
    const std::vector<float> x = random_floats(c.n * size_t(c.dim), -2, 2, ++seed);
    const std::vector<float> grad_y = random_floats(c.n * width, -1, 1, ++seed);
    const std::vector<float> grad_x0 = random_floats(x.size(), -1, 1, ++seed);
    std::vector<float> y(c.n * width), grad_x(x.size()), grad_x_added = grad_x0;
    embed.forward(c.n, x.data(), y.data());
    embed.backward(c.n, y.data(), grad_y.data(), grad_x.data());
    embed.backward(c.n, y.data(), grad_y.data(), grad_x_added.data(), true);

    const DeviceArray<float> device_x(x), device_y_cpu(y), device_grad_y(grad_y);
    DeviceArray<float> device_y(y.size()), device_grad_x(x.size()), device_grad_x_added(grad_x0);
    nn::cuda::periodic_embed_forward(embed, c.n, device_x.data(), device_y.data(),
                                     context().stream());
    // The backward from the CPU's forward output: the same inputs, so the same bits.
    nn::cuda::periodic_embed_backward(embed, c.n, device_y_cpu.data(), device_grad_y.data(),
                                      device_grad_x.data(), false, context().stream());
    nn::cuda::periodic_embed_backward(embed, c.n, device_y_cpu.data(), device_grad_y.data(),
                                      device_grad_x_added.data(), true, context().stream());
    context().synchronize();
    EXPECT_LE(normwise_relative_error(device_y.to_host(), y), 1e-6);
    EXPECT_EQ(device_grad_x.to_host(), grad_x);
    EXPECT_EQ(device_grad_x_added.to_host(), grad_x_added);
  }
}

TEST_F(CudaMotionMlp, MatchesTheCpuNetwork) {
  struct Case {
    const char* name;
    MotionMlpOptions options;
    size_t n;
  };
  const Case cases[] = {{"published", MotionMlpOptions{}, 200},
                        {"two_skips", two_skips(), 150},
                        {"no_skip", no_skip(), 61}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    const auto p = make_problem(c.options, c.n, seed += 10);
    const Outputs gpu = run_gpu(*p);
    const double oracle =
        compare(*p, gpu, run_cpu<double>(*p), 1e-5, c.name + std::string(" vs double"));
    const double cpu =
        compare(*p, gpu, run_cpu<float>(*p), 2e-5, c.name + std::string(" vs float"));
    std::printf(
        "  %-9s GPU vs CPU double %.1e, vs CPU float %.1e (worst over outputs and "
        "gradients)\n",
        c.name, oracle, cpu);
  }
}

TEST_F(CudaMotionMlp, RepeatsBitForBitAndSkipsTheInputGradientWhenNotAsked) {
  for (const MotionMlpOptions& options : {MotionMlpOptions{}, two_skips()}) {
    const auto p = make_problem(options, 33, 90);
    const Outputs first = run_gpu(*p), second = run_gpu(*p), without = run_gpu(*p, false);
    EXPECT_EQ(first.coefficients, second.coefficients);
    EXPECT_EQ(first.grad_xyzt, second.grad_xyzt);
    EXPECT_EQ(first.grads, second.grads);
    EXPECT_EQ(first.coefficients, without.coefficients);
    EXPECT_EQ(first.grads, without.grads);
  }
}

TEST_F(CudaMotionMlp, NoPointsIsNoWork) {
  nn::ParameterSet set;
  const nn::MotionMlp cpu(set, "motion_mlp.", MotionMlpOptions{});
  const nn::cuda::MotionMlp gpu(cpu);
  EXPECT_EQ(gpu.saved_size(0), 0u);
  EXPECT_EQ(gpu.saved_size(10), cpu.saved_size(10));
  EXPECT_EQ(gpu.scratch_size(10), cpu.scratch_size(10));
  EXPECT_NO_THROW(gpu.forward(context(), nullptr, 0, nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(gpu.backward(context(), nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(context().synchronize());
}

}  // namespace
}  // namespace mvibr

#else

TEST(GpuMotionMlp, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
