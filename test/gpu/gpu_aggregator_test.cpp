// The GPU aggregation networks (nn/cuda_aggregator.h: IBRNet's, DynIBaR's static and dynamic)
// against the CPU IbrnetAggregator on the same random problems: rgb, sigma, the gradient of
// rgb_features (and of the samples' positions for the dynamic network) and every parameter's
// gradient, with anti-aliased and uniform pooling, both attention masks, odd sizes (7 rays x 13
// samples x 5 views, 3 + 6 channels of colour and features), one view, one sample per ray, and
// 10 views with 3 + 32 channels (wider than a warp). Every problem has masked views, a sample no
// view sees, one only one view sees and a ray that no view sees at all. Plain C++ (device memory
// through core/device.h), so it builds in every build: without the CUDA backend it is one skipped
// test, and without a device every test skips.
//
// Bounds, normwise (max |gpu - reference| / max |reference|) per output and per parameter, but
// for DynIBaR's density of the samples no view sees, -1e9 on both backends and compared exactly
// (kept out of the norm of the rest, which it would dwarf):
// - Against the CPU network in double, the oracle (aggregator_test holds it to 1e-10 of
//   PyTorch's float64): 1e-5 for rgb and sigma, 1e-4 for the gradients. These are the bounds the
//   CPU network in float meets against the same oracle (aggregator_test), for the same reasons:
//   fp32 sums over up to 15,000 rows in the parameter gradients, and the cancellations of the
//   normalised pooling and visibility weights, which both backends take through the same eps / D
//   formulation. A parameter gradient far below the network's largest is a cancellation residue
//   (with one view, some are only the 1e-8 of the weight normalisation), measured on 1e-6 of
//   the largest. A one-output layer's bias gradient is one signed sum over every row, with no
//   norm to measure it by: measured on its weight's gradient (the layer's scale). In DynIBaR's
//   networks those of vis_fc2.2 and out_geometry_fc.2 cancel far below it on some problems:
//   measured on their own, 3 of 36 random problems of the sizes here missed 1e-4 (by up to 4x),
//   the CPU network in float as often as the GPU. In the blending networks rgb_fc.4.bias shifts
//   a sample's blending logits alike, which the softmax ignores, so its gradient is rounding
//   only.
// - Against the CPU network in float: the sum of the two backends' bounds against the oracle,
//   2e-5 and 2e-4, on the same floors.
// - Repeated calls (the workspace reused, after a call of other sizes) and repeated backward
//   passes: bit for bit. The backward accumulates into nonzero gradients what it gives from
//   zero: one float addition where the GEMMs add the old values last, a reordered fp32 sum over
//   the rows where they start from them (8 sqrt(rows) 2^-24, gpu_nn_layers_test's bound).
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
#include "mvibr/core/error.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/aggregator_math.h"
#include "mvibr/nn/cuda_aggregator.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

using nn::AggregatorVariant;
using nn::AttentionMask;

// A CPU network with its variant's initialisation, jittered away from its zeros and ones so that
// every gradient is exercised, and s set.
struct Network {
  nn::ParameterSet set;
  std::unique_ptr<nn::IbrnetAggregator> net;
  std::vector<float> params;  // the network's run of the set
};

std::unique_ptr<Network> make_network(AggregatorVariant variant, int C, bool anti_alias,
                                      AttentionMask mask, double s, uint64_t seed) {
  auto n = std::make_unique<Network>();
  nn::AggregatorOptions options;
  options.variant = variant;
  options.feature_channels = C;
  options.anti_alias_pooling = anti_alias;
  options.attention_mask = mask;
  n->net = std::make_unique<nn::IbrnetAggregator>(n->set, "net_coarse.", options);
  nn::Initializer init(seed);
  n->net->initialize(init);
  const std::vector<double> jitter = synthetic::random_values(n->set.size(), -0.05, 0.05, seed + 1);
  for (size_t i = 0; i < n->set.size(); ++i) n->set.values()[i] += float(jitter[i]);
  if (anti_alias) n->set.value(n->set.find("net_coarse.s"))[0] = float(s);
  const auto begin = n->set.values().begin() + long(n->net->parameter_offset());
  n->params.assign(begin, begin + long(n->net->parameter_count()));
  return n;
}

