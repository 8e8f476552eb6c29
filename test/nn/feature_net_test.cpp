// The feature network's layers and the whole ResUNet against the PyTorch float64 reference
// (test/reference/feature_net_reference.py, autograd for every gradient). Each test writes its
// cases as .npy into a temporary folder, runs the reference once over them, and compares ours
// (float32) as normwise relative errors max|ours - ref| / max|ref|: forward within 1e-5,
// gradients within 1e-4, the project's fp32 bounds. Two things make the whole network
// comparable at all: the reference follows our side of every ReLU kink (resunet_case), and the
// ibrnet preset runs on images large enough for fp32 (all_cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "planar_order.h"
#include "relu_masks.h"
#include "support/bf16_operands.h"

#include <unistd.h>

namespace mvibr::nn {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;
using Arrays = std::map<std::string, NpyArray>;

std::vector<float> floats(const NpyArray& a) {
  return std::vector<float>(a.data.begin(), a.data.end());
}

NpyArray array(const std::vector<float>& data, std::vector<size_t> shape) {
  return {std::move(shape), std::vector<double>(data.begin(), data.end())};
}

// Random values that float32 holds exactly, so that both sides read the same inputs.
NpyArray random_array(std::vector<size_t> shape, double lo, double hi, uint64_t seed) {
  size_t count = 1;
  for (size_t d : shape) count *= d;
  NpyArray a{std::move(shape), synthetic::random_values(count, lo, hi, seed)};
  for (double& v : a.data) v = double(float(v));
  return a;
}

// One case: its inputs, the options the reference reads, and how we compute its outputs.
// Outputs named grad_* get the gradient bound.
struct Case {
  nlohmann::json spec;
  Arrays inputs;
  Arrays params;  // ResUNet parameters, written under params/
  std::function<Arrays(const Arrays&)> run;
};

// The reference's NCHW values [batch, channels, height, width] laid out as `layout`, and back.
std::vector<float> laid_out(const std::vector<float>& planar, MapBatch maps, MapLayout layout) {
  std::vector<float> result(planar.size());
  maps.layout = layout;
  test::for_each_value(maps, [&](size_t i, size_t j) { result[j] = planar[i]; });
  return result;
}

std::vector<float> planar(const std::vector<float>& values, MapBatch maps, MapLayout layout) {
  std::vector<float> result(values.size());
  maps.layout = layout;
  test::for_each_value(maps, [&](size_t i, size_t j) { result[i] = values[j]; });
  return result;
}

// --- layers ----------------------------------------------------------------------------------

Case conv_case(ConvShape s, bool bias, uint64_t seed) {
  const size_t n = size_t(s.batch), ci = size_t(s.in_channels), co = size_t(s.out_channels);
  const size_t k = size_t(s.kernel);
  Case c;
  c.spec = {{"op", "conv"},
            {"stride", s.stride},
            {"pad", s.pad},
            {"bias", bias},
            {"operands", s.operands == Operands::kBf16 ? "bf16" : "fp32"},
            {"upsample", s.upsample}};
  c.inputs["x"] =
      random_array({n, ci, size_t(s.source_height()), size_t(s.source_width())}, -1, 1, seed);
  c.inputs["weight"] = random_array({co, ci, k, k}, -0.5, 0.5, seed + 1);
  if (bias) c.inputs["bias"] = random_array({co}, -0.5, 0.5, seed + 2);
  const std::vector<size_t> out_shape{n, co, size_t(s.out_height()), size_t(s.out_width())};
  c.inputs["grad_y"] = random_array(out_shape, -1, 1, seed + 3);
  c.run = [s, bias, out_shape](const Arrays& in) {
    const MapBatch input{nullptr, s.batch, s.in_channels, s.source_height(), s.source_width()};
    const MapBatch output{nullptr, s.batch, s.out_channels, s.out_height(), s.out_width()};
    const auto x = laid_out(floats(in.at("x")), input, s.layout);
    const auto weight = floats(in.at("weight"));
    const auto grad_y = laid_out(floats(in.at("grad_y")), output, s.layout);
    std::vector<float> b = bias ? floats(in.at("bias")) : std::vector<float>();
    std::vector<float> y(grad_y.size()), grad_x(x.size()), grad_weight(weight.size(), 0.0f),
        grad_bias(b.size(), 0.0f);
    // With bf16 operands the forward keeps its rounded, padded input, and the backward weights
    // read it: the same gradients as from x.
    std::vector<float> kept(conv2d_kept_input_floats(s));
    EXPECT_EQ(kept.empty(), s.operands == Operands::kFp32 || s.kernel == 1);
    float* keep = kept.empty() ? nullptr : kept.data();
    conv2d_forward(s, x.data(), weight.data(), bias ? b.data() : nullptr, y.data(), keep);
    conv2d_backward(
        s, x.data(), weight.data(), grad_y.data(),
        ConvGradients{grad_x.data(), grad_weight.data(), bias ? grad_bias.data() : nullptr}, keep);
    if (keep) {
      std::vector<float> from_x(weight.size(), 0.0f);
      conv2d_backward(s, x.data(), nullptr, grad_y.data(),
                      ConvGradients{nullptr, from_x.data(), nullptr});
      EXPECT_EQ(from_x, grad_weight) << "weight gradients from the kept input and from x";
    }
    Arrays out{{"y", array(planar(y, output, s.layout), out_shape)},
               {"grad_x", array(planar(grad_x, input, s.layout), in.at("x").shape)},
               {"grad_weight", array(grad_weight, in.at("weight").shape)}};
    if (bias) out["grad_bias"] = array(grad_bias, {b.size()});
    return out;
  };
  return c;
}

// Planar: `planes` maps. Channels last: planes = batch x channels, laid out [batch, height,
// width, channels] for our side (the reference pads and upsamples the planes).
Case reflect_pad_case(int planes, int height, int width, int pad, uint64_t seed,
                      MapLayout layout = MapLayout::kPlanar, int channels = 1) {
  const size_t p = size_t(planes), h = size_t(height), w = size_t(width);
  const std::vector<size_t> padded{p, h + 2 * size_t(pad), w + 2 * size_t(pad)};
  Case c;
  c.spec = {{"op", "reflect_pad"}, {"pad", pad}};
  c.inputs["x"] = random_array({p, h, w}, -1, 1, seed);
  c.inputs["grad_y"] = random_array(padded, -1, 1, seed + 1);
  c.run = [=](const Arrays& in) {
    const int batch = planes / channels;
    const MapBatch maps{nullptr, batch, channels, height, width};
    const MapBatch padded_maps{nullptr, batch, channels, height + 2 * pad, width + 2 * pad};
    const auto x = laid_out(floats(in.at("x")), maps, layout);
    const auto grad_y = laid_out(floats(in.at("grad_y")), padded_maps, layout);
    std::vector<float> y(grad_y.size()), grad_x(x.size(), 0.0f);
    if (layout == MapLayout::kPlanar) {
      reflect_pad_forward(planes, height, width, pad, x.data(), y.data());
      reflect_pad_backward(planes, height, width, pad, grad_y.data(), grad_x.data());
    } else {
      reflect_pad_forward_channels_last(batch, height, width, channels, pad, x.data(), y.data());
      reflect_pad_backward_channels_last(batch, height, width, channels, pad, grad_y.data(),
                                         grad_x.data());
    }
    return Arrays{{"y", array(planar(y, padded_maps, layout), padded)},
                  {"grad_x", array(planar(grad_x, maps, layout), {p, h, w})}};
  };
  return c;
}

const char* activation_name(Activation a) {
  return a == Activation::kRelu ? "relu" : a == Activation::kElu ? "elu" : "none";
}

Case instance_norm_case(int batch, int channels, int height, int width, Activation activation,
                        bool residual, uint64_t seed, MapLayout layout = MapLayout::kPlanar) {
  const std::vector<size_t> shape{size_t(batch), size_t(channels), size_t(height), size_t(width)};
  Case c;
  c.spec = {
      {"op", "instance_norm"}, {"activation", activation_name(activation)}, {"residual", residual}};
  c.inputs["x"] = random_array(shape, -2, 3, seed);
  c.inputs["gamma"] = random_array({size_t(channels)}, 0.5, 1.5, seed + 1);
  c.inputs["beta"] = random_array({size_t(channels)}, -0.5, 0.5, seed + 2);
  if (residual) c.inputs["residual"] = random_array(shape, -1, 1, seed + 3);
  c.inputs["grad_out"] = random_array(shape, -1, 1, seed + 4);
  const InstanceNormShape s{batch, channels, height * width, layout};
  c.run = [=](const Arrays& in) {
    const MapBatch maps{nullptr, batch, channels, height, width};
    const auto x = laid_out(floats(in.at("x")), maps, layout);
    const auto gamma = floats(in.at("gamma")), beta = floats(in.at("beta"));
    const std::vector<float> res =
        residual ? laid_out(floats(in.at("residual")), maps, layout) : std::vector<float>();
    std::vector<float> out(x.size());
    std::vector<float> statistics(size_t(batch * channels) * kInstanceNormStatisticsFloats);
    instance_norm_forward(s, x.data(), gamma.data(), beta.data(), residual ? res.data() : nullptr,
                          activation, out.data(), statistics.data());
    // The backward on the kept statistics, and on statistics taken again: the same doubles. And
    // x's gradient rounded to bf16 as it is made: the rounding of the fp32 one.
    const auto backward = [&](const float* kept, uint16_t* rounded) {
      std::vector<std::vector<float>> gradients{laid_out(floats(in.at("grad_out")), maps, layout),
                                                std::vector<float>(residual ? x.size() : 0, 0.0f),
                                                std::vector<float>(gamma.size(), 0.0f),
                                                std::vector<float>(beta.size(), 0.0f)};
      instance_norm_backward(s, x.data(), gamma.data(), kept, activation, out.data(),
                             gradients[0].data(), residual ? gradients[1].data() : nullptr,
                             gradients[2].data(), gradients[3].data(), rounded);
      return gradients;
    };
    const std::vector<std::vector<float>> gradients = backward(statistics.data(), nullptr);
    EXPECT_EQ(gradients, backward(nullptr, nullptr))
        << "kept statistics against statistics taken again";
    std::vector<uint16_t> rounded(x.size()), rounding(x.size());
    const std::vector<std::vector<float>> with_rounding =
        backward(statistics.data(), rounded.data());
    round_to_bf16(x.size(), gradients[0].data(), rounding.data());
    EXPECT_EQ(rounded, rounding) << "x's gradient rounded as it is made";
    EXPECT_EQ(with_rounding[1], gradients[1]);
    EXPECT_EQ(with_rounding[2], gradients[2]);
    const std::vector<float>&grad = gradients[0], &grad_residual = gradients[1],
          &grad_gamma = gradients[2], &grad_beta = gradients[3];
    Arrays result{{"out", array(planar(out, maps, layout), shape)},
                  {"grad_x", array(planar(grad, maps, layout), shape)},
                  {"grad_gamma", array(grad_gamma, {size_t(channels)})},
                  {"grad_beta", array(grad_beta, {size_t(channels)})}};
    if (residual) result["grad_residual"] = array(planar(grad_residual, maps, layout), shape);
    return result;
  };
  return c;
}

Case upsample_case(int planes, int height, int width, uint64_t seed,
                   MapLayout layout = MapLayout::kPlanar, int channels = 1) {
  const size_t p = size_t(planes), h = size_t(height), w = size_t(width);
  Case c;
  c.spec = {{"op", "upsample"}};
  c.inputs["x"] = random_array({p, h, w}, -1, 1, seed);
  c.inputs["grad_y"] = random_array({p, 2 * h, 2 * w}, -1, 1, seed + 1);
  c.run = [=](const Arrays& in) {
    const int batch = planes / channels;
    const MapBatch maps{nullptr, batch, channels, height, width};
    const MapBatch up{nullptr, batch, channels, 2 * height, 2 * width};
    const auto x = laid_out(floats(in.at("x")), maps, layout);
    const auto grad_y = laid_out(floats(in.at("grad_y")), up, layout);
    std::vector<float> y(grad_y.size()), grad_x(x.size());
    if (layout == MapLayout::kPlanar) {
      upsample2x_forward(planes, height, width, x.data(), y.data());
      upsample2x_backward(planes, height, width, grad_y.data(), grad_x.data());
    } else {
      upsample2x_forward_channels_last(batch, height, width, channels, x.data(), y.data());
      upsample2x_backward_channels_last(batch, height, width, channels, grad_y.data(),
                                        grad_x.data());
    }
    return Arrays{{"y", array(planar(y, up, layout), {p, 2 * h, 2 * w})},
                  {"grad_x", array(planar(grad_x, maps, layout), {p, h, w})}};
  };
  return c;
}

// --- the whole network -----------------------------------------------------------------------

const std::string kPrefix = "feature_net.";

// A network with PyTorch's initialisation, then the norms' weights and biases moved off 1 and 0
// so that mixing them up cannot go unnoticed. The same seed gives the same values.
ResUNet make_network(const ResUNetOptions& options, uint64_t seed, ParameterSet* set) {
  ResUNet net(options, set, kPrefix);
  Initializer initializer(seed);
  net.initialize(initializer);
  for (const ParameterInfo& info : set->infos()) {
    const bool norm = info.name.find("bn") != std::string::npos ||
                      info.name.find("downsample.1") != std::string::npos;
    if (!norm) continue;
    float* values = set->values().data() + info.offset;
    const bool weight = info.name.compare(info.name.size() - 7, 7, ".weight") == 0;
    initializer.uniform(values, info.size, weight ? 0.5f : 0.3f);
    if (weight) {
      for (size_t i = 0; i < info.size; ++i) values[i] += 1.0f;
    }
  }
  return net;
}

// Ours is computed here, before the reference runs, because the reference follows our side of
// every ReLU's kink: it gets our masks (1 where our output is positive). Where a pre-activation is
// within fp32 rounding of zero the two sides may otherwise take different branches, and a
// gradient on the other branch is no rounding error but a different gradient (a ~1e-2 error in
// that channel's parameters; it happens in about every other case of this size). The reference
// checks that our masks disagree with float64's signs only at such near-zero pre-activations.
Case resunet_case(const ResUNetOptions& options, int views, int height, int width, uint64_t seed) {
  Case c;
  c.spec = {{"op", "resunet"},
            {"prefix", kPrefix},
            {"widths", options.widths},
            {"blocks", options.blocks},
            {"decoder_widths", options.decoder_widths},
            {"coarse_out_ch", options.coarse_out_ch},
            {"fine_out_ch", options.fine_out_ch},
            {"coarse_only", options.coarse_only},
            {"shallow", options.shallow}};
  ParameterSet parameters;
  const ResUNet net = make_network(options, seed, &parameters);
  for (const ParameterInfo& info : parameters.infos()) {
    const std::vector<float> values(parameters.values().begin() + long(info.offset),
                                    parameters.values().begin() + long(info.offset + info.size));
    c.params[info.name] = array(values, std::vector<size_t>(info.shape.begin(), info.shape.end()));
  }
  const auto [hf, wf] = ResUNet::output_size(height, width, options.shallow);
  const size_t v = size_t(views), h = size_t(hf), w = size_t(wf);
  const size_t coarse_channels = size_t(options.coarse_out_ch);
  const size_t fine_channels = options.coarse_only ? 0 : size_t(options.fine_out_ch);
  c.inputs["images"] = random_array({v, size_t(height), size_t(width), 3}, 0, 1, seed + 1);
  c.inputs["grad_coarse"] = random_array({v, h, w, coarse_channels}, -1, 1, seed + 2);
  if (fine_channels > 0)
    c.inputs["grad_fine"] = random_array({v, h, w, fine_channels}, -1, 1, seed + 3);

  const auto images = floats(c.inputs.at("images"));
  std::vector<float> coarse(v * h * w * coarse_channels), fine(v * h * w * fine_channels);
  ResUNet::Workspace workspace;
  net.forward(views, height, width, images.data(), &workspace, coarse.data(), fine.data());
  for (auto& [unit, mask] : test::relu_masks(net, workspace)) c.inputs["mask_" + unit] = mask;
  const auto grad_coarse = floats(c.inputs.at("grad_coarse"));
  const std::vector<float> grad_fine =
      fine_channels > 0 ? floats(c.inputs.at("grad_fine")) : std::vector<float>();
  net.backward(&workspace, grad_coarse.data(), fine_channels > 0 ? grad_fine.data() : nullptr);

  Arrays ours{{"coarse", array(coarse, {v, h, w, coarse_channels})}};
  if (fine_channels > 0) ours["fine"] = array(fine, {v, h, w, fine_channels});
  for (const ParameterInfo& info : parameters.infos()) {
    const std::vector<float> g(parameters.grads().begin() + long(info.offset),
                               parameters.grads().begin() + long(info.offset + info.size));
    ours["grad_" + info.name] = array(g, std::vector<size_t>(info.shape.begin(), info.shape.end()));
  }
  c.run = [ours](const Arrays&) { return ours; };
  return c;
}

ResUNetOptions small_options() {
  return ResUNetOptions::preset(ResUNetPreset::kSmall);
}

// Every case, made only when a test asks for it (a ResUNet case runs our network to make it).
std::map<std::string, std::function<Case()>> all_cases() {
  std::map<std::string, std::function<Case()>> cases;
  cases["conv_7x7_stride2_bias"] = [] { return conv_case({2, 3, 5, 13, 12, 7, 2}, true, 1); };
  cases["conv_3x3_stride1"] = [] { return conv_case({2, 4, 6, 9, 8, 3, 1}, false, 2); };
  cases["conv_3x3_stride2_odd"] = [] { return conv_case({2, 5, 4, 10, 7, 3, 2}, true, 3); };
  cases["conv_1x1_stride2"] = [] { return conv_case({2, 6, 3, 9, 10, 1, 2}, false, 4); };
  // out_conv's shape: 1x1 with a bias, stride 1.
  cases["conv_1x1_bias"] = [] { return conv_case({3, 7, 5, 6, 9, 1, 1}, true, 9); };
  cases["conv_wide"] = [] { return conv_case({1, 64, 32, 6, 5, 3, 1}, false, 5); };
  // The pose backbone's widest 3x3 (33 outputs: 17 heatmaps, 16 for the confidence head).
  cases["conv_3x3_winograd"] = [] {
    return conv_case({2, 32, 33, 14, 11, 3, 1, ConvAlgorithm::kWinograd}, false, 6);
  };
  // Reflect padding (ConvShape::pad), as the ResUNet pads: the reference pads with F.pad.
  const auto reflect = [](ConvShape s, int pad) {
    s.pad = pad;
    return s;
  };
  cases["conv_3x3_reflect_1"] = [=] {
    return conv_case(reflect({2, 4, 6, 9, 8, 3, 1}, 1), false, 30);
  };
  cases["conv_3x3_stride2_odd_reflect_1"] = [=] {
    return conv_case(reflect({2, 5, 4, 10, 7, 3, 2}, 1), true, 31);
  };
  cases["conv_7x7_stride2_reflect_3_bias"] = [=] {
    return conv_case(reflect({2, 3, 5, 13, 12, 7, 2}, 3), true, 32);
  };
  cases["conv_3x3_winograd_reflect_1"] = [=] {
    return conv_case(reflect({2, 32, 33, 14, 11, 3, 1, ConvAlgorithm::kWinograd}, 1), false, 33);
  };
  cases["conv_3x3_reflect_1_on_2x2"] = [=] {
    return conv_case(reflect({3, 2, 3, 2, 2, 3, 1}, 1), false, 34);
  };
  // bf16 operands, against the reference on bf16 operands (Bf16Conv2d: the products of the
  // rounded operands summed exactly), within the fp32 bounds; the pose backbone's shapes: its stem
  // (7x7 stride 2, with a bias), a 3x3 at stride 1 (Winograd asked for; oneDNN has none in bf16)
  // and 2, and a 1x1, which stays fp32.
  const auto bf16_shape = [](ConvShape s) {
    s.operands = Operands::kBf16;
    return s;
  };
  cases["bf16_conv_7x7_stride2_bias"] = [=] {
    return conv_case(bf16_shape({2, 3, 16, 21, 19, 7, 2}), true, 20);
  };
  cases["bf16_conv_3x3_winograd"] = [=] {
    return conv_case(bf16_shape({2, 32, 33, 14, 11, 3, 1, ConvAlgorithm::kWinograd}), false, 21);
  };
  cases["bf16_conv_3x3_stride2"] = [=] {
    return conv_case(bf16_shape({2, 16, 32, 12, 13, 3, 2}), false, 22);
  };
  cases["bf16_conv_1x1_stays_fp32"] = [=] {
    return conv_case(bf16_shape({2, 33, 33, 8, 9, 1, 1}), true, 23);
  };
  // Padded, the input is rounded as it is padded (conv2d.cpp).
  cases["bf16_conv_7x7_stride2_reflect_3_bias"] = [=] {
    return conv_case(reflect(bf16_shape({2, 3, 16, 21, 19, 7, 2}), 3), true, 35);
  };
  cases["bf16_conv_3x3_reflect_1"] = [=] {
    return conv_case(reflect(bf16_shape({2, 32, 33, 14, 11, 3, 1}), 1), false, 36);
  };
  cases["reflect_pad_1"] = [] { return reflect_pad_case(3, 5, 4, 1, 6); };
  cases["reflect_pad_3"] = [] { return reflect_pad_case(2, 4, 6, 3, 7); };
  cases["reflect_pad_2x2"] = [] { return reflect_pad_case(2, 2, 2, 1, 8); };
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
    for (bool residual : {false, true}) {
      const std::string name =
          std::string("instance_norm_") + activation_name(a) + (residual ? "_residual" : "");
      cases[name] = [=] { return instance_norm_case(2, 3, 6, 5, a, residual, 9); };
    }
  }
  cases["instance_norm_two_values"] = [] {
    return instance_norm_case(2, 4, 1, 2, Activation::kElu, false, 10);
  };
  cases["upsample_4x5"] = [] { return upsample_case(3, 4, 5, 11); };
  cases["upsample_1x3"] = [] { return upsample_case(2, 1, 3, 12); };
  // Odd sizes: 29x37 pads the skips' columns, 67x69 (below) rows and columns at both levels.
  cases["resunet_small_32x40"] = [] { return resunet_case(small_options(), 2, 32, 40, 13); };
  cases["resunet_small_29x37"] = [] { return resunet_case(small_options(), 2, 29, 37, 14); };
  ResUNetOptions coarse_only = small_options();
  coarse_only.coarse_only = true;
  coarse_only.blocks = {2, 1, 3};  // identity blocks too
  cases["resunet_small_coarse_only_35x45"] = [coarse_only] {
    return resunet_case(coarse_only, 1, 35, 45, 15);
  };
  // DynIBaR's forward: conv1 → layer1 → out_conv, at the published widths (64 = 32 + 32), on
  // odd sizes; the unused layers' gradients are zero.
  ResUNetOptions shallow = ResUNetOptions::preset(ResUNetPreset::kIbrnet);
  shallow.shallow = true;
  cases["resunet_shallow_dynibar_29x37"] = [shallow] {
    return resunet_case(shallow, 2, 29, 37, 18);
  };
  // The ibrnet preset at 64x80 and 67x69, not at 32x40 or 29x37: there layer3's maps are 2x3,
  // and instance norm over 6 values amplifies fp32 rounding about twofold per block (|mean| /
  // std up to 9) through layer3's six blocks. PyTorch's own float32 is then off from its float64
  // by 6e-5 (forward) and 5e-4 (gradients), as are we: no fp32 implementation meets the bounds
  // there. From 4x5 maps on, PyTorch's float32 is within 6e-6 and 2.5e-5, and so are we.
  cases["resunet_ibrnet_64x80"] = [] {
    return resunet_case(ResUNetOptions::preset(ResUNetPreset::kIbrnet), 2, 64, 80, 16);
  };
  cases["resunet_ibrnet_67x69"] = [] {
    return resunet_case(ResUNetOptions::preset(ResUNetPreset::kIbrnet), 2, 67, 69, 17);
  };
  // Channels last (MapLayout): the same references, our side laid out NHWC.
  const auto channels_last = [](ConvShape s) {
    s.layout = MapLayout::kChannelsLast;
    return s;
  };
  cases["channels_last_conv_7x7_stride2_bias"] = [=] {
    return conv_case(channels_last({2, 3, 5, 13, 12, 7, 2}), true, 1);
  };
  cases["channels_last_conv_3x3_stride2_odd"] = [=] {
    return conv_case(channels_last({2, 5, 4, 10, 7, 3, 2}), true, 3);
  };
  cases["channels_last_conv_1x1_stride2"] = [=] {
    return conv_case(channels_last({2, 6, 3, 9, 10, 1, 2}), false, 4);
  };
  cases["channels_last_conv_1x1_bias"] = [=] {
    return conv_case(channels_last({3, 7, 5, 6, 9, 1, 1}), true, 9);
  };
  cases["channels_last_conv_3x3_winograd"] = [=] {
    return conv_case(channels_last({2, 32, 33, 14, 11, 3, 1, ConvAlgorithm::kWinograd}), false, 6);
  };
  cases["bf16_conv_channels_last_7x7_stride2_bias"] = [=] {
    return conv_case(channels_last(bf16_shape({2, 3, 16, 21, 19, 7, 2})), true, 20);
  };
  cases["bf16_conv_channels_last_3x3"] = [=] {
    return conv_case(channels_last(bf16_shape({2, 32, 33, 14, 11, 3, 1})), true, 21);
  };
  cases["bf16_conv_channels_last_1x1_stride2_stays_fp32"] = [=] {
    return conv_case(channels_last(bf16_shape({2, 16, 32, 12, 13, 1, 2})), false, 22);
  };
  cases["channels_last_conv_3x3_reflect_1"] = [=] {
    return conv_case(channels_last(reflect({2, 5, 4, 10, 7, 3, 1}, 1)), true, 37);
  };
  cases["channels_last_conv_7x7_stride2_reflect_3"] = [=] {
    return conv_case(channels_last(reflect({2, 3, 5, 13, 12, 7, 2}, 3)), false, 38);
  };
  cases["bf16_conv_channels_last_7x7_stride2_reflect_3_bias"] = [=] {
    return conv_case(channels_last(reflect(bf16_shape({2, 3, 16, 21, 19, 7, 2}), 3)), true, 39);
  };
  // Stride 2 on at most 4 channels runs as its space-to-depth (conv2d.cpp): odd kernels, odd
  // sizes, with and without padding.
  cases["bf16_conv_channels_last_3x3_stride2_on_4_channels_reflect_1"] = [=] {
    return conv_case(channels_last(reflect(bf16_shape({3, 4, 8, 11, 14, 3, 2}), 1)), true, 41);
  };
  cases["bf16_conv_channels_last_5x5_stride2_on_1_channel"] = [=] {
    return conv_case(channels_last(bf16_shape({2, 1, 5, 12, 9, 5, 2})), false, 42);
  };
  cases["bf16_conv_channels_last_3x3_stride2_reflect_1"] = [=] {
    return conv_case(channels_last(reflect(bf16_shape({2, 16, 32, 12, 13, 3, 2}), 1)), false, 40);
  };
  // Upsampling convolutions (the decoder's upconvs): x upsampled by 2, then padded, in one pass.
  const auto upsampled = [](ConvShape s) {
    s.upsample = true;
    return s;
  };
  cases["conv_3x3_upsampled_reflect_1_bias"] = [=] {
    return conv_case(upsampled(reflect({2, 4, 6, 10, 8, 3, 1}, 1)), true, 43);
  };
  cases["conv_1x1_upsampled"] = [=] {
    return conv_case(upsampled({2, 5, 3, 6, 4, 1, 1}), false, 44);
  };
  cases["channels_last_conv_3x3_upsampled_reflect_1"] = [=] {
    return conv_case(channels_last(upsampled(reflect({2, 6, 5, 8, 10, 3, 1}, 1))), true, 45);
  };
  cases["bf16_conv_channels_last_3x3_upsampled_reflect_1"] = [=] {
    return conv_case(channels_last(upsampled(reflect(bf16_shape({2, 32, 16, 8, 6, 3, 1}), 1))),
                     true, 46);
  };
  cases["bf16_conv_3x3_upsampled_reflect_1"] = [=] {
    return conv_case(upsampled(reflect(bf16_shape({2, 16, 8, 6, 10, 3, 1}), 1)), false, 47);
  };
  cases["channels_last_reflect_pad_1"] = [] {
    return reflect_pad_case(6, 5, 4, 1, 6, MapLayout::kChannelsLast, 3);
  };
  cases["channels_last_reflect_pad_3"] = [] {
    return reflect_pad_case(10, 4, 6, 3, 7, MapLayout::kChannelsLast, 5);
  };
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
    for (bool residual : {false, true}) {
      const std::string name = std::string("channels_last_instance_norm_") + activation_name(a) +
                               (residual ? "_residual" : "");
      cases[name] = [=] {
        return instance_norm_case(2, 5, 7, 6, a, residual, 9, MapLayout::kChannelsLast);
      };
    }
  }
  // 37 channels: the sums' blocks of 16 and of 4, and one channel alone.
  cases["channels_last_instance_norm_37_channels"] = [] {
    return instance_norm_case(2, 37, 5, 3, Activation::kRelu, true, 10, MapLayout::kChannelsLast);
  };
  cases["channels_last_upsample_4x5"] = [] {
    return upsample_case(6, 4, 5, 11, MapLayout::kChannelsLast, 3);
  };
  ResUNetOptions small_channels_last = small_options();
  small_channels_last.map_layout = MapLayout::kChannelsLast;
  cases["channels_last_resunet_small_29x37"] = [small_channels_last] {
    return resunet_case(small_channels_last, 2, 29, 37, 14);
  };
  ResUNetOptions coarse_only_channels_last = coarse_only;
  coarse_only_channels_last.map_layout = MapLayout::kChannelsLast;
  cases["channels_last_resunet_small_coarse_only_35x45"] = [coarse_only_channels_last] {
    return resunet_case(coarse_only_channels_last, 1, 35, 45, 15);
  };
  return cases;
}

