// DynIBaR's losses (render/dynibar_losses.h) against the PyTorch float64 reference
// (test/reference/dynibar_losses_reference.py): every weighted term, the total's gradient into
// every differentiable input through dynibar_losses, and each term's own gradient through its
// cpu:: function, in double (normwise relative error within 1e-10) and float (1e-5 for values,
// 1e-4 for gradients). Cases: both phases, the weights of several epochs (the dynamic-region term
// on and off, the suppression on), an all-masked batch (only the 1e-8 and 1e-6 guards left in
// the denominators), dynamic/static ratios of exactly 0 and 1 and a clamped ratio, depths below
// the disparity clamp, and minimal sizes. The schedule's weights and learning rates are checked
// bit for bit against the reference's train.py arithmetic and torch's own StepLR, and every
// term's double backward against central differences.
#include "mvibr/render/dynibar_losses.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "support/finite_difference.h"

namespace mvibr {
namespace {

namespace fs = std::filesystem;
using Arrays = std::map<std::string, std::vector<double>>;

struct Sizes {
  int rays, samples, flows, pairs, scene_flows;
};

// Every input's shape under its DynibarLossBatch / DynibarRendered name.
std::map<std::string, std::vector<size_t>> shapes(const Sizes& z) {
  const size_t R = size_t(z.rays), S = size_t(z.samples), K = size_t(z.flows), P = size_t(z.pairs),
               F = size_t(z.scene_flows);
  return {{"target_rgb", {R, 3}},
          {"target_disparity", {R}},
          {"target_flows", {K, R, 2}},
          {"flow_validity", {K, R}},
          {"motion_mask", {R}},
          {"static_mask", {R}},
          {"ray_mask", {R}},
          {"dynamic_only_ray_mask", {R}},
          {"cross_time_ray_mask", {R}},
          {"cross_time_dynamic_only_ray_mask", {R}},
          {"cross_time_occlusion_map", {R}},
          {"cross_time_dynamic_only_occlusion_map", {R}},
          {"occlusion_weights", {R, S}},
          {"s_vals", {R, S}},
          {"rgb", {R, 3}},
          {"rgb_static", {R, 3}},
          {"rgb_dynamic", {R, 3}},
          {"depth", {R}},
          {"weights", {R, S}},
          {"weights_static", {R, S}},
          {"weights_dynamic", {R, S}},
          {"render_flows", {K, R, 2}},
          {"dynamic_only_rgb", {R, 3}},
          {"cross_time_rgb", {R, 3}},
          {"points_ref", {P, R, S, 3}},
          {"points_anchor", {P, R, S, 3}},
          {"scene_flow", {F, R, S, 3}},
          {"cross_time_dynamic_only_rgb", {R, 3}},
          {"static_only_rgb", {R, 3}}};
}

const char* const kDifferentiable[] = {"rgb",
                                       "rgb_static",
                                       "rgb_dynamic",
                                       "depth",
                                       "weights",
                                       "weights_static",
                                       "weights_dynamic",
                                       "render_flows",
                                       "dynamic_only_rgb",
                                       "cross_time_rgb",
                                       "points_ref",
                                       "points_anchor",
                                       "scene_flow",
                                       "cross_time_dynamic_only_rgb",
                                       "static_only_rgb"};

size_t element_count(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

enum class Edit { kNone, kEdges, kAllMasked };

struct LossCase {
  const char* name;
  Sizes sizes;
  DynibarScheduleOptions options;
  int64_t step;
  Edit edit;
  int learning_rate_steps;
};

// Small runs: 5 frames, 4 decay epochs (2 bootstrap epochs = 10 steps, decays every 20 main
// updates), main epoch m at step 10 + 5 m.
DynibarScheduleOptions small_schedule() {
  DynibarScheduleOptions o;
  o.num_frames = 5;
  o.init_decay_epoch = 4;
  return o;
}

// Every option away from its default, the decay factor not a power of two.
DynibarScheduleOptions odd_schedule() {
  DynibarScheduleOptions o;
  o.num_frames = 7;
  o.init_decay_epoch = 3;
  o.decay_rate = 3;
  o.w_disp = 0.3;
  o.w_flow = 0.07;
  o.w_cycle = 0.25;
  o.anneal_cycle = false;
  o.w_reg = 0.02;
  o.w_skew_entropy = 2e-3;
  o.w_distortion = 3e-3;
  o.lrate_feature = 7e-4;
  o.lrate_mlp = 3e-4;
  o.lrate_decay_factor = 0.3;
  return o;
}

const Sizes kSizes{37, 11, 6, 4, 6};

std::vector<LossCase> loss_cases() {
  return {{"early", kSizes, small_schedule(), 10 + 3, Edit::kNone, 230},
          {"decayed", kSizes, small_schedule(), 10 + 5 * 9 + 1, Edit::kNone, 0},
          {"late", kSizes, small_schedule(), 10 + 5 * 23 + 2, Edit::kNone, 0},
          {"edges", kSizes, small_schedule(), 10 + 5 * 21 + 4, Edit::kEdges, 0},
          {"all_masked", kSizes, small_schedule(), 10 + 5 * 20, Edit::kAllMasked, 0},
          {"bootstrap", kSizes, small_schedule(), 7, Edit::kNone, 0},
          {"minimal", {1, 2, 1, 1, 2}, small_schedule(), 10 + 5 * 4, Edit::kNone, 0},
          {"odd_schedule", {9, 5, 6, 3, 6}, odd_schedule(), 7 + 7 * 7 + 3, Edit::kNone, 150}};
}

// Random inputs that floats represent exactly: colours in [0, 1], masks of 0 and 1 (70% ones),
// occlusion weights in [0, 1], s_vals increasing along each ray, weights whose sums stay below
// 1, a few static pixels with a small dynamic share (ratio below 0.1), depths down to 2e-3 (some
// below the clamp).
Arrays make_inputs(const LossCase& c, uint64_t seed) {
  Arrays x;
  for (const auto& [name, shape] : shapes(c.sizes)) {
    const size_t n = element_count(shape);
    const bool mask = name.find("mask") != std::string::npos || name == "flow_validity";
    double lo = 0, hi = 1;
    if (name == "target_disparity") lo = 0.1, hi = 5;
    if (name == "depth") lo = 2e-3, hi = 3;
    if (name.find("flows") != std::string::npos) lo = -3, hi = 3;
    if (name.rfind("points_", 0) == 0) lo = -1, hi = 1;
    if (name == "scene_flow") lo = -0.1, hi = 0.1;
    if (name == "weights") hi = 2.0 / c.sizes.samples;
    if (name == "weights_static" || name == "weights_dynamic") hi = 1.0 / c.sizes.samples;
    std::vector<double> v = synthetic::random_values(n, lo, hi, seed++);
    for (double& e : v) e = mask ? double(e < 0.7) : double(float(e));
    x[name] = v;
  }
  const size_t R = size_t(c.sizes.rays), S = size_t(c.sizes.samples);
  for (size_t r = 0; r < R; ++r) {
    std::sort(x["s_vals"].begin() + long(r * S), x["s_vals"].begin() + long((r + 1) * S));
  }
  // Static pixels with a small dynamic share: the suppression's rays.
  for (size_t r = 3; r < std::min<size_t>(R, 9); ++r) {
    for (size_t s = 0; s < S; ++s) x["weights_dynamic"][r * S + s] *= 0.0625;  // exact in float
    x["static_mask"][r] = 0;
    x["ray_mask"][r] = 1;
  }
  if (c.edit == Edit::kEdges) {
    for (size_t s = 0; s < S; ++s) {
      for (size_t r = 10; r < 13; ++r) x["weights_dynamic"][r * S + s] = 0;  // ratio 0
      for (size_t r = 13; r < 16; ++r) x["weights_static"][r * S + s] = 0;   // ratio 1
      for (size_t r = 16; r < 18; ++r) {  // a + b below 1e-9: the clamp
        x["weights_dynamic"][r * S + s] = 0;
        x["weights_static"][r * S + s] = 0;
      }
    }
    for (size_t r = 10; r < 18; ++r) x["static_mask"][r] = 0, x["ray_mask"][r] = 1;
    for (size_t r = 20; r < 25; ++r) x["depth"][r] = double(float(1e-3 * double(r - 19)));
  }
  if (c.edit == Edit::kAllMasked) {
    for (const char* name : {"ray_mask", "dynamic_only_ray_mask", "cross_time_ray_mask",
                             "cross_time_dynamic_only_ray_mask", "motion_mask", "flow_validity",
                             "occlusion_weights"}) {
      std::fill(x[name].begin(), x[name].end(), 0.0);
    }
    std::fill(x["static_mask"].begin(), x["static_mask"].end(), 1.0);
  }
  return x;
}

template <typename T>
std::map<std::string, std::vector<T>> cast(const Arrays& x) {
  std::map<std::string, std::vector<T>> out;
  for (const auto& [name, v] : x) out[name] = std::vector<T>(v.begin(), v.end());
  return out;
}

// The renders' pointers into a map of arrays (values or gradients).
template <typename P, typename Map>
DynibarRendered<P> rendered(Map& m) {
  DynibarRendered<P> r;
  r.rgb = m.at("rgb").data();
  r.rgb_static = m.at("rgb_static").data();
  r.rgb_dynamic = m.at("rgb_dynamic").data();
  r.depth = m.at("depth").data();
  r.weights = m.at("weights").data();
  r.weights_static = m.at("weights_static").data();
  r.weights_dynamic = m.at("weights_dynamic").data();
  r.render_flows = m.at("render_flows").data();
  r.dynamic_only_rgb = m.at("dynamic_only_rgb").data();
  r.cross_time_rgb = m.at("cross_time_rgb").data();
  r.points_ref = m.at("points_ref").data();
  r.points_anchor = m.at("points_anchor").data();
  r.scene_flow = m.at("scene_flow").data();
  r.cross_time_dynamic_only_rgb = m.at("cross_time_dynamic_only_rgb").data();
  r.static_only_rgb = m.at("static_only_rgb").data();
  return r;
}

template <typename T>
DynibarLossBatch<T> batch_of(const Sizes& z, const std::map<std::string, std::vector<T>>& v) {
  DynibarLossBatch<T> b;
  b.n_rays = z.rays;
  b.n_samples = z.samples;
  b.n_flows = z.flows;
  b.n_cycle_pairs = z.pairs;
  b.n_scene_flows = z.scene_flows;
  b.target_rgb = v.at("target_rgb").data();
  b.target_disparity = v.at("target_disparity").data();
  b.target_flows = v.at("target_flows").data();
  b.flow_validity = v.at("flow_validity").data();
  b.motion_mask = v.at("motion_mask").data();
  b.static_mask = v.at("static_mask").data();
  b.ray_mask = v.at("ray_mask").data();
  b.dynamic_only_ray_mask = v.at("dynamic_only_ray_mask").data();
  b.cross_time_ray_mask = v.at("cross_time_ray_mask").data();
  b.cross_time_dynamic_only_ray_mask = v.at("cross_time_dynamic_only_ray_mask").data();
  b.cross_time_occlusion_map = v.at("cross_time_occlusion_map").data();
  b.cross_time_dynamic_only_occlusion_map = v.at("cross_time_dynamic_only_occlusion_map").data();
  b.occlusion_weights = v.at("occlusion_weights").data();
  b.s_vals = v.at("s_vals").data();
  b.rendered = rendered<const T>(v);
  return b;
}

template <typename T>
std::map<std::string, std::vector<T>> zero_gradients(const Sizes& z) {
  std::map<std::string, std::vector<T>> g;
  const auto all = shapes(z);
  for (const char* name : kDifferentiable) g[name].assign(element_count(all.at(name)), T(0));
  return g;
}

struct StepResult {
  DynibarLossTerms terms;
  Arrays grads;
};

template <typename T>
StepResult run_step(const LossCase& c, const Arrays& x) {
  const auto v = cast<T>(x);
  auto g = zero_gradients<T>(c.sizes);
  // Stale values where the gradients go: dynibar_losses overwrites them.
  for (auto& [name, grad] : g) std::fill(grad.begin(), grad.end(), T(7));
  StepResult out;
  out.terms =
      dynibar_losses(dynibar_loss_weights(c.step, c.options), batch_of(c.sizes, v), rendered<T>(g));
  for (const auto& [name, grad] : g)
    out.grads[name] = std::vector<double>(grad.begin(), grad.end());
  return out;
}

// One term through its cpu:: function, weighted as the step weights it, its masks built as the
// step builds them; the static-region and suppression masks, which no gradient reaches, from
// `detached`'s ratio (so that central differences hold them fixed). Adds d term / d input into
// `grads` where not null.
template <typename T>
double term(const std::string& name, const Sizes& z, const std::map<std::string, std::vector<T>>& v,
            const std::map<std::string, std::vector<T>>& detached, double weight,
            std::map<std::string, std::vector<T>>* grads) {
  const int R = z.rays, S = z.samples;
  const auto in = [&](const char* n) { return v.at(n).data(); };
  const auto grad = [&](const char* n) { return grads ? grads->at(n).data() : nullptr; };
  const auto product = [&](const char* a, const char* b) {
    std::vector<T> p(v.at(a).size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = v.at(a)[i] * v.at(b)[i % size_t(R)];
    return p;
  };
  const size_t rays = size_t(R);
  std::vector<T> static_pixels(rays), static_region(rays), suppressed(rays);
  std::vector<double> ratio(rays);
  cpu::dynamic_weight_ratio(R, S, detached.at("weights_dynamic").data(),
                            detached.at("weights_static").data(), ratio.data());
  for (size_t r = 0; r < rays; ++r) {
    const double pixels = (1 - double(v.at("static_mask")[r])) * double(v.at("ray_mask")[r]);
    static_pixels[r] = T(pixels);
    static_region[r] = T(pixels * (1 - ratio[r]));
    suppressed[r] = ratio[r] < kSuppressionRatioBelow ? static_region[r] : T(0);
  }
  if (name == "static_bootstrap") {
    return weight * cpu::charbonnier_loss(R, in("static_only_rgb"), in("target_rgb"),
                                          static_pixels.data(), weight, grad("static_only_rgb"))
                        .value();
  }
  if (name == "composite") {
    return weight * cpu::charbonnier_loss(R, in("rgb"), in("target_rgb"), in("ray_mask"), weight,
                                          grad("rgb"))
                        .value();
  }
  if (name == "cross_time") {
    return weight * cpu::occlusion_weighted_charbonnier_loss(
                        R, in("cross_time_rgb"), in("target_rgb"), in("cross_time_ray_mask"),
                        in("cross_time_occlusion_map"), weight, grad("cross_time_rgb"))
                        .value();
  }
  if (name == "dynamic_region") {
    const std::vector<T> mask = product("ray_mask", "motion_mask");
    return weight * cpu::charbonnier_loss(R, in("rgb_dynamic"), in("target_rgb"), mask.data(),
                                          weight, grad("rgb_dynamic"))
                        .value();
  }
  if (name == "dynamic_only") {
    const std::vector<T> mask = product("dynamic_only_ray_mask", "motion_mask");
    return weight * cpu::charbonnier_loss(R, in("dynamic_only_rgb"), in("target_rgb"), mask.data(),
                                          weight, grad("dynamic_only_rgb"))
                        .value();
  }
  if (name == "cross_time_dynamic_only") {
    const std::vector<T> mask = product("cross_time_dynamic_only_ray_mask", "motion_mask");
    return weight * cpu::occlusion_weighted_charbonnier_loss(
                        R, in("cross_time_dynamic_only_rgb"), in("target_rgb"), mask.data(),
                        in("cross_time_dynamic_only_occlusion_map"), weight,
                        grad("cross_time_dynamic_only_rgb"))
                        .value();
  }
  if (name == "disparity") {
    return weight * cpu::disparity_l1_loss(R, in("depth"), in("target_disparity"), in("ray_mask"),
                                           weight, grad("depth"))
                        .value();
  }
  if (name == "flow") {
    const std::vector<T> mask = product("flow_validity", "ray_mask");
    return weight * cpu::flow_l1_loss(z.flows, R, in("render_flows"), in("target_flows"),
                                      mask.data(), weight, grad("render_flows"))
                        .value();
  }
  if (name == "cycle") {
    return weight * cpu::trajectory_cycle_loss(z.pairs, R, S, in("points_ref"), in("points_anchor"),
                                               in("occlusion_weights"), weight, grad("points_ref"),
                                               grad("points_anchor"))
                        .value();
  }
  if (name == "scene_flow") {  // the three regularisers together
    const SceneFlowRegularizers s = cpu::scene_flow_regularizers(
        z.scene_flows, R, S, in("scene_flow"), weight, grad("scene_flow"));
    return weight * (s.magnitude.value() + s.temporal.value() + s.spatial.value());
  }
  if (name == "skew_entropy") {
    return weight * cpu::skew_entropy_loss(R, S, in("weights_dynamic"), in("weights_static"),
                                           weight, grad("weights_dynamic"), grad("weights_static"))
                        .value();
  }
  if (name == "distortion") {
    return weight *
           cpu::distortion_loss(R, S, in("weights"), in("s_vals"), weight, grad("weights")).value();
  }
  if (name == "static_region") {
    return weight * cpu::charbonnier_loss(R, in("rgb_static"), in("target_rgb"),
                                          static_region.data(), weight, grad("rgb_static"))
                        .value();
  }
  if (name == "dynamic_weight_suppression") {
    return weight * cpu::dynamic_weight_suppression_loss(R, S, in("weights_dynamic"),
                                                         suppressed.data(), weight,
                                                         grad("weights_dynamic"))
                        .value();
  }
  ADD_FAILURE() << "no term " << name;
  return 0;
}

// The terms a case computes, with their weights and the inputs they read.
struct TermUse {
  std::string name;
  double weight;
  std::vector<std::string> inputs;
};

std::vector<TermUse> terms_of(const DynibarLossWeights& w) {
  std::vector<TermUse> all = {
      {"static_bootstrap", w.static_bootstrap, {"static_only_rgb"}},
      {"composite", w.composite, {"rgb"}},
      {"cross_time", w.cross_time, {"cross_time_rgb"}},
      {"dynamic_region", w.dynamic_region, {"rgb_dynamic"}},
      {"dynamic_only", w.dynamic_only, {"dynamic_only_rgb"}},
      {"cross_time_dynamic_only", w.cross_time_dynamic_only, {"cross_time_dynamic_only_rgb"}},
      {"disparity", w.disparity, {"depth"}},
      {"flow", w.flow, {"render_flows"}},
      {"cycle", w.cycle, {"points_ref", "points_anchor"}},
      {"scene_flow", w.scene_flow, {"scene_flow"}},
      {"skew_entropy", w.skew_entropy, {"weights_dynamic", "weights_static"}},
      {"distortion", w.distortion, {"weights"}},
      {"static_region", w.static_region, {"rgb_static"}},
      {"dynamic_weight_suppression", w.dynamic_weight_suppression, {"weights_dynamic"}}};
  std::vector<TermUse> on;
  for (const TermUse& t : all) {
    if (t.weight != 0) on.push_back(t);
  }
  return on;
}

double term_value(const DynibarLossTerms& t, const std::string& name) {
  const std::map<std::string, double> values = {
      {"static_bootstrap", t.static_bootstrap},
      {"composite", t.composite},
      {"cross_time", t.cross_time},
      {"dynamic_region", t.dynamic_region},
      {"dynamic_only", t.dynamic_only},
      {"cross_time_dynamic_only", t.cross_time_dynamic_only},
      {"disparity", t.disparity},
      {"flow", t.flow},
      {"cycle", t.cycle},
      {"scene_flow_magnitude", t.scene_flow_magnitude},
      {"scene_flow_temporal", t.scene_flow_temporal},
      {"scene_flow_spatial", t.scene_flow_spatial},
      {"skew_entropy", t.skew_entropy},
      {"distortion", t.distortion},
      {"static_region", t.static_region},
      {"dynamic_weight_suppression", t.dynamic_weight_suppression},
      {"rgb", t.rgb},
      {"static_loss", t.static_loss},
      {"total", t.total}};
  return values.at(name);
}

double scalar_error(double ours, double reference) {
  return normwise_relative_error(std::vector<double>{ours}, std::vector<double>{reference});
}

class DynibarLossesReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-dynibar-losses-" + std::to_string(::getpid()));
    uint64_t seed = 1000;
    for (const LossCase& c : loss_cases()) {
      const fs::path dir = root_ / c.name;
      fs::create_directories(dir);
      inputs()[c.name] = make_inputs(c, seed += 100);
      const DynibarScheduleOptions& o = c.options;
      const nlohmann::json spec = {{"step", c.step},
                                   {"learning_rate_steps", c.learning_rate_steps},
                                   {"schedule",
                                    {{"num_frames", o.num_frames},
                                     {"init_decay_epoch", o.init_decay_epoch},
                                     {"decay_rate", o.decay_rate},
                                     {"w_disp", o.w_disp},
                                     {"w_flow", o.w_flow},
                                     {"w_cycle", o.w_cycle},
                                     {"cycle_factor", o.cycle_factor},
                                     {"anneal_cycle", o.anneal_cycle},
                                     {"w_reg", o.w_reg},
                                     {"w_skew_entropy", o.w_skew_entropy},
                                     {"w_distortion", o.w_distortion},
                                     {"lrate_feature", o.lrate_feature},
                                     {"lrate_mlp", o.lrate_mlp},
                                     {"lrate_decay_factor", o.lrate_decay_factor}}}};
      std::ofstream(dir / "case.json") << spec.dump();
      for (const auto& [name, shape] : shapes(c.sizes)) {
        test::write_npy((dir / (name + ".npy")).string(), {shape, inputs()[c.name].at(name)});
      }
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/dynibar_losses_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }
  static std::map<std::string, Arrays>& inputs() {
    static std::map<std::string, Arrays> all;
    return all;
  }
  static nlohmann::json json(const LossCase& c, const char* file) {
    return nlohmann::json::parse(std::ifstream(root_ / c.name / file));
  }
  static std::vector<double> reference(const LossCase& c, const std::string& file) {
    return test::read_npy((root_ / c.name / file).string()).data;
  }

  // Every value and gradient of every case in T against the reference; prints the worst.
  template <typename T>
  static void check(double value_bound, double grad_bound, const char* precision) {
    double worst_value = 0, worst_grad = 0, worst_term_grad = 0;
    for (const LossCase& c : loss_cases()) {
      const Arrays& x = inputs()[c.name];
      const std::string trace = std::string(c.name) + " in " + precision;
      const StepResult step = run_step<T>(c, x);
      const nlohmann::json ref_terms = json(c, "ref_terms.json");
      for (const auto& [name, value] : ref_terms.items()) {
        const double e = scalar_error(term_value(step.terms, name), value.template get<double>());
        EXPECT_LE(e, value_bound) << trace << ": " << name;
        worst_value = std::max(worst_value, e);
      }
      for (const char* name : kDifferentiable) {
        const double e = normwise_relative_error(
            step.grads.at(name), reference(c, std::string("ref_grad_") + name + ".npy"));
        EXPECT_LE(e, grad_bound) << trace << ": d total / d " << name;
        worst_grad = std::max(worst_grad, e);
      }
      // Each term alone, through its own function.
      const auto v = cast<T>(x);
      for (const TermUse& use : terms_of(dynibar_loss_weights(c.step, c.options))) {
        auto g = zero_gradients<T>(c.sizes);
        const double value = term(use.name, c.sizes, v, v, use.weight, &g);
        const std::vector<std::string> parts =
            use.name == "scene_flow"
                ? std::vector<std::string>{"scene_flow_magnitude", "scene_flow_temporal",
                                           "scene_flow_spatial"}
                : std::vector<std::string>{use.name};
        double expected = 0;
        for (const std::string& p : parts) expected += ref_terms.at(p).get<double>();
        EXPECT_LE(scalar_error(value, expected), value_bound) << trace << ": " << use.name;
        for (const std::string& input : use.inputs) {
          std::vector<double> expected_grad(g.at(input).size(), 0.0);
          for (const std::string& p : parts) {
            const std::vector<double> r = reference(c, "ref_grad_" + p + "." + input + ".npy");
            for (size_t i = 0; i < r.size(); ++i) expected_grad[i] += r[i];
          }
          if (c.edit == Edit::kNone) {  // no term passes by having no gradient
            EXPECT_TRUE(std::any_of(expected_grad.begin(), expected_grad.end(),
                                    [](double e) { return e != 0; }))
                << trace << ": d " << use.name << " / d " << input;
          }
          const std::vector<double> ours(g.at(input).begin(), g.at(input).end());
          const double e = normwise_relative_error(ours, expected_grad);
          EXPECT_LE(e, grad_bound) << trace << ": d " << use.name << " / d " << input;
          worst_term_grad = std::max(worst_term_grad, e);
        }
      }
    }
    std::printf("  %-6s values %.1e, total's gradients %.1e, each term's gradients %.1e\n",
                precision, worst_value, worst_grad, worst_term_grad);
  }

  static inline fs::path root_;
  static inline int status_ = -1;
};

TEST_F(DynibarLossesReference, DoubleMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<double>(1e-10, 1e-10, "double");
}

TEST_F(DynibarLossesReference, FloatMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<float>(1e-5, 1e-4, "float");
}

TEST_F(DynibarLossesReference, ScheduleIsTrainPysToTheBit) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  for (const LossCase& c : loss_cases()) {
    const DynibarLossWeights w = dynibar_loss_weights(c.step, c.options);
    const nlohmann::json ref = json(c, "ref_weights.json");
    EXPECT_EQ(w.phase == DynibarPhase::kMain ? "main" : "bootstrap",
              ref.at("phase").get<std::string>())
        << c.name;
    EXPECT_EQ(w.main_epoch, ref.at("main_epoch").get<int64_t>()) << c.name;
    EXPECT_EQ(w.divisor, ref.at("divisor").get<int64_t>()) << c.name;
    const std::vector<TermUse> on = terms_of(w);
    for (const TermUse& use : on) {
      EXPECT_EQ(use.weight, ref.at(use.name).get<double>()) << c.name << ": " << use.name;
    }
    for (const char* name : {"static_bootstrap", "dynamic_region", "dynamic_weight_suppression"}) {
      const bool computed =
          std::any_of(on.begin(), on.end(), [&](const TermUse& t) { return t.name == name; });
      EXPECT_EQ(computed, ref.at(name).get<double>() != 0) << c.name << ": " << name;
    }
    // Each DynibarMono group's rate for every update, against torch's Adam and StepLR.
    const std::vector<double> rates = reference(c, "ref_learning_rates.npy");
    const DynibarScheduleOptions& o = c.options;
    const double initial[6] = {o.lrate_mlp * kDynibarStaticRateMultiplier,
                               o.lrate_feature * kDynibarStaticRateMultiplier,
                               o.lrate_mlp,
                               o.lrate_feature,
                               o.lrate_mlp,
                               o.lrate_mlp * kDynibarBasisRateMultiplier};
    ASSERT_EQ(rates.size(), size_t(c.learning_rate_steps) * 6) << c.name;
    for (int64_t s = 0; s < c.learning_rate_steps; ++s) {
      for (size_t group = 0; group < 6; ++group) {
        EXPECT_EQ(dynibar_learning_rate(initial[group], s, o), rates[size_t(s) * 6 + group])
            << c.name << ": step " << s << ", group " << group;
      }
    }
  }
}

// ---- without the reference -------------------------------------------------------------------

// Central differences of each term (weight 1, its masks held fixed) along a random direction in
// each input it reads, in double, on the cases without exact zeros (|x| and the ratio's clamp
// have kinks there).
TEST(DynibarLosses, DoubleBackwardMatchesCentralDifferences) {
  uint64_t seed = 5000;
  for (const LossCase& c : loss_cases()) {
    if (c.edit != Edit::kNone) continue;
    const Arrays x = make_inputs(c, seed += 100);
    const auto v = cast<double>(x);
    for (const TermUse& use : terms_of(dynibar_loss_weights(c.step, c.options))) {
      auto g = zero_gradients<double>(c.sizes);
      term(use.name, c.sizes, v, v, 1.0, &g);
      for (const std::string& input : use.inputs) {
        const std::vector<double> direction =
            synthetic::random_values(v.at(input).size(), -1, 1, seed++);
        const auto f = [&](const std::vector<double>& moved) {
          auto at = v;
          at[input] = moved;
          return term<double>(use.name, c.sizes, at, v, 1.0, nullptr);
        };
        const auto d =
            testing::directional_derivative(f, v.at(input), 0, direction, g.at(input).data(), 1e-7);
        EXPECT_NEAR(d.numeric, d.analytic, 1e-6 * std::max(1.0, std::abs(d.analytic)))
            << c.name << ": d " << use.name << " / d " << input;
      }
    }
  }
}

// A target without an anchor frame: no cross-time terms or cycle (nor their inputs read), the
// rest as with them.
TEST(DynibarLosses, WithoutCrossTimeTheOtherTermsStandAlone) {
  const LossCase c = loss_cases()[1];
  ASSERT_EQ(c.edit, Edit::kNone);
  const auto v = cast<double>(make_inputs(c, 31));
  const DynibarLossWeights w = dynibar_loss_weights(c.step, c.options);
  ASSERT_EQ(w.phase, DynibarPhase::kMain);
  auto g = zero_gradients<double>(c.sizes);
  const DynibarLossTerms full = dynibar_losses(w, batch_of(c.sizes, v), rendered<double>(g));
  DynibarLossBatch<double> alone = batch_of(c.sizes, v);
  alone.cross_time = false;
  alone.n_cycle_pairs = 0;
  alone.cross_time_ray_mask = alone.cross_time_dynamic_only_ray_mask = nullptr;
  alone.cross_time_occlusion_map = alone.cross_time_dynamic_only_occlusion_map = nullptr;
  alone.occlusion_weights = nullptr;
  alone.rendered.cross_time_rgb = alone.rendered.cross_time_dynamic_only_rgb = nullptr;
  alone.rendered.points_ref = alone.rendered.points_anchor = nullptr;
  const DynibarLossTerms t = dynibar_losses(w, alone, rendered<double>(g));
  EXPECT_EQ(t.cross_time, 0.0);
  EXPECT_EQ(t.cross_time_dynamic_only, 0.0);
  EXPECT_EQ(t.cycle, 0.0);
  EXPECT_GT(full.cross_time, 0.0);
  EXPECT_GT(full.cycle, 0.0);
  EXPECT_EQ(t.composite, full.composite);
  EXPECT_EQ(t.flow, full.flow);
  EXPECT_EQ(t.scene_flow_spatial, full.scene_flow_spatial);
  EXPECT_EQ(t.static_region, full.static_region);
  EXPECT_DOUBLE_EQ(t.total,
                   full.total - full.cross_time - full.cross_time_dynamic_only - full.cycle);
  alone.cross_time = true;  // then they are required
  EXPECT_THROW(dynibar_losses(w, alone, rendered<double>(g)), InvalidArgument);
}

TEST(DynibarLosses, AnAllMaskedBatchLeavesOnlyTheUnmaskedTerms) {
  const LossCase c = loss_cases()[4];
  ASSERT_EQ(c.edit, Edit::kAllMasked);
  const StepResult r = run_step<double>(c, make_inputs(c, 77));
  for (double t : {r.terms.composite, r.terms.cross_time, r.terms.dynamic_only,
                   r.terms.cross_time_dynamic_only, r.terms.disparity, r.terms.flow, r.terms.cycle,
                   r.terms.static_region, r.terms.dynamic_weight_suppression}) {
    EXPECT_EQ(t, 0.0);
  }
  EXPECT_GT(r.terms.scene_flow_magnitude, 0.0);
  EXPECT_GT(r.terms.skew_entropy, 0.0);
  EXPECT_GT(r.terms.distortion, 0.0);
  for (const char* masked :
       {"rgb", "rgb_static", "depth", "render_flows", "cross_time_rgb", "points_ref",
        "points_anchor", "dynamic_only_rgb", "cross_time_dynamic_only_rgb"}) {
    for (double g : r.grads.at(masked)) ASSERT_EQ(g, 0.0) << masked;
  }
  for (const auto& [name, grad] : r.grads) {
    for (double g : grad) ASSERT_TRUE(std::isfinite(g)) << name;
  }
}

TEST(DynibarLosses, TheDisparityClampPassesItsGradientAtTheFloorAndNotBelow) {
  const double depth[3] = {kDisparityDepthFloor, 0.5 * kDisparityDepthFloor, 0.5};
  const double target[3] = {1, 1, 1}, mask[3] = {1, 1, 1};
  double grad[3] = {0, 0, 0};
  const double loss = cpu::disparity_l1_loss(3, depth, target, mask, 2.0, grad).value();
  const double denominator = 3 + kDynibarLossEpsilon;
  EXPECT_DOUBLE_EQ(loss, (99 + 99 + 1) / denominator);  // |100 - 1|, |100 - 1|, |2 - 1|
  EXPECT_DOUBLE_EQ(grad[0], -2.0 / (1e-4 * denominator));
  EXPECT_EQ(grad[1], 0.0);
  EXPECT_DOUBLE_EQ(grad[2], -2.0 / (0.25 * denominator));
}

TEST(DynibarLosses, TheSuppressionAddsItsEpsilonOncePerRay) {
  // Two rays, one sample each; only the first is masked in: 0.3 / (1 + 2e-8).
  const double weights[2] = {0.3, 0.2}, mask[2] = {1, 0};
  double grad[2] = {0, 0};
  const double loss = cpu::dynamic_weight_suppression_loss(2, 1, weights, mask, 1.0, grad).value();
  EXPECT_EQ(loss, 0.3 / (1 + kDynibarLossEpsilon + kDynibarLossEpsilon));
  EXPECT_EQ(grad[0], 1 / (1 + kDynibarLossEpsilon + kDynibarLossEpsilon));
  EXPECT_EQ(grad[1], 0.0);
}

TEST(DynibarLosses, TheBootstrapReadsOnlyItsInputsAndMissingOnesAreRefused) {
  const LossCase c = loss_cases()[5];
  const Arrays x = make_inputs(c, 99);
  const auto v = cast<float>(x);
  DynibarLossBatch<float> b;
  b.n_rays = c.sizes.rays;
  b.n_samples = c.sizes.samples;
  b.target_rgb = v.at("target_rgb").data();
  b.static_mask = v.at("static_mask").data();
  b.ray_mask = v.at("ray_mask").data();
  b.rendered.static_only_rgb = v.at("static_only_rgb").data();
  std::vector<float> grad(v.at("static_only_rgb").size());
  DynibarRendered<float> g;
  g.static_only_rgb = grad.data();
  const DynibarLossWeights bootstrap = dynibar_loss_weights(c.step, c.options);
  ASSERT_EQ(bootstrap.phase, DynibarPhase::kStaticBootstrap);
  const DynibarLossTerms t = dynibar_losses(bootstrap, b, g);
  EXPECT_GT(t.static_bootstrap, 0.0);
  EXPECT_EQ(t.total, t.static_bootstrap);
  // The main loop needs the rest.
  EXPECT_THROW(dynibar_losses(dynibar_loss_weights(10, c.options), b, g), InvalidArgument);
  b.ray_mask = nullptr;
  EXPECT_THROW(dynibar_losses(bootstrap, b, g), InvalidArgument);
  b.ray_mask = v.at("ray_mask").data();
  b.n_rays = 0;
  EXPECT_THROW(dynibar_losses(bootstrap, b, g), InvalidArgument);
}

// ---- a batch split over ranks and micro-batches ----------------------------------------------

// Calls copy(at_batch, at_part, n) for each run of `name`'s array that rays [begin, end) of a
// batch of z.rays hold, at_batch into that batch's array and at_part into the array of a batch
// of those rays alone: arrays are cut along their ray axis, the second of the [K,R,...],
// [P,R,S,3] and [F,R,S,3] ones and the first of the rest.
template <typename Copy>
void for_each_ray_run(const Sizes& z, const std::string& name, size_t begin, size_t end,
                      Copy copy) {
  const std::vector<size_t> shape = shapes(z).at(name);
  const bool leading = name == "target_flows" || name == "flow_validity" ||
                       name == "render_flows" || name == "points_ref" || name == "points_anchor" ||
                       name == "scene_flow";
  const size_t axis = leading ? 1 : 0;
  ASSERT_EQ(shape[axis], size_t(z.rays)) << name;
  size_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const size_t n = (end - begin) * inner;
  for (size_t o = 0; o < outer; ++o) copy((o * shape[axis] + begin) * inner, o * n, n);
}

// Rays [begin, end) of every array of a batch of z.rays.
Arrays ray_slice(const Sizes& z, const Arrays& x, size_t begin, size_t end) {
  Arrays part;
  for (const auto& [name, v] : x) {
    std::vector<double>& p = part[name];
    for_each_ray_run(z, name, begin, end, [&](size_t at, size_t, size_t n) {
      p.insert(p.end(), v.begin() + long(at), v.begin() + long(at + n));
    });
  }
  return part;
}

// Writes the arrays of `part`, rays [begin, end), into those of `batch`, a batch of z.rays.
void put_rays(const Sizes& z, const Arrays& part, size_t begin, size_t end, Arrays* batch) {
  for (const auto& [name, p] : part) {
    for_each_ray_run(z, name, begin, end, [&](size_t at, size_t from, size_t n) {
      std::copy(p.begin() + long(from), p.begin() + long(from + n),
                batch->at(name).begin() + long(at));
    });
  }
}

const char* const kTermNames[] = {"static_bootstrap",
                                  "composite",
                                  "cross_time",
                                  "dynamic_region",
                                  "dynamic_only",
                                  "cross_time_dynamic_only",
                                  "disparity",
                                  "flow",
                                  "cycle",
                                  "scene_flow_magnitude",
                                  "scene_flow_temporal",
                                  "scene_flow_spatial",
                                  "skew_entropy",
                                  "distortion",
                                  "static_region",
                                  "dynamic_weight_suppression",
                                  "rgb",
                                  "static_loss",
                                  "total"};

// Each case's rays split at ray 5 (which parts the suppression's rays, 3 to 8): the halves'
// summed fractions give the whole batch's terms, and each half's gradient under them is the
// whole batch's gradient at its rays, in double.
TEST(DynibarLosses, TwoHalvesOfABatchGiveItsLossAndGradient) {
  const size_t split = 5;
  uint64_t seed = 7000;
  int main_cases = 0, bootstrap_cases = 0;
  for (const LossCase& c : loss_cases()) {
    if (size_t(c.sizes.rays) <= split) continue;
    const DynibarLossWeights w = dynibar_loss_weights(c.step, c.options);
    (w.phase == DynibarPhase::kMain ? main_cases : bootstrap_cases)++;
    const Arrays x = make_inputs(c, seed += 100);
    const StepResult whole = run_step<double>(c, x);
    const size_t rays = size_t(c.sizes.rays);
    const size_t bounds[3] = {0, split, rays};
    Sizes part_sizes[2] = {c.sizes, c.sizes};
    std::map<std::string, std::vector<double>> parts[2];
    std::vector<double> sums[2];
    for (int h = 0; h < 2; ++h) {
      part_sizes[h].rays = int(bounds[h + 1] - bounds[h]);
      parts[h] = ray_slice(c.sizes, x, bounds[h], bounds[h + 1]);
      append_sums(dynibar_loss_fractions(w, batch_of(part_sizes[h], parts[h])), &sums[h]);
    }
    ASSERT_EQ(sums[0].size(), 2 * kDynibarTermCount);
    std::vector<double> summed(sums[0].size());
    for (size_t i = 0; i < summed.size(); ++i) summed[i] = sums[0][i] + sums[1][i];
    const DynibarLossFractions fractions = fractions_from_sums(summed.data());
    const DynibarLossTerms terms = dynibar_loss_terms(w, fractions);
    for (const char* name : kTermNames) {
      EXPECT_LE(scalar_error(term_value(terms, name), term_value(whole.terms, name)), 1e-12)
          << c.name << ": " << name;
    }
    Arrays grads;  // NaN where no half writes
    for (const auto& [name, g] : whole.grads) grads[name].assign(g.size(), NAN);
    for (int h = 0; h < 2; ++h) {
      auto g = zero_gradients<double>(part_sizes[h]);
      const DynibarLossTerms returned =
          dynibar_losses(w, batch_of(part_sizes[h], parts[h]), rendered<double>(g), fractions);
      EXPECT_EQ(returned.total, terms.total) << c.name;
      put_rays(c.sizes, Arrays(g.begin(), g.end()), bounds[h], bounds[h + 1], &grads);
    }
    for (const char* name : kDifferentiable) {
      EXPECT_LE(normwise_relative_error(grads.at(name), whole.grads.at(name)), 1e-12)
          << c.name << ": d total / d " << name;
    }
  }
  EXPECT_GT(main_cases, 0);
  EXPECT_GT(bootstrap_cases, 0);
}

// append_sums and fractions_from_sums give back every numerator, denominator and epsilon the
// terms computed (a main step with every main term on, and a bootstrap step); a term the phase
// does not compute is {0, 0, its epsilon}, and {0, 0, 0} is 0.
TEST(DynibarLosses, SumsGiveBackTheFractionsWithTheirEpsilons) {
  const LossCase late = loss_cases()[2], bootstrap = loss_cases()[5];
  DynibarLossWeights all_main = dynibar_loss_weights(late.step, late.options);
  ASSERT_NE(all_main.dynamic_weight_suppression, 0.0);
  all_main.dynamic_region = 1;
  const DynibarLossWeights only_bootstrap = dynibar_loss_weights(bootstrap.step, bootstrap.options);
  ASSERT_EQ(only_bootstrap.phase, DynibarPhase::kStaticBootstrap);
  const auto v = cast<double>(make_inputs(late, 31));
  const DynibarLossBatch<double> b = batch_of(late.sizes, v);
  for (const DynibarLossWeights& w : {all_main, only_bootstrap}) {
    const DynibarLossFractions f = dynibar_loss_fractions(w, b);
    std::vector<double> sums = {-1};  // appended after what is there
    append_sums(f, &sums);
    ASSERT_EQ(sums.size(), 1 + 2 * kDynibarTermCount);
    const DynibarLossFractions back = fractions_from_sums(sums.data() + 1);
    for (size_t i = 0; i < kDynibarTermCount; ++i) {
      EXPECT_EQ(back[i].numerator, f[i].numerator) << kTermNames[i];
      EXPECT_EQ(back[i].denominator, f[i].denominator) << kTermNames[i];
      EXPECT_EQ(back[i].epsilon, f[i].epsilon) << kTermNames[i];
      const bool computed = w.phase == DynibarPhase::kMain ? i != 0 : i == 0;
      EXPECT_EQ(f[i].denominator > 0, computed) << kTermNames[i];
    }
    // The step's own terms are those of its fractions, to the bit.
    auto g = zero_gradients<double>(late.sizes);
    const DynibarLossTerms step = dynibar_losses(w, b, rendered<double>(g));
    const DynibarLossTerms from_fractions = dynibar_loss_terms(w, f);
    for (const char* name : kTermNames) {
      EXPECT_EQ(term_value(step, name), term_value(from_fractions, name)) << name;
    }
  }
  const auto at = [](const DynibarLossFractions& f, DynibarTerm t) { return f[size_t(t)]; };
  const DynibarLossFractions f = dynibar_loss_fractions(all_main, b);
  EXPECT_EQ(at(f, DynibarTerm::kComposite).epsilon, kCharbonnierDenominatorEpsilon);
  EXPECT_EQ(at(f, DynibarTerm::kCycle).epsilon, kDynibarLossEpsilon);
  EXPECT_EQ(at(f, DynibarTerm::kDistortion).denominator, double(late.sizes.rays));
  EXPECT_EQ(at(f, DynibarTerm::kDynamicWeightSuppression).epsilon, 0.0);
  EXPECT_EQ(at(dynibar_loss_fractions(only_bootstrap, b), DynibarTerm::kCycle).epsilon,
            kDynibarLossEpsilon);
  EXPECT_EQ(LossFraction().value(), 0.0);
}

}  // namespace
}  // namespace mvibr