// Inputs in render_ops.h's layouts: colours in [0, 1] then features in [-1, 1], direction
// differences with dot products in [0.6, 1], a quarter of the views masked, and the edges: sample
// (0,0) seen by no view, the next sample by one, the last ray by none. DynIBaR's geometry as
// aggregator_test's: positions in [-1.5, 1.5], Plucker coordinates and view directions in
// [-1, 1], times in [0, 1].
struct Inputs {
  int R, S, V, C;
  std::vector<float> rgb_features, ray_diff, mask, grad_rgb, grad_sigma;
  std::vector<float> xyz, src_rays, target_rays, time, view_dir;
};

std::vector<float> random_floats(size_t count, double lo, double hi, uint64_t seed) {
  return synthetic::cast_values<float>(synthetic::random_values(count, lo, hi, seed));
}

Inputs make_inputs(int R, int S, int V, int C, uint64_t seed) {
  Inputs in{R, S, V, C, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const size_t rows = size_t(R) * S * V, width = size_t(C) + 3;
  in.rgb_features = random_floats(rows * width, -1, 1, seed);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t c = 0; c < 3; ++c) {
      in.rgb_features[i * width + c] = 0.5f + 0.5f * in.rgb_features[i * width + c];
    }
  }
  in.ray_diff = random_floats(rows * 4, -0.3, 0.3, seed + 1);
  const std::vector<float> dots = random_floats(rows, 0.6, 1.0, seed + 2);
  for (size_t i = 0; i < rows; ++i) in.ray_diff[i * 4 + 3] = dots[i];
  in.mask = random_floats(rows, 0, 1, seed + 3);
  for (float& m : in.mask) m = m < 0.75f ? 1.0f : 0.0f;
  for (int v = 0; v < V; ++v) {
    in.mask[size_t(v)] = 0;
    in.mask[size_t(V) + v] = v == V / 2 ? 1.0f : 0.0f;
  }
  for (size_t i = size_t(R - 1) * S * V; i < rows; ++i) in.mask[i] = 0;
  in.grad_rgb = random_floats(size_t(R) * S * 3, -1, 1, seed + 4);
  in.grad_sigma = random_floats(size_t(R) * S, -1, 1, seed + 5);
  in.xyz = random_floats(size_t(R) * S * 3, -1.5, 1.5, seed + 6);
  in.src_rays = random_floats(rows * 6, -1, 1, seed + 7);
  in.target_rays = random_floats(size_t(R) * 6, -1, 1, seed + 8);
  in.time = random_floats(size_t(R), 0, 1, seed + 9);
  in.view_dir = random_floats(size_t(R) * 3, -1, 1, seed + 10);
  return in;
}

bool is_dynamic(const Network& n) {
  return n.net->variant() == AggregatorVariant::kDynibarDynamic;
}

// Forward outputs, the input gradients and the parameter gradients (from zero, the run's layout);
// grad_xyz for the dynamic network only.
struct Outputs {
  std::vector<double> rgb, sigma, grad_rgb_features, grads, grad_xyz;
};

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <typename T>
Outputs run_cpu(const Network& n, const Inputs& in) {
  auto cast = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> params = cast(n.params), features = cast(in.rgb_features),
                       diff = cast(in.ray_diff), mask = cast(in.mask), grad_rgb = cast(in.grad_rgb),
                       grad_sigma = cast(in.grad_sigma), xyz = cast(in.xyz),
                       src_rays = cast(in.src_rays), target_rays = cast(in.target_rays),
                       time = cast(in.time), view_dir = cast(in.view_dir);
  const size_t samples = size_t(in.R) * in.S;
  std::vector<T> rgb(samples * 3), sigma(samples), grads(params.size(), T(0)),
      grad_features(features.size()), grad_xyz(is_dynamic(n) ? xyz.size() : 0);
  nn::AggregatorWorkspace<T> workspace;
  n.net->forward(params.data(), in.R, in.S, in.V,
                 {features.data(), diff.data(), mask.data(), xyz.data(), src_rays.data(),
                  target_rays.data(), time.data(), view_dir.data()},
                 &workspace, rgb.data(), sigma.data());
  n.net->backward(params.data(), grads.data(), workspace, grad_rgb.data(), grad_sigma.data(),
                  grad_features.data(), is_dynamic(n) ? grad_xyz.data() : nullptr);
  return {to_double(rgb), to_double(sigma), to_double(grad_features), to_double(grads),
          to_double(grad_xyz)};
}