// The cases of one test (those whose name starts with a prefix) and the reference's outputs for
// them, made on the test's first use: ctest runs every test in a process of its own.
struct ReferenceRun {
  fs::path root;
  std::map<std::string, Case> cases;
  int status = -1;
};

fs::path temporary_root() {
  return fs::temp_directory_path() / ("mvibr-feature-net-" + std::to_string(::getpid()));
}

std::map<std::string, ReferenceRun>& runs() {
  static std::map<std::string, ReferenceRun> by_prefix;
  return by_prefix;
}

const ReferenceRun& reference(const std::string& prefix) {
  auto found = runs().find(prefix);
  if (found != runs().end()) return found->second;
  ReferenceRun& r = runs()[prefix];
  r.root = temporary_root() / prefix;
  for (const auto& [name, make] : all_cases()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const Case& c = r.cases.emplace(name, make()).first->second;
    const fs::path dir = r.root / name;
    fs::create_directories(dir / "params");
    std::ofstream(dir / "case.json") << c.spec.dump();
    for (const auto& [input, value] : c.inputs) test::write_npy(dir / (input + ".npy"), value);
    for (const auto& [param, value] : c.params) {
      test::write_npy(dir / "params" / (param + ".npy"), value);
    }
  }
  const char* source = std::getenv("MVIBR_SOURCE_DIR");
  const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                             "/test/reference/feature_net_reference.py";
  r.status = std::system(("/usr/bin/python3 " + script + " " + r.root.string()).c_str());
  return r;
}

