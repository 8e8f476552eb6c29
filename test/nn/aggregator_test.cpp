// The aggregation networks (IBRNet's, DynIBaR's static and dynamic): parameter names, shapes and
// initialisation as PyTorch's state_dicts and the published inits; the double-precision backward
// against finite differences; and forward and every gradient against the PyTorch float64 reference
// (test/reference/aggregator_reference.py) on random inputs of several sizes, in double (bound
// 1e-10) and float (forward 1e-5, gradients 1e-4), as normwise relative errors
// max|ours - ref| / max|ref|, each parameter on its own.
#include "mvibr/nn/aggregator.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/aggregator_math.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "support/finite_difference.h"

namespace mvibr::nn {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;

// A random aggregator problem: sizes, options, parameters and inputs.
struct Problem {
  int R = 1, S = 1, V = 1, C = 4;
  AggregatorOptions options;
  ParameterSet set;
  std::unique_ptr<IbrnetAggregator> net;
  // Inputs as doubles that floats represent exactly, so both precisions see the same problem.
  std::vector<double> rgb_features, ray_diff, mask, grad_rgb, grad_sigma;
  std::vector<double> xyz, src_rays, target_rays, time, view_dir;  // what DynIBaR's read
};

std::vector<double> float_values(size_t count, double lo, double hi, uint64_t seed) {
  std::vector<double> v = synthetic::random_values(count, lo, hi, seed);
  for (double& x : v) x = double(float(x));
  return v;
}

// `edges`: sample (0,0) has no valid view, sample (0,1) exactly one, the last ray none at all.
std::unique_ptr<Problem> make_problem(int R, int S, int V, int C, AggregatorOptions options,
                                      double s, bool edges, uint64_t seed) {
  auto p = std::make_unique<Problem>();
  p->R = R;
  p->S = S;
  p->V = V;
  p->C = C;
  options.feature_channels = C;
  p->options = options;
  p->net = std::make_unique<IbrnetAggregator>(p->set, "net_coarse.", options);
  Initializer init(seed);
  p->net->initialize(init);
  // Away from the initial zeros (biases) and ones (LayerNorm), so every gradient is exercised.
  const std::vector<double> jitter = float_values(p->set.size(), -0.05, 0.05, seed + 1);
  for (size_t i = 0; i < p->set.size(); ++i) p->set.values()[i] += float(jitter[i]);
  if (options.anti_alias_pooling) p->set.value(p->set.find("net_coarse.s"))[0] = float(s);

  const size_t rows = size_t(R) * S * V, width = size_t(C) + 3;
  p->rgb_features = float_values(rows * width, -1, 1, seed + 2);
  for (size_t i = 0; i < rows; ++i) {  // colours in [0, 1]
    for (int c = 0; c < 3; ++c)
      p->rgb_features[i * width + c] = 0.5 + 0.5 * p->rgb_features[i * width + c];
  }
  p->ray_diff = float_values(rows * 4, -0.3, 0.3, seed + 3);
  const std::vector<double> dots = float_values(rows, 0.6, 1.0, seed + 4);
  for (size_t i = 0; i < rows; ++i) p->ray_diff[i * 4 + 3] = dots[i];
  p->mask = float_values(rows, 0, 1, seed + 5);
  for (double& m : p->mask) m = m < 0.75 ? 1 : 0;
  if (edges) {
    for (int v = 0; v < V; ++v) {
      p->mask[size_t(0) * V + v] = 0;                   // sample (0,0): no view
      p->mask[size_t(1) * V + v] = v == V / 2 ? 1 : 0;  // sample (0,1): one view
    }
    for (size_t i = size_t(R - 1) * S * V; i < rows; ++i) p->mask[i] = 0;  // last ray: none
  }
  p->grad_rgb = float_values(size_t(R) * S * 3, -1, 1, seed + 6);
  p->grad_sigma = float_values(size_t(R) * S, -1, 1, seed + 7);
  p->xyz = float_values(size_t(R) * S * 3, -1.5, 1.5, seed + 8);
  p->src_rays = float_values(rows * 6, -1, 1, seed + 9);
  p->target_rays = float_values(size_t(R) * 6, -1, 1, seed + 10);
  p->time = float_values(size_t(R), 0, 1, seed + 11);
  p->view_dir = float_values(size_t(R) * 3, -1, 1, seed + 12);
  return p;
}

// Forward and backward in T: outputs, the input gradient and the parameter gradients (block
// layout).
struct Result {
  std::vector<double> rgb, sigma, grad_rgb_features, grads, grad_xyz;  // grad_xyz: dynamic only
};

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The problem's inputs in T, and the network's view of them.
template <typename T>
struct Inputs {
  explicit Inputs(const Problem& p)
      : features(cast<T>(p.rgb_features)),
        diff(cast<T>(p.ray_diff)),
        mask(cast<T>(p.mask)),
        xyz(cast<T>(p.xyz)),
        src_rays(cast<T>(p.src_rays)),
        target_rays(cast<T>(p.target_rays)),
        time(cast<T>(p.time)),
        view_dir(cast<T>(p.view_dir)) {}
  AggregatorInputs<T> view() const {
    return {features.data(), diff.data(),        mask.data(), xyz.data(),
            src_rays.data(), target_rays.data(), time.data(), view_dir.data()};
  }
  std::vector<T> features, diff, mask, xyz, src_rays, target_rays, time, view_dir;
};

bool is_dynamic(const Problem& p) {
  return p.options.variant == AggregatorVariant::kDynibarDynamic;
}

template <typename T>
Result run(const Problem& p, const std::vector<double>& params,
           const std::vector<double>& rgb_features, const std::vector<double>* xyz = nullptr) {
  Inputs<T> in(p);
  in.features = cast<T>(rgb_features);
  if (xyz) in.xyz = cast<T>(*xyz);
  const std::vector<T> values = cast<T>(params), grad_rgb = cast<T>(p.grad_rgb),
                       grad_sigma = cast<T>(p.grad_sigma);
  const size_t samples = size_t(p.R) * p.S;
  std::vector<T> rgb(samples * 3), sigma(samples), grads(params.size(), T(0)),
      grad_features(in.features.size()), grad_xyz(is_dynamic(p) ? samples * 3 : 0);
  AggregatorWorkspace<T> ws;
  p.net->forward(values.data(), p.R, p.S, p.V, in.view(), &ws, rgb.data(), sigma.data());
  p.net->backward(values.data(), grads.data(), ws, grad_rgb.data(), grad_sigma.data(),
                  grad_features.data(), is_dynamic(p) ? grad_xyz.data() : nullptr);
  auto as_double = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
  return {as_double(rgb), as_double(sigma), as_double(grad_features), as_double(grads),
          as_double(grad_xyz)};
}

std::vector<double> block_values(const Problem& p) {
  const auto& all = p.set.values();
  const size_t begin = p.net->parameter_offset();
  return std::vector<double>(all.begin() + begin, all.begin() + begin + p.net->parameter_count());
}

// The float path through the ParameterSet itself (what training runs).
Result run_on_set(Problem& p) {
  const Inputs<float> in(p);
  const std::vector<float> grad_rgb = cast<float>(p.grad_rgb),
                           grad_sigma = cast<float>(p.grad_sigma);
  const size_t samples = size_t(p.R) * p.S;
  std::vector<float> rgb(samples * 3), sigma(samples), grad_features(in.features.size()),
      grad_xyz(is_dynamic(p) ? samples * 3 : 0);
  AggregatorWorkspace<float> ws;
  p.set.zero_grads();
  p.net->forward(p.R, p.S, p.V, in.view(), &ws, rgb.data(), sigma.data());
  p.net->backward(ws, grad_rgb.data(), grad_sigma.data(), grad_features.data(),
                  is_dynamic(p) ? grad_xyz.data() : nullptr);
  const auto& g = p.set.grads();
  const size_t begin = p.net->parameter_offset();
  auto as_double = [](const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  return {as_double(rgb), as_double(sigma), as_double(grad_features),
          std::vector<double>(g.begin() + begin, g.begin() + begin + p.net->parameter_count()),
          as_double(grad_xyz)};
}

// max|ours - reference| / max(max|reference|, floor).
double relative_error(const std::vector<double>& ours, const std::vector<double>& reference,
                      double floor = 0) {
  double difference = 0, scale = floor;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (std::isnan(ours[i]) || std::isnan(reference[i])) return INFINITY;
    difference = std::max(difference, std::abs(ours[i] - reference[i]));
    scale = std::max(scale, std::abs(reference[i]));
  }
  return scale > 0 ? difference / scale : difference;
}

AggregatorOptions options_for(AggregatorVariant variant, bool anti_alias) {
  AggregatorOptions options;
  options.variant = variant;
  options.anti_alias_pooling = anti_alias;
  return options;
}

// Every variant, and the pooling each can have.
std::vector<AggregatorOptions> every_variant() {
  return {options_for(AggregatorVariant::kIbrnet, true),
          options_for(AggregatorVariant::kIbrnet, false),
          options_for(AggregatorVariant::kDynibarStatic, false),
          options_for(AggregatorVariant::kDynibarStatic, true),
          options_for(AggregatorVariant::kDynibarDynamic, false)};
}

std::string name_of(const AggregatorOptions& o) {
  const char* names[] = {"ibrnet", "dynibar_static", "dynibar_dynamic"};
  return std::string(names[int(o.variant)]) + (o.anti_alias_pooling ? " (anti-aliased)" : "");
}

// --- names, shapes, initialisation -----------------------------------------------------------

TEST(AggregatorParameters, NamesAndShapesAreIbrnetsStateDict) {
  ParameterSet set;
  set.add("feature_net.conv1.weight", {64, 3, 7, 7}, ParameterGroup::kFeature);
  const IbrnetAggregator net(set, "net_coarse.", AggregatorOptions{});
  const std::vector<std::pair<std::string, std::vector<int>>> expected = {
      {"s", {}},
      {"ray_dir_fc.0.weight", {16, 4}},
      {"ray_dir_fc.0.bias", {16}},
      {"ray_dir_fc.2.weight", {35, 16}},
      {"ray_dir_fc.2.bias", {35}},
      {"base_fc.0.weight", {64, 105}},
      {"base_fc.0.bias", {64}},
      {"base_fc.2.weight", {32, 64}},
      {"base_fc.2.bias", {32}},
      {"vis_fc.0.weight", {32, 32}},
      {"vis_fc.0.bias", {32}},
      {"vis_fc.2.weight", {33, 32}},
      {"vis_fc.2.bias", {33}},
      {"vis_fc2.0.weight", {32, 32}},
      {"vis_fc2.0.bias", {32}},
      {"vis_fc2.2.weight", {1, 32}},
      {"vis_fc2.2.bias", {1}},
      {"geometry_fc.0.weight", {64, 65}},
      {"geometry_fc.0.bias", {64}},
      {"geometry_fc.2.weight", {16, 64}},
      {"geometry_fc.2.bias", {16}},
      {"ray_attention.w_qs.weight", {16, 16}},
      {"ray_attention.w_ks.weight", {16, 16}},
      {"ray_attention.w_vs.weight", {16, 16}},
      {"ray_attention.fc.weight", {16, 16}},
      {"ray_attention.layer_norm.weight", {16}},
      {"ray_attention.layer_norm.bias", {16}},
      {"out_geometry_fc.0.weight", {16, 16}},
      {"out_geometry_fc.0.bias", {16}},
      {"out_geometry_fc.2.weight", {1, 16}},
      {"out_geometry_fc.2.bias", {1}},
      {"rgb_fc.0.weight", {16, 37}},
      {"rgb_fc.0.bias", {16}},
      {"rgb_fc.2.weight", {8, 16}},
      {"rgb_fc.2.bias", {8}},
      {"rgb_fc.4.weight", {1, 8}},
      {"rgb_fc.4.bias", {1}},
  };
  ASSERT_EQ(set.infos().size(), expected.size() + 1);
  size_t count = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ParameterInfo& info = set.infos()[i + 1];
    EXPECT_EQ(info.name, "net_coarse." + expected[i].first);
    EXPECT_EQ(info.shape, expected[i].second) << info.name;
    EXPECT_EQ(info.group, ParameterGroup::kMlp) << info.name;
    count += info.size;
  }
  EXPECT_EQ(net.parameter_offset(), size_t(64 * 3 * 7 * 7));
  EXPECT_EQ(net.parameter_count(), count);

