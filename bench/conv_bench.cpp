// The small feature network's convolutions (10 source views at 400x300, the layers of
// configs/synthetic_bench.txt) in mvibr's conv2d_* against oneDNN called on the callers' plain
// NCHW/OIHW layouts, side by side in one run. Plain layouts leave oneDNN its im2col + sgemm
// ("gemm:jit"); mvibr's conv2d asks for the channel-blocked layouts of its direct kernels and
// reorders around them, and this is where that choice is measured. Also the pose backbone's
// convolutions above 1x1 (configs/pose_synthetic.txt: 16 images of 128x128) with fp32 operands
// (Winograd as the config asks) against bf16 operands (Operands), reorders counted.
// flops_per_second counts 2 x batch x out_channels x out_pixels x in_channels x kernel^2 per pass.
//   conv_bench [--benchmark_* flags]
#include <benchmark/benchmark.h>
#include <dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "mvibr/nn/conv_layers.h"

namespace mvibr::nn {
namespace {

enum class Pass { kForward, kBackwardData, kBackwardWeights };

// in_channels, out_channels, in_height, in_width, kernel, stride; batch 10.
const std::vector<ConvShape> kShapes = {
    {10, 3, 16, 306, 406, 7, 2}, {10, 16, 16, 152, 202, 3, 2}, {10, 16, 16, 150, 200, 1, 2},
    {10, 16, 16, 77, 102, 3, 1}, {10, 16, 32, 77, 102, 3, 2},  {10, 16, 32, 75, 100, 1, 2},
    {10, 32, 32, 40, 52, 3, 1},  {10, 32, 64, 40, 52, 3, 2},   {10, 32, 64, 38, 50, 1, 2},
    {10, 64, 64, 21, 27, 3, 1},  {10, 64, 32, 40, 52, 3, 1},   {10, 32, 64, 78, 102, 3, 1},
    {10, 32, 16, 78, 102, 3, 1}, {10, 64, 64, 76, 100, 1, 1},
};

// in_channels, out_channels, in_height (= in_width), kernel, stride: the padded inputs of the
// small ResUNet's 7x7 and 3x3 layers at 128x128 with 33 output channels; batch 16.
const std::vector<ConvShape> kPoseShapes = {
    {16, 3, 16, 134, 134, 7, 2}, {16, 16, 16, 66, 66, 3, 2}, {16, 16, 16, 34, 34, 3, 1},
    {16, 16, 32, 34, 34, 3, 2},  {16, 32, 32, 18, 18, 3, 1}, {16, 32, 64, 18, 18, 3, 2},
    {16, 64, 64, 10, 10, 3, 1},  {16, 64, 32, 18, 18, 3, 1}, {16, 32, 16, 34, 34, 3, 1},
    {16, 32, 33, 34, 34, 3, 1},
};

struct Tensors {
  std::vector<float> x, weight, y, grad_y, grad_x, grad_weight;
  explicit Tensors(const ConvShape& s)
      : x(size_t(s.batch) * s.in_channels * s.in_height * s.in_width, 0.5f),
        weight(size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel, 0.01f),
        y(size_t(s.batch) * s.out_channels * s.out_height() * s.out_width()),
        grad_y(y.size(), 0.25f),
        grad_x(x.size()),
        grad_weight(weight.size()) {}
};

double flops(const ConvShape& s) {
  return 2.0 * s.batch * s.out_channels * s.out_height() * s.out_width() * s.in_channels *
         s.kernel * s.kernel;
}

void run_mvibr(const ConvShape& s, Pass pass, Tensors& t) {
  switch (pass) {
    case Pass::kForward:
      conv2d_forward(s, t.x.data(), t.weight.data(), nullptr, t.y.data());
      break;
    case Pass::kBackwardData:
      conv2d_backward(s, nullptr, t.weight.data(), t.grad_y.data(),
                      ConvGradients{t.grad_x.data(), nullptr, nullptr, true});
      break;
    case Pass::kBackwardWeights:
      conv2d_backward(s, t.x.data(), nullptr, t.grad_y.data(),
                      ConvGradients{nullptr, t.grad_weight.data(), nullptr});
      break;
  }
}

// The baseline: the same pass through oneDNN on plain layouts, primitives built once.
class PlainOneDnn {
 public:
  PlainOneDnn(const ConvShape& s, Pass pass) : pass_(pass) {
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    src_ = memory::desc({s.batch, s.in_channels, s.in_height, s.in_width}, f32,
                        memory::format_tag::nchw);
    weights_ = memory::desc({s.out_channels, s.in_channels, s.kernel, s.kernel}, f32,
                            memory::format_tag::oihw);
    dst_ = memory::desc({s.batch, s.out_channels, s.out_height(), s.out_width()}, f32,
                        memory::format_tag::nchw);
    const memory::dims strides{s.stride, s.stride}, pad{0, 0};
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::primitive_desc forward(
        {dnnl::prop_kind::forward_training, algorithm, src_, weights_, dst_, strides, pad, pad},
        engine_);
    if (pass == Pass::kForward) {
      primitive_ = dnnl::convolution_forward(forward);
    } else if (pass == Pass::kBackwardData) {
      primitive_ = dnnl::convolution_backward_data(
          {{algorithm, src_, weights_, dst_, strides, pad, pad}, engine_, forward});
    } else {
      primitive_ = dnnl::convolution_backward_weights(
          {{algorithm, src_, weights_, dst_, strides, pad, pad}, engine_, forward});
    }
  }