// Removes the cases after the last test unless one failed (then they stay for a look by hand,
// with ours_*.npy next to each ref_*.npy that missed its bound).
class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!runs().empty() && !::testing::UnitTest::GetInstance()->Failed()) {
      fs::remove_all(temporary_root());
    }
  }
};
::testing::Environment* const clean_up = ::testing::AddGlobalTestEnvironment(new CleanUp);

double normwise_error(const NpyArray& ours, const NpyArray& ref) {
  double difference = 0, scale = 0;
  for (size_t i = 0; i < ours.data.size(); ++i) {
    if (std::isnan(ours.data[i]) || std::isnan(ref.data[i])) return INFINITY;
    difference = std::max(difference, std::abs(ours.data[i] - ref.data[i]));
    scale = std::max(scale, std::abs(ref.data[i]));
  }
  return scale > 0 ? difference / scale : difference;
}

double max_abs(const NpyArray& a) {
  double m = 0;
  for (double v : a.data) m = std::max(m, std::abs(v));
  return m;
}

// Compares every output of one case with the reference; prints the worst margin.
void check(const ReferenceRun& r, const std::string& name) {
  ASSERT_EQ(r.status, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch: "
                            "scripts/setup.sh installs it)";
  const Case& c = r.cases.at(name);
  const Arrays ours = c.run(c.inputs);
  double worst = 0;
  for (const auto& [output, value] : ours) {
    const NpyArray ref = test::read_npy(r.root / name / ("ref_" + output + ".npy"));
    ASSERT_EQ(value.shape, ref.shape) << name << " " << output;
    // The decoder's conv biases feed an instance norm, which subtracts each plane's mean: their
    // gradient is exactly zero, ours is 0 and the reference's is rounding noise (~1e-16 of the
    // weights' gradient), which a relative error would blow up. So: ours exactly zero, and the
    // reference's negligible next to the same conv's weight gradient.
    const bool cancelled = output.find("conv.bias") != std::string::npos &&
                           output.find("out_conv") == std::string::npos;
    if (cancelled) {
      const std::string weight = output.substr(0, output.size() - 4) + "weight";
      EXPECT_EQ(max_abs(value), 0.0) << name << " " << output;
      EXPECT_LE(max_abs(ref),
                1e-10 * max_abs(test::read_npy(r.root / name / ("ref_" + weight + ".npy"))))
          << name << " " << output;
      continue;
    }
    const double error = normwise_error(value, ref);
    const double bound = output.rfind("grad_", 0) == 0 ? 1e-4 : 1e-5;
    EXPECT_LE(error, bound) << name << " " << output;
    if (error > bound) test::write_npy(r.root / name / ("ours_" + output + ".npy"), value);
    worst = std::max(worst, error / bound);
    if (std::getenv("MVIBR_VERBOSE")) std::printf("    %s %.2e\n", output.c_str(), error);
  }
  // The margin to the bound, for the record: error / bound, 1 = at the bound.
  std::printf("  %-34s float %.1e of bound\n", name.c_str(), worst);
}

void check_all(const std::string& prefix) {
  const ReferenceRun& r = reference(prefix);
  for (const auto& entry : r.cases) {
    SCOPED_TRACE(entry.first);
    check(r, entry.first);
  }
  EXPECT_FALSE(r.cases.empty()) << "no case named " << prefix << "*";
}

// --- tests -----------------------------------------------------------------------------------

TEST(Conv2d, ForwardAndBackwardMatchPyTorch) {
  check_all("conv_");
}

// Where the CPU has no bf16 convolutions, their refusal instead.
TEST(Conv2d, Bf16OperandsMatchPyTorchOnTheSameOperands) {
  if (testing::bf16_convolutions_refused_here()) return;
  check_all("bf16_conv_");
}

TEST(Conv2d, WeightGradientsAccumulate) {
  const ConvShape s{1, 2, 3, 5, 4, 3, 1};
  const std::vector<float> x(40, 0.5f), grad_y(3 * 3 * 2, 1.0f);
  std::vector<float> once(54, 0.0f), twice(54, 0.0f), bias_once(3, 0.0f), bias_twice(3, 0.0f);
  conv2d_backward(s, x.data(), nullptr, grad_y.data(),
                  ConvGradients{nullptr, once.data(), bias_once.data()});
  for (int i = 0; i < 2; ++i) {
    conv2d_backward(s, x.data(), nullptr, grad_y.data(),
                    ConvGradients{nullptr, twice.data(), bias_twice.data()});
  }
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(bias_twice[i], 2 * bias_once[i]);
  EXPECT_FLOAT_EQ(bias_once[0], 6.0f);
}

// The input gradient accumulates too, padded or not, on either layout; or overwrites what the
// buffer held (overwrite_x), as if accumulated from zeros (the folded border's terms may be added
// in another order: within an ulp).
TEST(Conv2d, InputGradientsAccumulateOrOverwrite) {
  for (const MapLayout layout : {MapLayout::kPlanar, MapLayout::kChannelsLast}) {
    for (const int pad : {0, 1}) {
      for (const bool upsample : {false, true}) {
        SCOPED_TRACE(std::to_string(pad) +
                     (layout == MapLayout::kPlanar ? " planar" : " channels last") +
                     (upsample ? " upsampled" : ""));
        ConvShape s{2, 3, 4, 6, 8, 3, 1};
        s.layout = layout;
        s.pad = pad;
        s.upsample = upsample;
        const size_t out = size_t(s.batch) * s.out_channels * s.out_height() * s.out_width();
        std::vector<float> weight(size_t(4 * 3 * 9)), grad_y(out);
        for (size_t i = 0; i < weight.size(); ++i) weight[i] = float(i % 7) * 0.25f - 0.5f;
        for (size_t i = 0; i < grad_y.size(); ++i) grad_y[i] = float(i % 5) * 0.5f - 1.0f;
        std::vector<float> once(s.input_size(), 0.0f), twice(once.size(), 0.0f),
            written(once.size(), 7.0f);
        const auto into = [&](std::vector<float>& grad_x, bool overwrite) {
          conv2d_backward(s, nullptr, weight.data(), grad_y.data(),
                          ConvGradients{grad_x.data(), nullptr, nullptr, overwrite});
        };
        into(once, false);
        for (int i = 0; i < 2; ++i) into(twice, false);
        into(written, true);
        double largest = 0;
        for (float value : once) largest = std::max(largest, double(std::abs(value)));
        EXPECT_GT(largest, 0.5);
        // The upsampling's taps (like 3/7) scatter their terms onto what is there: added twice,
        // within the rounding of those adds, not exactly twice.
        for (size_t i = 0; i < once.size(); ++i) {
          if (upsample) {
            EXPECT_NEAR(twice[i], 2 * once[i], 1e-6 * largest) << i;
            EXPECT_NEAR(written[i], once[i], 1e-6 * largest) << i;
          } else {
            EXPECT_EQ(twice[i], 2 * once[i]) << i;
            EXPECT_NEAR(written[i], once[i], 2e-7 * std::abs(once[i])) << i;
          }
        }
      }
    }
  }
}

TEST(Conv2d, RejectsAKernelLargerThanTheMap) {
  std::vector<float> buffer(1000);
  EXPECT_THROW(
      conv2d_forward({1, 1, 1, 2, 5, 3, 1}, buffer.data(), buffer.data(), nullptr, buffer.data()),
      InvalidArgument);
  ConvShape padded_too_much{1, 1, 1, 3, 5, 3, 1};
  padded_too_much.pad = 3;
  EXPECT_THROW(
      conv2d_forward(padded_too_much, buffer.data(), buffer.data(), nullptr, buffer.data()),
      InvalidArgument);
}

TEST(ReflectPad, ForwardAndBackwardMatchPyTorch) {
  check_all("reflect_pad_");
}

TEST(ReflectPad, RejectsAPadAsLargeAsTheMap) {
  std::vector<float> buffer(1000);
  EXPECT_THROW(reflect_pad_forward(1, 3, 5, 3, buffer.data(), buffer.data()), InvalidArgument);
}

// The bf16 padding's rounding against the nearest of the two bf16 values around each float
// (ties to the even one), found in double: ties both ways, signs, the largest float (rounds to
// infinity), infinities, subnormals and NaN.
TEST(ReflectPad, Bf16RoundsToNearestEven) {
  const auto float_of_bits = [](uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  };
  std::vector<float> values{1.0f,
                            -1.0f,
                            0.0f,
                            -0.0f,
                            3.14159f,
                            -2.71828f,
                            1e-40f,
                            -1e-40f,
                            float_of_bits(0x3F808000u),  // tie, kept part even: down
                            float_of_bits(0x3F818000u),  // tie, kept part odd: up
                            float_of_bits(0xBF818000u),
                            float_of_bits(0x3F808001u),
                            float_of_bits(0x3F807FFFu),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            float_of_bits(0x7F800001u)};
  // One row of 1 pixel x values.size() channels, padded by 0: the rounding alone.
  std::vector<uint16_t> rounded(values.size());
  reflect_pad_forward_bf16_channels_last(1, 1, 1, int(values.size()), 0, values.data(),
                                         rounded.data());
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE(i);
    const float x = values[i];
    const float ours = float_of_bits(uint32_t(rounded[i]) << 16);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(ours));
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const uint32_t below = bits & 0xFFFF0000u;
    const uint32_t above = below + 0x10000u;  // the next bf16 away from zero (or infinity)
    const double distance_below = std::abs(double(x) - double(float_of_bits(below)));
    // Past the largest float the next value up is infinity: rounding goes there from half an
    // ulp above the largest bf16 (IEEE's rule), which the double distance cannot see.
    const bool to_infinity = std::isinf(float_of_bits(above)) && !std::isinf(x);
    const double distance_above =
        to_infinity ? distance_below + 1 : std::abs(double(float_of_bits(above)) - double(x));
    uint32_t expected = distance_below < distance_above ? below : above;
    if (distance_below == distance_above) expected = (below & 0x10000u) ? above : below;
    if (to_infinity && (bits & 0xFFFFu) >= 0x8000u) expected = above;
    if (std::isinf(x)) expected = bits;  // exact already
    EXPECT_EQ(uint32_t(rounded[i]) << 16, expected) << x;
  }
}