  ParameterSet plain;
  AggregatorOptions no_pooling;
  no_pooling.anti_alias_pooling = false;
  const IbrnetAggregator without_s(plain, "net_fine.", no_pooling);
  EXPECT_EQ(plain.infos()[0].name, "net_fine.ray_dir_fc.0.weight");
  EXPECT_EQ(without_s.parameter_count(), count - 1);
}

// DynIBaR's DynibarStatic and DynibarDynamic at in_feat_ch 32: the published state_dicts' names,
// shapes and order, and their sizes (the published modules count 397,904 and 408,617).
TEST(AggregatorParameters, NamesAndShapesAreDynibarsStateDicts) {
  using Shapes = std::vector<std::pair<std::string, std::vector<int>>>;
  const Shapes trunk = {{"base_fc.2.weight", {128, 256}},
                        {"base_fc.2.bias", {128}},
                        {"vis_fc.0.weight", {128, 128}},
                        {"vis_fc.0.bias", {128}},
                        {"vis_fc.2.weight", {129, 128}},
                        {"vis_fc.2.bias", {129}},
                        {"vis_fc2.0.weight", {128, 128}},
                        {"vis_fc2.0.bias", {128}},
                        {"vis_fc2.2.weight", {1, 128}},
                        {"vis_fc2.2.bias", {1}},
                        {"geometry_fc.0.weight", {256, 257}},
                        {"geometry_fc.0.bias", {256}},
                        {"geometry_fc.2.weight", {128, 256}},
                        {"geometry_fc.2.bias", {128}},
                        {"ray_attention.w_qs.weight", {128, 128}},
                        {"ray_attention.w_ks.weight", {128, 128}},
                        {"ray_attention.w_vs.weight", {128, 128}},
                        {"ray_attention.fc.weight", {128, 128}},
                        {"ray_attention.layer_norm.weight", {128}},
                        {"ray_attention.layer_norm.bias", {128}}};
  const Shapes head = {{"out_geometry_fc.0.weight", {128, 128}},
                       {"out_geometry_fc.0.bias", {128}},
                       {"out_geometry_fc.2.weight", {1, 128}},
                       {"out_geometry_fc.2.bias", {1}}};
  auto join = [](std::initializer_list<Shapes> parts) {
    Shapes all;
    for (const Shapes& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  const Shapes expected_static = join({{{"ray_dir_fc.0.weight", {256, 103}},
                                        {"ray_dir_fc.0.bias", {256}},
                                        {"ray_dir_fc.2.weight", {35, 256}},
                                        {"ray_dir_fc.2.bias", {35}},
                                        {"ref_feature_fc.0.weight", {35, 66}},
                                        {"ref_feature_fc.0.bias", {35}},
                                        {"base_fc.0.weight", {256, 210}},
                                        {"base_fc.0.bias", {256}}},
                                       trunk,
                                       head,
                                       {{"rgb_fc.0.weight", {128, 261}},
                                        {"rgb_fc.0.bias", {128}},
                                        {"rgb_fc.2.weight", {64, 128}},
                                        {"rgb_fc.2.bias", {64}},
                                        {"rgb_fc.4.weight", {1, 64}},
                                        {"rgb_fc.4.bias", {1}}}});
  const Shapes expected_dynamic = join({{{"ray_dir_fc.0.weight", {256, 21}},
                                         {"ray_dir_fc.0.bias", {256}},
                                         {"ray_dir_fc.2.weight", {35, 256}},
                                         {"ray_dir_fc.2.bias", {35}},
                                         {"base_fc.0.weight", {256, 105}},
                                         {"base_fc.0.bias", {256}}},
                                        trunk,
                                        {{"ref_pts_fc.0.weight", {256, 161}},
                                         {"ref_pts_fc.0.bias", {256}},
                                         {"ref_pts_fc.2.weight", {128, 256}},
                                         {"ref_pts_fc.2.bias", {128}}},
                                        head,
                                        {{"rgb_fc.0.weight", {128, 155}},
                                         {"rgb_fc.0.bias", {128}},
                                         {"rgb_fc.2.weight", {64, 128}},
                                         {"rgb_fc.2.bias", {64}},
                                         {"rgb_fc.4.weight", {3, 64}},
                                         {"rgb_fc.4.bias", {3}}}});
  struct Expected {
    AggregatorVariant variant;
    const Shapes* shapes;
    size_t count;
  };
  for (const Expected& e :
       {Expected{AggregatorVariant::kDynibarStatic, &expected_static, 397904},
        Expected{AggregatorVariant::kDynibarDynamic, &expected_dynamic, 408617}}) {
    ParameterSet set;
    const IbrnetAggregator net(set, "net_coarse_st.", options_for(e.variant, false));
    ASSERT_EQ(set.infos().size(), e.shapes->size());
    for (size_t i = 0; i < e.shapes->size(); ++i) {
      EXPECT_EQ(set.infos()[i].name, "net_coarse_st." + (*e.shapes)[i].first);
      EXPECT_EQ(set.infos()[i].shape, (*e.shapes)[i].second) << set.infos()[i].name;
    }
    EXPECT_EQ(net.parameter_count(), e.count);
  }
  ParameterSet set;
  EXPECT_THROW(IbrnetAggregator(set, "net.", options_for(AggregatorVariant::kDynibarDynamic, true)),
               InvalidArgument);
}

// DynIBaR's networks are nn.Linear's defaults throughout (the published weights_init is never
// applied to them).
TEST(AggregatorParameters, DynibarInitialisationIsNnLinearsDefault) {
  ParameterSet set;
  IbrnetAggregator net(set, "net.", options_for(AggregatorVariant::kDynibarStatic, true));
  Initializer init(6);
  net.initialize(init);
  EXPECT_EQ(set.value(set.find("net.s"))[0], 0.2f);
  for (const ParameterInfo& info : set.infos()) {
    if (info.shape.size() != 2) continue;
    const float bound = float(1 / std::sqrt(double(info.shape[1])));
    const float* w = set.values().data() + info.offset;
    float largest = 0;
    for (size_t i = 0; i < info.size; ++i) largest = std::max(largest, std::abs(w[i]));
    EXPECT_LE(largest, bound) << info.name;
    EXPECT_GT(largest, bound / 2) << info.name;
  }
}

TEST(AggregatorParameters, InitialisationFollowsIbrnet) {
  ParameterSet set;
  IbrnetAggregator net(set, "net.", AggregatorOptions{});
  Initializer init(5);
  net.initialize(init);
  auto values = [&](const std::string& name) {
    const Parameter p = set.find("net." + name);
    return std::vector<float>(set.value(p), set.value(p) + set.info(p).size);
  };
  EXPECT_EQ(values("s")[0], 0.2f);
  // kaiming_normal_ (fan_in, gain sqrt(2)) weights and zero biases.
  for (const char* layer :
       {"base_fc.0", "base_fc.2", "vis_fc.0", "vis_fc.2", "vis_fc2.0", "vis_fc2.2", "geometry_fc.0",
        "geometry_fc.2", "rgb_fc.0", "rgb_fc.2", "rgb_fc.4"}) {
    const std::vector<float> w = values(std::string(layer) + ".weight");
    const int fan_in = set.info(set.find(std::string("net.") + layer + ".weight")).shape[1];
    double square = 0;
    for (float x : w) square += double(x) * x;
    const double expected = std::sqrt(2.0 / fan_in), rms = std::sqrt(square / double(w.size()));
    // A sample of n normals estimates the std within a few times 1/sqrt(2n) relative.
    EXPECT_NEAR(rms, expected, expected * (0.05 + 4 / std::sqrt(2.0 * double(w.size())))) << layer;
    for (float b : values(std::string(layer) + ".bias")) EXPECT_EQ(b, 0.0f) << layer;
  }
  // nn.Linear's default: weight and bias uniform within 1/sqrt(fan_in), and not degenerate.
  for (const char* layer :
       {"ray_dir_fc.0", "ray_dir_fc.2", "ray_attention.w_qs", "ray_attention.w_ks",
        "ray_attention.w_vs", "ray_attention.fc", "out_geometry_fc.0", "out_geometry_fc.2"}) {
    const std::string weight = std::string(layer) + ".weight";
    const int fan_in = set.info(set.find("net." + weight)).shape[1];
    const float bound = float(1 / std::sqrt(double(fan_in)));
    std::vector<float> all = values(weight);
    if (std::string(layer).rfind("ray_attention", 0) != 0) {
      const std::vector<float> bias = values(std::string(layer) + ".bias");
      all.insert(all.end(), bias.begin(), bias.end());
    }
    float largest = 0;
    for (float x : all) {
      EXPECT_LE(std::abs(x), bound) << layer;
      largest = std::max(largest, std::abs(x));
    }
    EXPECT_GT(largest, bound / 2) << layer;
  }
  for (float x : values("ray_attention.layer_norm.weight")) EXPECT_EQ(x, 1.0f);
  for (float x : values("ray_attention.layer_norm.bias")) EXPECT_EQ(x, 0.0f);

  // The same seed gives the same network.
  ParameterSet other;
  IbrnetAggregator twin(other, "net.", AggregatorOptions{});
  Initializer same(5);
  twin.initialize(same);
  EXPECT_EQ(other.values(), set.values());
}

// --- finite differences, threads, errors -----------------------------------------------------

// Directional derivatives along a random direction per parameter tensor, and for the inputs
// with a gradient.
TEST(Aggregator, DoubleBackwardMatchesFiniteDifferences) {
  for (const AggregatorOptions& options : every_variant()) {
    const auto p = make_problem(3, 4, 3, 5, options, 0.4, true, 21);
    const std::vector<double> params = block_values(*p);
    const Result at = run<double>(*p, params, p->rgb_features);
    auto loss = [&](const std::vector<double>& values, const std::vector<double>& features,
                    const std::vector<double>& xyz) {
      const Result r = run<double>(*p, values, features, &xyz);
      double sum = 0;
      for (size_t i = 0; i < r.rgb.size(); ++i) sum += r.rgb[i] * p->grad_rgb[i];
      for (size_t i = 0; i < r.sigma.size(); ++i) {  // DynIBaR's -1e9 for unseen is a constant
        if (r.sigma[i] != kMaskedDensity) sum += r.sigma[i] * p->grad_sigma[i];
      }
      return sum;
    };
    const double h = 1e-6;
    const auto expect_near = [&](const testing::DirectionalDerivative& d, const std::string& what) {
      EXPECT_NEAR(d.numeric, d.analytic, 1e-7 * std::max(1.0, std::abs(d.analytic)))
          << name_of(options) << " " << what;
    };
    for (const ParameterInfo& info : p->set.infos()) {
      const size_t begin = info.offset - p->net->parameter_offset();
      const std::vector<double> direction = synthetic::random_values(info.size, -1, 1, 100 + begin);
      expect_near(
          testing::directional_derivative(
              [&](const std::vector<double>& v) { return loss(v, p->rgb_features, p->xyz); },
              params, begin, direction, at.grads.data() + begin, h),
          info.name);
    }
    const std::vector<double> direction =
        synthetic::random_values(p->rgb_features.size(), -1, 1, 99);
    expect_near(testing::directional_derivative(
                    [&](const std::vector<double>& v) { return loss(params, v, p->xyz); },
                    p->rgb_features, 0, direction, at.grad_rgb_features.data(), h),
                "rgb_features");
    if (!is_dynamic(*p)) continue;
    const std::vector<double> xyz_direction = synthetic::random_values(p->xyz.size(), -1, 1, 98);
    expect_near(testing::directional_derivative(
                    [&](const std::vector<double>& v) { return loss(params, p->rgb_features, v); },
                    p->xyz, 0, xyz_direction, at.grad_xyz.data(), h),
                "xyz");
  }
}

void expect_same_bits(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.rgb, b.rgb) << what;
  EXPECT_EQ(a.sigma, b.sigma) << what;
  EXPECT_EQ(a.grad_rgb_features, b.grad_rgb_features) << what;
  EXPECT_EQ(a.grads, b.grads) << what;
  EXPECT_EQ(a.grad_xyz, b.grad_xyz) << what;
}

TEST(Aggregator, ResultsDoNotDependOnTheThreadCount) {
  for (const AggregatorOptions& options : every_variant()) {
    // 40 rays of 16 x 10 rows: four chunks, the last one short.
    const auto p = make_problem(40, 16, 10, 32, options, 0.2, true, 31);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Result one = run_on_set(*p);
    omp_set_num_threads(3);
    const Result three = run_on_set(*p);
    omp_set_num_threads(threads);
    expect_same_bits(one, three, name_of(options));
  }
}

// Stored activations are the ones the backward would recompute, so every output and gradient
// must be bit-identical between the two paths, at any thread count. Sizes: four chunks with a
// short last one; 70 one-ray chunks, more than one wave of gradient slots.
TEST(Aggregator, StoringActivationsGivesTheResultsOfRecomputingThem) {
  struct Size {
    int R, S, V, C;
  };
  for (const AggregatorOptions& options : every_variant()) {
    for (const Size size : {Size{40, 16, 10, 32}, Size{70, 64, 10, 8}}) {
      AggregatorOptions recompute = options, store = options;
      recompute.stored_activations_budget = 0;
      store.stored_activations_budget = SIZE_MAX;
      const auto p = make_problem(size.R, size.S, size.V, size.C, recompute, 0.2, true, 41);
      const auto q = make_problem(size.R, size.S, size.V, size.C, store, 0.2, true, 41);
      const std::string what = name_of(options) + ", " + std::to_string(size.R) + " rays";
      const int threads = omp_get_max_threads();
      for (int n_threads : {1, 3}) {
        omp_set_num_threads(n_threads);
        expect_same_bits(run_on_set(*p), run_on_set(*q),
                         what + ", " + std::to_string(n_threads) + " threads");
      }
      omp_set_num_threads(threads);
      expect_same_bits(run<double>(*p, block_values(*p), p->rgb_features),
                       run<double>(*q, block_values(*q), q->rgb_features), what + ", double");
    }
  }
}

// The workspace keeps the activations exactly when they fit the budget.
TEST(Aggregator, StoresActivationsWithinTheBudgetOnly) {
  const int R = 4, S = 16, V = 10, C = 32;
  const size_t rows = size_t(R) * S * V, samples = size_t(R) * S;
  std::vector<float> features(rows * (C + 3), 0.5f), diff(rows * 4, 0.5f), mask(rows, 1.0f),
      rgb(samples * 3), sigma(samples);
  auto stored_bytes = [&](size_t budget) {
    ParameterSet set;
    AggregatorOptions options;
    options.feature_channels = C;
    options.stored_activations_budget = budget;
    const IbrnetAggregator net(set, "net.", options);
    AggregatorWorkspace<float> ws;
    net.forward(R, S, V, {features.data(), diff.data(), mask.data()}, &ws, rgb.data(),
                sigma.data());
    EXPECT_EQ(ws.chunk_stride == 0, ws.activations.empty());
    return ws.activations.size() * sizeof(float);
  };
  const size_t needed = stored_bytes(SIZE_MAX);
  EXPECT_GT(needed, rows * 1024);  // about 2 KiB a row
  EXPECT_EQ(stored_bytes(needed), needed);
  EXPECT_EQ(stored_bytes(needed - 1), 0u);
  EXPECT_EQ(stored_bytes(0), 0u);
  EXPECT_GT(default_stored_activations_budget(), size_t(0));
  EXPECT_LE(default_stored_activations_budget(), size_t(2) << 30);
}

TEST(Aggregator, RejectsSizesItCannotRun) {
  ParameterSet set;
  AggregatorOptions options;
  options.n_samples_max = 8;
  const IbrnetAggregator net(set, "net.", options);
  std::vector<float> in(35 * 9 * 2), diff(4 * 9 * 2), mask(9 * 2, 1.0f), rgb(27), sigma(9);
  EXPECT_THROW(net.forward(1, 9, 2, {in.data(), diff.data(), mask.data()}, nullptr, rgb.data(),
                           sigma.data()),
               InvalidArgument);
  EXPECT_THROW(net.forward(1, 8, 0, {in.data(), diff.data(), mask.data()}, nullptr, rgb.data(),
                           sigma.data()),
               InvalidArgument);
  EXPECT_NO_THROW(net.forward(0, 8, 2, {in.data(), diff.data(), mask.data()}, nullptr, rgb.data(),
                              sigma.data()));
  // DynIBaR's networks need their geometry.
  for (AggregatorVariant variant :
       {AggregatorVariant::kDynibarStatic, AggregatorVariant::kDynibarDynamic}) {
    ParameterSet dynibar_set;
    AggregatorOptions dynibar = options_for(variant, false);
    dynibar.feature_channels = 32;
    const IbrnetAggregator dynibar_net(dynibar_set, "net.", dynibar);
    EXPECT_THROW(dynibar_net.forward(1, 8, 2, {in.data(), diff.data(), mask.data()}, nullptr,
                                     rgb.data(), sigma.data()),
                 InvalidArgument);
  }
  ParameterSet other;
  AggregatorOptions no_channels;
  no_channels.feature_channels = 0;
  EXPECT_THROW(IbrnetAggregator(other, "net.", no_channels), InvalidArgument);
}

// --- the PyTorch reference -------------------------------------------------------------------

struct ReferenceCase {
  int R, S, V, C;
  bool anti_alias;
  AttentionMask attention_mask;
  double s;
  bool edges;
  AggregatorVariant variant = AggregatorVariant::kIbrnet;
};

std::map<std::string, ReferenceCase> reference_cases() {
  const AttentionMask queries = AttentionMask::kQueries, keys = AttentionMask::kKeys;
  const AggregatorVariant st = AggregatorVariant::kDynibarStatic,
                          dy = AggregatorVariant::kDynibarDynamic;
  return {
      {"one_view", {2, 3, 1, 4, true, queries, 0.2, false}},
      {"edges", {3, 5, 4, 6, true, queries, -0.35, true}},
      {"edges_key_mask", {3, 5, 4, 6, true, keys, 0.7, true}},
      {"uniform_pooling", {3, 6, 5, 8, false, queries, 0, true}},
      {"ibrnet", {4, 16, 10, 32, true, queries, 0.2, true}},
      {"chunks", {40, 16, 10, 32, true, queries, 0.2, true}},  // 4 chunks, one short
      {"waves", {70, 64, 17, 3, true, queries, 0.2, true}},    // a chunk per ray, 2 waves
      {"static_edges", {3, 5, 4, 6, false, queries, 0, true, st}},
      {"static_anti_aliased", {3, 5, 4, 6, true, queries, 0.3, true, st}},
      {"static_one_view", {2, 3, 1, 4, false, queries, 0, false, st}},
      {"static_published", {4, 16, 7, 32, false, queries, 0, true, st}},
      {"dynamic_edges", {3, 5, 4, 6, false, queries, 0, true, dy}},
      {"dynamic_published", {4, 16, 7, 32, false, queries, 0, true, dy}},
      {"dynamic_chunks", {40, 16, 10, 8, false, queries, 0, true, dy}},
  };
}

class AggregatorReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-aggregator-" + std::to_string(::getpid()));
    fs::create_directories(root_);
    uint64_t seed = 1000;
    for (const auto& [name, c] : reference_cases()) {
      AggregatorOptions options = options_for(c.variant, c.anti_alias);
      options.attention_mask = c.attention_mask;
      auto p = make_problem(c.R, c.S, c.V, c.C, options, c.s, c.edges, seed += 10);
      const fs::path dir = root_ / name;
      fs::create_directories(dir);
      const char* networks[] = {"ibrnet", "dynibar_static", "dynibar_dynamic"};
      std::ofstream(dir / "case.json") << nlohmann::json{
          {"network", networks[int(c.variant)]},
          {"anti_alias_pooling", c.anti_alias},
          {"attention_mask", c.attention_mask == keys ? "keys" : "queries"},
          {"shift", options.density_shift}}.dump();
      const size_t R = size_t(c.R), S = size_t(c.S), V = size_t(c.V), W = size_t(c.C) + 3;
      test::write_npy(dir / "rgb_features.npy", {{R, S, V, W}, p->rgb_features});
      test::write_npy(dir / "ray_diff.npy", {{R, S, V, 4}, p->ray_diff});
      test::write_npy(dir / "mask.npy", {{R, S, V}, p->mask});
      test::write_npy(dir / "xyz.npy", {{R, S, 3}, p->xyz});
      test::write_npy(dir / "src_rays.npy", {{R, S, V, 6}, p->src_rays});
      test::write_npy(dir / "target_rays.npy", {{R, 6}, p->target_rays});
      test::write_npy(dir / "time.npy", {{R}, p->time});
      test::write_npy(dir / "view_dir.npy", {{R, 3}, p->view_dir});
      test::write_npy(dir / "grad_rgb.npy", {{R, S, 3}, p->grad_rgb});
      test::write_npy(dir / "grad_sigma.npy", {{R, S}, p->grad_sigma});
      for (const ParameterInfo& info : p->set.infos()) {
        const float* v = p->set.values().data() + info.offset;
        test::write_npy(dir / ("param." + info.name.substr(kPrefix.size()) + ".npy"),
                        {std::vector<size_t>(info.shape.begin(), info.shape.end()),
                         std::vector<double>(v, v + info.size)});
      }
      problems_[name] = std::move(p);
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/aggregator_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    problems_.clear();
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }

  static void check(const std::string& name) {
    ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch: "
                             "scripts/setup.sh installs it)";
    Problem& p = *problems_.at(name);
    const fs::path dir = root_ / name;
    auto reference = [&](const std::string& output) {
      return test::read_npy(dir / ("ref_" + output + ".npy")).data;
    };
    auto largest = [](const std::vector<double>& v) {
      double m = 0;
      for (double x : v) m = std::max(m, std::abs(x));
      return m;
    };
    // Parameter gradients far below the network's largest are cancellation residues (V = 1
    // leaves some that are only the 1e-8 of the weight normalisation), which the float64
    // reference itself holds to about 1e-8 relative: they are measured on 1e-6 of that scale.
    double network_scale = 0;
    for (const ParameterInfo& info : p.set.infos()) {
      network_scale = std::max(
          network_scale, largest(reference("grad_param." + info.name.substr(kPrefix.size()))));
    }
    double worst[2] = {0, 0};
    for (bool single : {false, true}) {
      const Result ours = single ? run_on_set(p) : run<double>(p, block_values(p), p.rgb_features);
      // DynIBaR's networks give unseen samples the density -1e9 exactly; the rest is measured
      // on its own scale.
      std::vector<double> ours_sigma, ref_sigma;
      const std::vector<double> all_ref_sigma = reference("sigma");
      for (size_t i = 0; i < all_ref_sigma.size(); ++i) {
        if (all_ref_sigma[i] == kMaskedDensity) {
          EXPECT_EQ(ours.sigma[i], kMaskedDensity) << name << " sample " << i;
        } else {
          ours_sigma.push_back(ours.sigma[i]);
          ref_sigma.push_back(all_ref_sigma[i]);
        }
      }
      std::vector<std::pair<std::string, const std::vector<double>*>> outputs = {
          {"rgb", &ours.rgb}, {"grad_rgb_features", &ours.grad_rgb_features}};
      if (is_dynamic(p)) outputs.emplace_back("grad_xyz", &ours.grad_xyz);
      std::vector<std::vector<double>> param_grads;
      for (const ParameterInfo& info : p.set.infos()) {
        const size_t begin = info.offset - p.net->parameter_offset();
        param_grads.emplace_back(ours.grads.begin() + begin,
                                 ours.grads.begin() + begin + info.size);
      }
      for (size_t i = 0; i < param_grads.size(); ++i) {
        outputs.emplace_back("grad_param." + p.set.infos()[i].name.substr(kPrefix.size()),
                             &param_grads[i]);
      }
      outputs.emplace_back("sigma", &ours_sigma);
      for (const auto& [output, values] : outputs) {
        const std::vector<double> ref = output == "sigma" ? ref_sigma : reference(output);
        ASSERT_EQ(values->size(), ref.size()) << output;
        double floor = output.rfind("grad_param.", 0) == 0 ? 1e-6 * network_scale : 0;
        // rgb_fc.4.bias shifts every blending logit of a sample alike, which the softmax over
        // views ignores: its gradient is zero but for rounding, measured on its weight's scale.
        if (output == "grad_param.rgb_fc.4.bias") {
          floor = largest(reference("grad_param.rgb_fc.4.weight"));
        }
        const double error = relative_error(*values, ref, floor);
        const bool gradient = output.rfind("grad_", 0) == 0;
        const double bound = single ? (gradient ? 1e-4 : 1e-5) : 1e-10;
        EXPECT_LE(error, bound) << name << " " << output << (single ? " (float)" : " (double)");
        worst[single] = std::max(worst[single], error / bound);
        if (std::getenv("MVIBR_VERBOSE")) {
          std::printf("    %s %s %.2e\n", output.c_str(), single ? "f" : "d", error);
        }
      }
    }
    std::printf("  %-18s double %.1e  float %.1e of bound\n", name.c_str(), worst[0], worst[1]);
  }

  static inline const std::string kPrefix = "net_coarse.";
  static inline const AttentionMask keys = AttentionMask::kKeys;
  static inline fs::path root_;
  static inline std::map<std::string, std::unique_ptr<Problem>> problems_;
  static inline int status_ = -1;
};