  void run(Tensors& t) {
    auto wrap = [&](const dnnl::memory::desc& d, std::vector<float>& v) {
      return dnnl::memory(d, engine_, v.data());
    };
    std::unordered_map<int, dnnl::memory> arguments;
    if (pass_ == Pass::kForward) {
      arguments = {{DNNL_ARG_SRC, wrap(src_, t.x)},
                   {DNNL_ARG_WEIGHTS, wrap(weights_, t.weight)},
                   {DNNL_ARG_DST, wrap(dst_, t.y)}};
    } else if (pass_ == Pass::kBackwardData) {
      arguments = {{DNNL_ARG_DIFF_SRC, wrap(src_, t.grad_x)},
                   {DNNL_ARG_WEIGHTS, wrap(weights_, t.weight)},
                   {DNNL_ARG_DIFF_DST, wrap(dst_, t.grad_y)}};
    } else {
      arguments = {{DNNL_ARG_SRC, wrap(src_, t.x)},
                   {DNNL_ARG_DIFF_WEIGHTS, wrap(weights_, t.grad_weight)},
                   {DNNL_ARG_DIFF_DST, wrap(dst_, t.grad_y)}};
    }
    primitive_.execute(stream_, arguments);
    stream_.wait();
  }

 private:
  Pass pass_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::memory::desc src_, weights_, dst_;
  dnnl::primitive primitive_;
};

std::string shape_name(const ConvShape& s) {
  return "ic" + std::to_string(s.in_channels) + "_oc" + std::to_string(s.out_channels) + "_" +
         std::to_string(s.in_height) + "x" + std::to_string(s.in_width) + "_k" +
         std::to_string(s.kernel) + "s" + std::to_string(s.stride);
}

const std::pair<Pass, const char*> kPasses[] = {{Pass::kForward, "forward"},
                                                {Pass::kBackwardData, "backward_data"},
                                                {Pass::kBackwardWeights, "backward_weights"}};

void count_flops(benchmark::State& state, const ConvShape& s) {
  state.counters["flops_per_second"] =
      benchmark::Counter(flops(s), benchmark::Counter::kIsIterationInvariantRate);
}

void register_mvibr(const std::string& name, const ConvShape& s, Pass pass) {
  benchmark::RegisterBenchmark(name.c_str(), [s, pass](benchmark::State& state) {
    Tensors t(s);
    run_mvibr(s, pass, t);  // primitives built, pages touched
    for (auto _ : state) run_mvibr(s, pass, t);
    count_flops(state, s);
  })->Unit(benchmark::kMillisecond);
}

void register_all() {
  for (const ConvShape& s : kShapes) {
    for (const auto& [pass, pass_name] : kPasses) {
      // The first layer's input is the image: its backward data never runs.
      if (pass == Pass::kBackwardData && s.in_channels == 3) continue;
      const std::string suffix = std::string(pass_name) + "/" + shape_name(s);
      register_mvibr("BM_mvibr_" + suffix, s, pass);
      benchmark::RegisterBenchmark(("BM_plain_onednn_" + suffix).c_str(),
                                   [s, pass = pass](benchmark::State& state) {
                                     Tensors t(s);
                                     PlainOneDnn plain(s, pass);
                                     plain.run(t);
                                     for (auto _ : state) plain.run(t);
                                     count_flops(state, s);
                                   })
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (ConvShape s : kPoseShapes) {
    for (const auto& [pass, pass_name] : kPasses) {
      if (pass == Pass::kBackwardData && s.in_channels == 3) continue;
      const std::string suffix = std::string(pass_name) + "/" + shape_name(s);
      s.algorithm = ConvAlgorithm::kWinograd;
      s.layout = MapLayout::kChannelsLast;  // as the pose backbone runs them
      s.operands = Operands::kFp32;
      register_mvibr("BM_pose_fp32_" + suffix, s, pass);
      s.operands = Operands::kBf16;
      register_mvibr("BM_pose_bf16_" + suffix, s, pass);
    }
  }
}

}  // namespace
}  // namespace mvibr::nn

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mvibr::nn::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