// The inputs and parameters on the device, and buffers for the outputs.
struct DeviceProblem {
  DeviceProblem(const Network& n, const Inputs& in)
      : params(n.params),
        rgb_features(in.rgb_features),
        ray_diff(in.ray_diff),
        mask(in.mask),
        grad_rgb(in.grad_rgb),
        grad_sigma(in.grad_sigma),
        xyz(in.xyz),
        src_rays(in.src_rays),
        target_rays(in.target_rays),
        time(in.time),
        view_dir(in.view_dir),
        rgb(in.grad_rgb.size()),
        sigma(in.grad_sigma.size()),
        grads(n.params.size()),
        grad_rgb_features(in.rgb_features.size()),
        grad_xyz(is_dynamic(n) ? in.xyz.size() : 0) {}
  nn::AggregatorInputs<float> inputs() const {
    return {rgb_features.data(), ray_diff.data(),    mask.data(), xyz.data(),
            src_rays.data(),     target_rays.data(), time.data(), view_dir.data()};
  }
  DeviceArray<float> params, rgb_features, ray_diff, mask, grad_rgb, grad_sigma, xyz, src_rays,
      target_rays, time, view_dir, rgb, sigma, grads, grad_rgb_features, grad_xyz;
};

struct GpuOutputs {
  std::vector<float> rgb, sigma, grad_rgb_features, grads, grad_xyz;
};

GpuOutputs run_gpu(nn::cuda::Context& context, nn::cuda::IbrnetAggregator& gpu, const Inputs& in,
                   DeviceProblem& d) {
  d.grads.zero();
  gpu.forward(context, in.R, in.S, in.V, d.params.data(), d.inputs(), d.rgb.data(), d.sigma.data());
  gpu.backward(context, d.params.data(), d.grads.data(), d.grad_rgb.data(), d.grad_sigma.data(),
               d.grad_rgb_features.data(), d.grad_xyz.data());
  device_synchronize();
  return {d.rgb.to_host(), d.sigma.to_host(), d.grad_rgb_features.to_host(), d.grads.to_host(),
          d.grad_xyz.to_host()};
}

// max |ours - reference| / max(max |reference|, floor); infinite on NaN.
double relative_error(const std::vector<double>& ours, const std::vector<double>& reference,
                      double floor) {
  if (ours.size() != reference.size()) return INFINITY;
  double difference = 0, scale = floor;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (std::isnan(ours[i]) || std::isnan(reference[i])) return INFINITY;
    difference = std::max(difference, std::abs(ours[i] - reference[i]));
    scale = std::max(scale, std::abs(reference[i]));
  }
  return scale > 0 ? difference / scale : difference;
}

// relative_error of sigma over the samples some view sees; DynIBaR's -1e9 for the others is
// expected exactly, and kept out of the norm, which it would dwarf.
double sigma_error(const std::vector<double>& ours, const std::vector<double>& reference) {
  if (ours.size() != reference.size()) return INFINITY;
  std::vector<double> seen_ours, seen_reference;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (reference[i] == nn::kMaskedDensity) {
      EXPECT_EQ(ours[i], nn::kMaskedDensity) << "sigma of sample " << i;
    } else {
      seen_ours.push_back(ours[i]);
      seen_reference.push_back(reference[i]);
    }
  }
  return relative_error(seen_ours, seen_reference, 0);
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Checks every output and parameter gradient of `gpu` against `reference` with the bounds
// `forward_bound` (rgb, sigma) and `gradient_bound`, on the floors of the file comment; returns
// the worst error as a fraction of its bound.
double compare(const Network& n, const GpuOutputs& gpu, const Outputs& reference,
               double forward_bound, double gradient_bound, const std::string& label) {
  double worst = 0;
  auto check_error = [&](const std::string& name, double error, double bound) {
    EXPECT_LE(error, bound) << label << ": " << name;
    worst = std::max(worst, error / bound);
  };
  auto check = [&](const std::string& name, const std::vector<double>& ours,
                   const std::vector<double>& ref, double bound,
                   double floor) { check_error(name, relative_error(ours, ref, floor), bound); };
  check("rgb", to_double(gpu.rgb), reference.rgb, forward_bound, 0);
  check_error("sigma", sigma_error(to_double(gpu.sigma), reference.sigma), forward_bound);
  check("grad_rgb_features", to_double(gpu.grad_rgb_features), reference.grad_rgb_features,
        gradient_bound, 0);
  check("grad_xyz", to_double(gpu.grad_xyz), reference.grad_xyz, gradient_bound, 0);
  const double network_scale = largest(reference.grads);
  const size_t offset = n.net->parameter_offset();
  auto slice = [&](const auto& all, const nn::ParameterInfo& info) {
    const auto begin = all.begin() + long(info.offset - offset);
    return std::vector<double>(begin, begin + long(info.size));
  };
  for (const nn::ParameterInfo& info : n.set.infos()) {
    double floor = 1e-6 * network_scale;
    const size_t bias = info.name.rfind(".bias");
    if (info.size == 1 && bias != std::string::npos) {  // a one-output layer's bias
      const std::string weight = info.name.substr(0, bias) + ".weight";
      floor = std::max(floor, largest(slice(reference.grads, n.set.info(n.set.find(weight)))));
    }
    check(info.name, slice(to_double(gpu.grads), info), slice(reference.grads, info),
          gradient_bound, floor);
  }
  return worst;
}