TEST(InstanceNorm, ForwardAndBackwardMatchPyTorchForEveryActivation) {
  check_all("instance_norm_");
}

TEST(Upsample, ForwardAndBackwardMatchPyTorch) {
  check_all("upsample_");
}

// Every layer and the small ResUNet on channels-last maps, within the same bounds.
TEST(ChannelsLast, LayersAndTheNetworkMatchPyTorch) {
  check_all("channels_last_");
}

TEST(FeatureNet, SmallPresetMatchesPyTorch) {
  check_all("resunet_small_");
}

TEST(FeatureNet, IbrnetPresetMatchesPyTorch) {
  check_all("resunet_ibrnet_");
}

TEST(FeatureNet, DynibarShallowForwardMatchesPyTorch) {
  check_all("resunet_shallow_");
}

TEST(FeatureNet, ParametersAreIbrnetStateDictKeys) {
  ParameterSet set;
  ResUNet net(ResUNetOptions::preset(ResUNetPreset::kIbrnet), &set, kPrefix);
  const std::vector<std::pair<std::string, std::vector<int>>> expected{
      {"conv1.weight", {64, 3, 7, 7}},
      {"bn1.weight", {64}},
      {"layer1.0.conv1.weight", {64, 64, 3, 3}},
      {"layer1.0.downsample.0.weight", {64, 64, 1, 1}},
      {"layer1.0.downsample.1.bias", {64}},
      {"layer2.3.bn2.weight", {128}},
      {"layer3.0.downsample.0.weight", {256, 128, 1, 1}},
      {"layer3.5.conv2.weight", {256, 256, 3, 3}},
      {"upconv3.conv.conv.weight", {128, 256, 3, 3}},
      {"upconv3.conv.conv.bias", {128}},
      {"upconv3.conv.bn.weight", {128}},
      {"iconv3.conv.weight", {128, 256, 3, 3}},
      {"iconv3.bn.bias", {128}},
      {"upconv2.conv.conv.weight", {64, 128, 3, 3}},
      {"iconv2.conv.weight", {64, 128, 3, 3}},
      {"out_conv.weight", {64, 64, 1, 1}},
      {"out_conv.bias", {64}}};
  for (const auto& [name, shape] : expected) {
    const ParameterInfo& info = set.info(set.find(kPrefix + name));
    EXPECT_EQ(info.shape, shape) << name;
    EXPECT_EQ(info.group, ParameterGroup::kFeature) << name;
  }
  EXPECT_THROW(set.find(kPrefix + "layer1.1.downsample.0.weight"), InvalidArgument);
  EXPECT_THROW(set.find(kPrefix + "layer3.6.conv1.weight"), InvalidArgument);
  EXPECT_EQ(set.infos().front().name, kPrefix + "conv1.weight");  // PyTorch's order
  EXPECT_EQ(set.infos().back().name, kPrefix + "out_conv.bias");
  // 8,917,120 trainable values in IBRNet's feature_net (ResNet-34 stages 1-3 and the decoder).
  size_t expected_count = 64 * 3 * 49 + 128;
  const int widths[3] = {64, 128, 256}, blocks[3] = {3, 4, 6};
  int in = 64;
  for (int s = 0; s < 3; ++s) {
    const size_t w = size_t(widths[s]);
    expected_count += w * size_t(in) + 2 * w;  // downsample
    expected_count +=
        w * size_t(in) * 9 + w * w * 9 + 4 * w + size_t(blocks[s] - 1) * (2 * w * w * 9 + 4 * w);
    in = widths[s];
  }
  expected_count += (128 * 256 * 9 + 3 * 128) + (128 * 256 * 9 + 3 * 128) +
                    (64 * 128 * 9 + 3 * 64) + (64 * 128 * 9 + 3 * 64) + (64 * 64 + 64);
  EXPECT_EQ(set.size(), expected_count);
}