TEST_F(AggregatorReference, OneView) {
  check("one_view");
}
TEST_F(AggregatorReference, EmptyAndSingleViewSamplesAndAnEmptyRay) {
  check("edges");
}
TEST_F(AggregatorReference, KeyPaddingMask) {
  check("edges_key_mask");
}
TEST_F(AggregatorReference, UniformPooling) {
  check("uniform_pooling");
}
TEST_F(AggregatorReference, IbrnetSizes) {
  check("ibrnet");
}
TEST_F(AggregatorReference, SeveralChunks) {
  check("chunks");
}
TEST_F(AggregatorReference, SeveralWavesOfChunks) {
  check("waves");
}
TEST_F(AggregatorReference, DynibarStaticEdges) {
  check("static_edges");
}
TEST_F(AggregatorReference, DynibarStaticAntiAliased) {
  check("static_anti_aliased");
}
TEST_F(AggregatorReference, DynibarStaticOneView) {
  check("static_one_view");
}
TEST_F(AggregatorReference, DynibarStaticPublishedSizes) {
  check("static_published");
}
TEST_F(AggregatorReference, DynibarDynamicEdges) {
  check("dynamic_edges");
}
TEST_F(AggregatorReference, DynibarDynamicPublishedSizes) {
  check("dynamic_published");
}
TEST_F(AggregatorReference, DynibarDynamicSeveralChunks) {
  check("dynamic_chunks");
}

}  // namespace
}  // namespace mvibr::nn