using CudaAggregator = testing::CudaContextTest;

constexpr AggregatorVariant kIbrnet = AggregatorVariant::kIbrnet,
                            kStatic = AggregatorVariant::kDynibarStatic,
                            kDynamic = AggregatorVariant::kDynibarDynamic;

struct Case {
  const char* name;
  AggregatorVariant variant;
  int R, S, V, C;
  bool anti_alias;
  AttentionMask mask;
  double s;
};

TEST_F(CudaAggregator, MatchesTheCpuNetwork) {
  const AttentionMask queries = AttentionMask::kQueries, keys = AttentionMask::kKeys;
  const Case cases[] = {
      {"odd_sizes", kIbrnet, 7, 13, 5, 6, true, queries, 0.35},
      {"odd_sizes_key_mask", kIbrnet, 7, 13, 5, 6, true, keys, -0.5},
      {"uniform_pooling", kIbrnet, 7, 13, 5, 6, false, queries, 0},
      {"uniform_pooling_key_mask", kIbrnet, 5, 9, 3, 4, false, keys, 0},
      {"one_view", kIbrnet, 3, 5, 1, 4, true, queries, 0.2},
      {"one_sample_per_ray", kIbrnet, 6, 1, 3, 5, true, keys, 0.3},
      {"ibrnet_10_views", kIbrnet, 24, 64, 10, 32, true, queries, 0.2},
      {"ibrnet_10_views_key_mask", kIbrnet, 8, 32, 10, 32, true, keys, 0.2},
      {"static_odd_sizes", kStatic, 7, 13, 5, 6, false, queries, 0},
      {"static_anti_aliased_key_mask", kStatic, 7, 13, 5, 6, true, keys, 0.35},
      {"static_one_view", kStatic, 3, 5, 1, 4, true, queries, 0.2},
      {"static_10_views", kStatic, 4, 32, 10, 32, false, queries, 0},
      {"dynamic_odd_sizes", kDynamic, 7, 13, 5, 6, false, queries, 0},
      {"dynamic_key_mask", kDynamic, 5, 9, 3, 4, false, keys, 0},
      {"dynamic_one_sample_per_ray", kDynamic, 6, 1, 3, 5, false, queries, 0},
      {"dynamic_10_views", kDynamic, 4, 32, 10, 32, false, queries, 0},
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto network = make_network(c.variant, c.C, c.anti_alias, c.mask, c.s, seed += 10);
    const Inputs in = make_inputs(c.R, c.S, c.V, c.C, seed + 5);
    nn::cuda::IbrnetAggregator gpu(*network->net);
    DeviceProblem device(*network, in);
    const GpuOutputs ours = run_gpu(context(), gpu, in, device);
    const double against_double =
        compare(*network, ours, run_cpu<double>(*network, in), 1e-5, 1e-4, "vs CPU double");
    const double against_float =
        compare(*network, ours, run_cpu<float>(*network, in), 2e-5, 2e-4, "vs CPU float");
    std::printf("  %-28s worst error / bound: %.2f against double, %.2f against float\n", c.name,
                against_double, against_float);
  }
}