TEST(FeatureNet, InitialisesAsPyTorchDefaults) {
  ParameterSet set;
  ResUNet net(ResUNetOptions::preset(ResUNetPreset::kSmall), &set, "");
  Initializer initializer(3);
  net.initialize(initializer);
  const ParameterInfo& conv = set.info(set.find("layer2.0.conv1.weight"));  // fan_in 16 * 9
  float largest = 0;
  for (size_t i = 0; i < conv.size; ++i) {
    largest = std::max(largest, std::abs(set.values()[conv.offset + i]));
  }
  EXPECT_LE(largest, 1.0f / 12.0f);
  EXPECT_GT(largest, 0.9f / 12.0f);
  EXPECT_EQ(set.value(set.find("layer2.0.bn1.weight"))[3], 1.0f);
  EXPECT_EQ(set.value(set.find("layer2.0.bn1.bias"))[3], 0.0f);
  EXPECT_NE(set.value(set.find("iconv2.conv.bias"))[0], 0.0f);
}

TEST(FeatureNet, OutputIsAQuarterRoundedUpToLayer3) {
  EXPECT_EQ(ResUNet::output_size(300, 400), std::make_pair(76, 100));
  EXPECT_EQ(ResUNet::output_size(32, 48), std::make_pair(8, 12));
  EXPECT_EQ(ResUNet::output_size(17, 33), std::make_pair(8, 12));
  EXPECT_THROW(ResUNet::output_size(16, 100), InvalidArgument);
}