// One network of each variant for the tests below: IBRNet's and the static one with
// anti-aliased pooling, the dynamic one's uniform.
struct VariantCase {
  const char* name;
  AggregatorVariant variant;
  bool anti_alias;
};
constexpr VariantCase kVariants[] = {
    {"ibrnet", kIbrnet, true}, {"static", kStatic, true}, {"dynamic", kDynamic, false}};

TEST_F(CudaAggregator, RepeatedCallsGiveTheSameBits) {
  for (const VariantCase& v : kVariants) {
    SCOPED_TRACE(v.name);
    // DynIBaR's widths are 4-8x IBRNet's: fewer rays keep the emulated run short.
    const int rays = v.variant == kIbrnet ? 16 : 2;
    const auto network =
        make_network(v.variant, 32, v.anti_alias, AttentionMask::kQueries, 0.2, 900);
    const Inputs big = make_inputs(rays, 32, 10, 32, 910), small = make_inputs(3, 20, 4, 32, 920);
    nn::cuda::IbrnetAggregator gpu(*network->net);
    DeviceProblem device_big(*network, big), device_small(*network, small);
    const GpuOutputs first = run_gpu(context(), gpu, big, device_big);
    run_gpu(context(), gpu, small, device_small);  // other sizes in the same workspace
    const GpuOutputs again = run_gpu(context(), gpu, big, device_big);
    EXPECT_EQ(first.rgb, again.rgb);
    EXPECT_EQ(first.sigma, again.sigma);
    EXPECT_EQ(first.grad_rgb_features, again.grad_rgb_features);
    EXPECT_EQ(first.grads, again.grads);
    EXPECT_EQ(first.grad_xyz, again.grad_xyz);

    // A second backward of the same forward gives the same gradients; without grad_rgb_features
    // and grad_xyz, the same parameter gradients.
    device_big.grads.zero();
    gpu.backward(context(), device_big.params.data(), device_big.grads.data(),
                 device_big.grad_rgb.data(), device_big.grad_sigma.data(), nullptr);
    device_synchronize();
    EXPECT_EQ(device_big.grads.to_host(), first.grads);
  }
}

TEST_F(CudaAggregator, BackwardAccumulatesIntoTheGradients) {
  for (const VariantCase& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto network = make_network(v.variant, 8, v.anti_alias, AttentionMask::kKeys, 0.3, 950);
    const Inputs in = make_inputs(7, 13, 5, 8, 960);
    nn::cuda::IbrnetAggregator gpu(*network->net);
    DeviceProblem device(*network, in);
    const GpuOutputs from_zero = run_gpu(context(), gpu, in, device);
    const std::vector<float> start = random_floats(network->params.size(), -1, 1, 970);
    DeviceArray<float> grads(start);
    gpu.backward(context(), device.params.data(), grads.data(), device.grad_rgb.data(),
                 device.grad_sigma.data(), nullptr);
    device_synchronize();
    std::vector<double> expected(start.size());
    for (size_t i = 0; i < start.size(); ++i) expected[i] = double(start[i]) + from_zero.grads[i];
    const double rows = double(in.R) * in.S * in.V;
    EXPECT_LE(relative_error(to_double(grads.to_host()), expected, 0),
              8 * std::sqrt(rows) * std::ldexp(1.0, -24));
  }
}

// Rendering: infer() in chunks of 2 rays gives the forward's outputs (each row's GEMM sums are
// the same sums; within 1e-6 where a library picks another algorithm for fewer rows) holding a
// chunk's activations, not the batch's, and leaves the last forward ready for its backward.
TEST_F(CudaAggregator, InferenceInChunksKeepsNoActivations) {
  for (const VariantCase& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto network =
        make_network(v.variant, 8, v.anti_alias, AttentionMask::kQueries, 0.3, 980);
    const Inputs in = make_inputs(12, 13, 5, 8, 990);
    nn::cuda::IbrnetAggregator trained(*network->net), rendered(*network->net);
    DeviceProblem device(*network, in);
    const GpuOutputs expected = run_gpu(context(), trained, in, device);
    DeviceArray<float> rgb(in.grad_rgb.size()), sigma(in.grad_sigma.size());
    const size_t chunk_rows = 2 * size_t(in.S) * size_t(in.V);
    rendered.infer(context(), in.R, in.S, in.V, device.params.data(), device.inputs(), rgb.data(),
                   sigma.data(), chunk_rows);
    device_synchronize();
    EXPECT_LE(relative_error(to_double(rgb.to_host()), to_double(expected.rgb), 0), 1e-6);
    EXPECT_LE(sigma_error(to_double(sigma.to_host()), to_double(expected.sigma)), 1e-6);
    // 12 rays' activations and gradients against 2 rays' activations: 6x fewer forward bytes
    // alone.
    EXPECT_LT(5 * rendered.device_bytes(), trained.device_bytes())
        << rendered.device_bytes() << " bytes rendering, " << trained.device_bytes() << " training";
    // infer() between a forward and its backward changes nothing of the backward.
    trained.infer(context(), in.R, in.S, in.V, device.params.data(), device.inputs(), rgb.data(),
                  sigma.data(), chunk_rows);
    device.grads.zero();
    trained.backward(context(), device.params.data(), device.grads.data(), device.grad_rgb.data(),
                     device.grad_sigma.data(), nullptr, device.grad_xyz.data());
    device_synchronize();
    EXPECT_EQ(device.grads.to_host(), expected.grads);
    EXPECT_EQ(device.grad_xyz.to_host(), expected.grad_xyz);
  }
}

TEST_F(CudaAggregator, RejectsWhatTheCpuNetworkRejects) {
  for (const VariantCase& v : kVariants) {
    SCOPED_TRACE(v.name);
    nn::ParameterSet set;
    nn::AggregatorOptions options;
    options.variant = v.variant;
    options.anti_alias_pooling = v.anti_alias;
    options.n_samples_max = 8;
    const nn::IbrnetAggregator cpu(set, "net.", options);
    nn::cuda::IbrnetAggregator gpu(cpu);
    // Nothing to go back through yet.
    EXPECT_THROW(gpu.backward(context(), nullptr, nullptr, nullptr, nullptr, nullptr),
                 InvalidArgument);
    struct Sizes {
      int R, S, V;
    };
    for (const Sizes bad : {Sizes{1, 9, 2}, Sizes{1, 0, 2}, Sizes{1, 8, 0}, Sizes{-1, 8, 2}}) {
      EXPECT_THROW(gpu.forward(context(), bad.R, bad.S, bad.V, nullptr, {}, nullptr, nullptr),
                   InvalidArgument)
          << bad.R << " rays, " << bad.S << " samples, " << bad.V << " views";
      EXPECT_THROW(gpu.infer(context(), bad.R, bad.S, bad.V, nullptr, {}, nullptr, nullptr),
                   InvalidArgument);
    }
    // Missing inputs: the views' always, DynIBaR's geometry for its networks (checked before
    // anything is read, so any non-null pointer stands for an input here).
    float dummy = 0;
    const nn::AggregatorInputs<float> views_only{&dummy, &dummy, &dummy};
    const nn::AggregatorInputs<float> no_mask{&dummy, &dummy, nullptr, &dummy,
                                              &dummy, &dummy, &dummy,  &dummy};
    EXPECT_THROW(gpu.forward(context(), 1, 8, 2, nullptr, no_mask, nullptr, nullptr),
                 InvalidArgument);
    if (v.variant != kIbrnet) {
      EXPECT_THROW(gpu.forward(context(), 1, 8, 2, nullptr, views_only, nullptr, nullptr),
                   InvalidArgument);
      EXPECT_THROW(gpu.infer(context(), 1, 8, 2, nullptr, views_only, nullptr, nullptr),
                   InvalidArgument);
    }
    // No rays: nothing to compute, forward and backward included; the positions' gradient only
    // from the dynamic network.
    EXPECT_NO_THROW(gpu.forward(context(), 0, 8, 2, nullptr, {}, nullptr, nullptr));
    EXPECT_NO_THROW(gpu.backward(context(), nullptr, nullptr, nullptr, nullptr, nullptr));
    if (v.variant == kDynamic) {
      EXPECT_NO_THROW(gpu.backward(context(), nullptr, nullptr, nullptr, nullptr, nullptr, &dummy));
    } else {
      EXPECT_THROW(gpu.backward(context(), nullptr, nullptr, nullptr, nullptr, nullptr, &dummy),
                   InvalidArgument);
    }
    EXPECT_NO_THROW(device_synchronize());
  }
}

}  // namespace
}  // namespace mvibr

#else

TEST(GpuAggregator, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