TEST(FeatureNet, BackwardNeedsAForward) {
  ParameterSet set;
  ResUNet net(ResUNetOptions::preset(ResUNetPreset::kSmall), &set, "");
  ResUNet::Workspace workspace;
  EXPECT_THROW(net.backward(&workspace, nullptr, nullptr), InvalidArgument);
}

// Forward and backward time at IBRNet's training size (10 source views of 400x300); run by hand
// with --gtest_also_run_disabled_tests.
TEST(FeatureNet, DISABLED_TimeTenViewsOf400x300) {
  const int views = 10, height = 300, width = 400;
  const std::vector<double> random =
      synthetic::random_values(size_t(views * height * width * 3), 0, 1, 1);
  const std::vector<float> images(random.begin(), random.end());
  for (const ResUNetPreset preset : {ResUNetPreset::kSmall, ResUNetPreset::kIbrnet}) {
    ParameterSet set;
    ResUNet net(ResUNetOptions::preset(preset), &set, "");
    Initializer initializer(1);
    net.initialize(initializer);
    const auto [hf, wf] = ResUNet::output_size(height, width);
    const size_t cells = size_t(views * hf * wf);
    std::vector<float> coarse(cells * size_t(net.options().coarse_out_ch), 0.0f);
    std::vector<float> fine(cells * size_t(net.options().fine_out_ch), 0.0f);
    std::vector<float> grad_coarse(coarse.size(), 1e-3f), grad_fine(fine.size(), 1e-3f);
    ResUNet::Workspace workspace;
    using Clock = std::chrono::steady_clock;
    for (int run = 0; run < 2; ++run) {  // the first builds oneDNN's primitives
      const auto start = Clock::now();
      net.forward(views, height, width, images.data(), &workspace, coarse.data(), fine.data());
      const auto middle = Clock::now();
      net.backward(&workspace, grad_coarse.data(), grad_fine.data());
      const auto end = Clock::now();
      std::printf("  %-6s run %d: forward %.2f s, backward %.2f s, workspace %.0f MB\n",
                  name_of(preset), run, std::chrono::duration<double>(middle - start).count(),
                  std::chrono::duration<double>(end - middle).count(),
                  double(workspace.bytes()) / 1e6);
    }
  }
}

}  // namespace
}  // namespace mvibr::nn
