// DynIBaR's motion network and its Fourier features: parameter names, shapes, count and
// initialisation as the published module's state_dict; the embedding's layout and frequencies;
// the double-precision backward against central differences; and forward and every gradient
// against the PyTorch float64 reference (test/reference/motion_mlp_reference.py) at the published
// size and at odd ones (two skips, none, sf_mag_div != 1), as normwise relative errors
// max|ours - ref| / max|ref|, each parameter on its own: double within 1e-10, float within the
// bounds stated at kFloatBound (what fp32's roundings of the embedding's angles and of the
// layers' sums leave; the test prints the measured errors).
#include "mvibr/nn/motion_mlp.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/periodic_embed.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "support/finite_difference.h"

namespace mvibr::nn {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;

std::vector<double> float_values(size_t count, double lo, double hi, uint64_t seed) {
  std::vector<double> v = synthetic::random_values(count, lo, hi, seed);
  for (double& x : v) x = double(float(x));
  return v;
}

// max|ours - reference| / max|reference|.
double relative_error(const std::vector<double>& ours, const std::vector<double>& reference) {
  if (ours.size() != reference.size()) return INFINITY;
  double difference = 0, scale = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (std::isnan(ours[i]) || std::isnan(reference[i])) return INFINITY;
    difference = std::max(difference, std::abs(ours[i] - reference[i]));
    scale = std::max(scale, std::abs(reference[i]));
  }
  return scale > 0 ? difference / scale : difference;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// A random problem: the network with its parameters in the set (nn.Linear's defaults, then a
// non-zero head so that gradients reach every layer), points and the output's gradient.
struct Problem {
  MotionMlpOptions options;
  size_t n = 0;
  ParameterSet set;
  std::unique_ptr<MotionMlp> net;
  std::vector<double> xyzt, grad_coefficients;  // values floats represent exactly
};

std::unique_ptr<Problem> make_problem(const MotionMlpOptions& options, size_t n, uint64_t seed) {
  auto p = std::make_unique<Problem>();
  p->options = options;
  p->n = n;
  p->set.add("before.weight", {3}, ParameterGroup::kFeature);  // the run need not start at 0
  p->net = std::make_unique<MotionMlp>(p->set, "motion_mlp.", options);
  Initializer init(seed);
  p->net->initialize(init);
  const Linear& head = p->net->head();
  const double bound = 1 / std::sqrt(double(head.in()));
  const std::vector<double> w = float_values(size_t(head.out()) * head.in(), -bound, bound, seed);
  const std::vector<double> b = float_values(size_t(head.out()), -bound, bound, seed + 1);
  float* run = p->set.values().data() + p->net->parameter_offset();
  std::copy(w.begin(), w.end(), run + head.weight_offset());
  std::copy(b.begin(), b.end(), run + head.bias_offset());
  // World positions within a few units, t = frame / frames in [0, 1).
  const int inputs = options.inputs;
  p->xyzt = float_values(n * size_t(inputs), -2, 2, seed + 2);
  const std::vector<double> t = float_values(n, 0, 1, seed + 3);
  for (size_t i = 0; i < n; ++i) p->xyzt[i * size_t(inputs) + size_t(inputs - 1)] = t[i];
  p->grad_coefficients = float_values(n * size_t(p->net->outputs()), -1, 1, seed + 4);
  return p;
}

std::vector<double> run_values(const Problem& p) {
  const auto& all = p.set.values();
  const auto begin = all.begin() + long(p.net->parameter_offset());
  return std::vector<double>(begin, begin + long(p.net->parameter_count()));
}

struct Result {
  std::vector<double> coefficients, grad_xyzt, grads;
};

template <typename T>
Result run(const Problem& p, const std::vector<double>& params, const std::vector<double>& xyzt,
           bool want_input = true) {
  const std::vector<T> values = cast<T>(params), in = cast<T>(xyzt),
                       grad_out = cast<T>(p.grad_coefficients);
  std::vector<T> saved(p.net->saved_size(p.n)), scratch(p.net->scratch_size(p.n)),
      out(p.n * size_t(p.net->outputs())), grads(params.size(), T(0)), grad_in(in.size());
  p.net->forward(values.data(), p.n, in.data(), saved.data(), out.data());
  p.net->backward(values.data(), grads.data(), p.n, saved.data(), grad_out.data(),
                  want_input ? grad_in.data() : nullptr, scratch.data());
  return {as_double(out), want_input ? as_double(grad_in) : std::vector<double>{},
          as_double(grads)};
}

// The float path on the set itself (what training runs), accumulating into its grads.
Result run_on_set(Problem& p) {
  const std::vector<float> in = cast<float>(p.xyzt), grad_out = cast<float>(p.grad_coefficients);
  std::vector<float> saved(p.net->saved_size(p.n)), scratch(p.net->scratch_size(p.n)),
      out(p.n * size_t(p.net->outputs())), grad_in(in.size());
  p.set.zero_grads();
  p.net->forward(p.n, in.data(), saved.data(), out.data());
  p.net->backward(p.n, saved.data(), grad_out.data(), grad_in.data(), scratch.data());
  const auto begin = p.set.grads().begin() + long(p.net->parameter_offset());
  return {as_double(out), as_double(grad_in),
          std::vector<double>(begin, begin + long(p.net->parameter_count()))};
}

// Odd sizes that take every path: two skips (one right after the first layer), sf_mag_div != 1.
MotionMlpOptions small_options() {
  MotionMlpOptions o;
  o.basis = 3;
  o.depth = 5;
  o.width = 24;
  o.inputs = 4;
  o.frequencies = 5;
  o.skips = {0, 2};
  o.sf_mag_div = 2.5;
  return o;
}

// --- names, shapes, initialisation -----------------------------------------------------------

TEST(MotionMlpParameters, NamesShapesAndCountAreThePublishedStateDict) {
  ParameterSet set;
  set.add("feature_net.conv1.weight", {4, 3}, ParameterGroup::kFeature);
  const MotionMlp net(set, "motion_mlp.", MotionMlpOptions{});
  std::vector<std::pair<std::string, std::vector<int>>> expected;
  for (int i = 0; i < 8; ++i) {
    const int in = i == 0 ? 132 : i == 5 ? 388 : 256;  // cat([embedding, h_4]) into layer 5
    expected.push_back({"pts_linears." + std::to_string(i) + ".weight", {256, in}});
    expected.push_back({"pts_linears." + std::to_string(i) + ".bias", {256}});
  }
  expected.push_back({"coeff_linear.weight", {18, 256}});
  expected.push_back({"coeff_linear.bias", {18}});
  ASSERT_EQ(set.infos().size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    const ParameterInfo& info = set.infos()[i + 1];
    EXPECT_EQ(info.name, "motion_mlp." + expected[i].first);
    EXPECT_EQ(info.shape, expected[i].second) << info.name;
    EXPECT_EQ(info.group, ParameterGroup::kMlp) << info.name;
  }
  EXPECT_EQ(net.parameter_offset(), size_t(12));
  EXPECT_EQ(net.parameter_count(), size_t(533010));  // DynIBaR's ~533k
  EXPECT_EQ(net.embed().width(), 132);
  EXPECT_EQ(net.outputs(), 18);
  EXPECT_EQ(net.saved_size(1), size_t(132 + 8 * 256 + 388));  // the header's memory note
  EXPECT_EQ(net.scratch_size(1), size_t(18 + 2 * 256 + 388 + 132));
}

TEST(MotionMlpParameters, HiddenLayersKeepNnLinearDefaultsAndTheHeadStartsAtZero) {
  ParameterSet set;
  MotionMlp net(set, "motion_mlp.", MotionMlpOptions{});
  Initializer init(7);
  net.initialize(init);
  auto values = [&](const std::string& name) {
    const Parameter p = set.find("motion_mlp." + name);
    return std::vector<float>(set.value(p), set.value(p) + set.info(p).size);
  };
  for (int i = 0; i < 8; ++i) {
    const std::string layer = "pts_linears." + std::to_string(i);
    const int fan_in = set.info(set.find("motion_mlp." + layer + ".weight")).shape[1];
    const float bound = float(1 / std::sqrt(double(fan_in)));
    for (const char* part : {".weight", ".bias"}) {
      float largest = 0;
      for (float x : values(layer + part)) {
        EXPECT_LE(std::abs(x), bound) << layer << part;
        largest = std::max(largest, std::abs(x));
      }
      EXPECT_GT(largest, bound * 0.9f) << layer << part;  // uniform over the whole range
    }
  }
  for (float x : values("coeff_linear.weight")) EXPECT_EQ(x, 0.0f);
  for (float x : values("coeff_linear.bias")) EXPECT_EQ(x, 0.0f);
  // At initialisation nothing moves: every coefficient is zero.
  const size_t n = 3;
  const std::vector<float> xyzt = cast<float>(float_values(n * 4, -1, 1, 8));
  std::vector<float> saved(net.saved_size(n)), out(n * 18, 1.0f);
  net.forward(n, xyzt.data(), saved.data(), out.data());
  for (float c : out) EXPECT_EQ(c, 0.0f);
  // The same seed gives the same network.
  ParameterSet other;
  MotionMlp twin(other, "motion_mlp.", MotionMlpOptions{});
  Initializer same(7);
  twin.initialize(same);
  EXPECT_EQ(other.values(), set.values());
}

TEST(MotionMlpParameters, RejectsOptionsItCannotBuild) {
  const auto build = [](MotionMlpOptions o) {
    ParameterSet set;
    MotionMlp net(set, "m.", o);
  };
  MotionMlpOptions o;
  o.skips = {7};  // after the last hidden layer: the head would take the concatenation
  EXPECT_THROW(build(o), InvalidArgument);
  o.skips = {-1};
  EXPECT_THROW(build(o), InvalidArgument);
  o = MotionMlpOptions{};
  o.basis = 0;
  EXPECT_THROW(build(o), InvalidArgument);
  o = MotionMlpOptions{};
  o.sf_mag_div = 0;
  EXPECT_THROW(build(o), InvalidArgument);
  o = MotionMlpOptions{};
  o.frequencies = kMaxEmbedFrequencies + 1;
  EXPECT_THROW(build(o), InvalidArgument);
  o = MotionMlpOptions{};
  o.skips = {};
  EXPECT_NO_THROW(build(o));
}

// --- the periodic embedding ------------------------------------------------------------------

TEST(PeriodicEmbed, OutputIsTheInputThenAllCosinesThenAllSines) {
  const PeriodicEmbed embed(2, FrequencySpacing::kLinear, 4, 3);
  ASSERT_EQ(embed.width(), 14);
  const std::vector<float>& f = embed.frequencies();
  ASSERT_EQ(f, (std::vector<float>{1.0f, 3.0f, 5.0f}));  // linspace(1, 5, 3)
  const double x[4] = {0.25, -1.5, 2.0, 0.0};
  double y[28];
  embed.forward(2, x, y);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 2; ++j) {
      const double v = x[r * 2 + j];
      EXPECT_EQ(y[r * 14 + j], v);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(y[r * 14 + 2 + k * 2 + j], std::cos(f[size_t(k)] * v)) << r << j << k;
        EXPECT_EQ(y[r * 14 + 8 + k * 2 + j], std::sin(f[size_t(k)] * v)) << r << j << k;
      }
    }
  }
  const PeriodicEmbed log(1, FrequencySpacing::kLog, 99, 5);
  EXPECT_EQ(log.frequencies(), (std::vector<float>{1, 2, 4, 8, 16}));  // max_freq unused
  EXPECT_THROW(PeriodicEmbed(0, FrequencySpacing::kLinear, 4, 3), InvalidArgument);
  EXPECT_THROW(PeriodicEmbed(1, FrequencySpacing::kLinear, 4, 0), InvalidArgument);
}

TEST(PeriodicEmbed, BackwardMatchesCentralDifferencesAndAccumulates) {
  const PeriodicEmbed embed(3, FrequencySpacing::kLinear, 16, 16);
  const size_t n = 5, width = size_t(embed.width());
  std::vector<double> x = float_values(n * 3, -2, 2, 11);
  const std::vector<double> weight = float_values(n * width, -1, 1, 12);
  const auto loss = [&] {
    std::vector<double> y(n * width);
    embed.forward(n, x.data(), y.data());
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += weight[i] * y[i];
    return sum;
  };
  std::vector<double> y(n * width), grad(n * 3);
  embed.forward(n, x.data(), y.data());
  embed.backward(n, y.data(), weight.data(), grad.data());
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7 * std::max(1.0, std::abs(grad[i]))) << i;
  }
  std::vector<double> accumulated(n * 3, 1.0);
  embed.backward(n, y.data(), weight.data(), accumulated.data(), true);
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(accumulated[i], 1.0 + grad[i]);
}

// --- the network: finite differences, input gradient on demand -------------------------------

// Directional derivatives of L = sum(grad_coefficients * coefficients) along a random direction
// per parameter tensor, and for the input.
TEST(MotionMlp, DoubleBackwardMatchesFiniteDifferences) {
  for (const MotionMlpOptions& options : {small_options(), MotionMlpOptions{}}) {
    const auto p = make_problem(options, 6, 21);
    const std::vector<double> params = run_values(*p);
    const Result at = run<double>(*p, params, p->xyzt);
    const auto loss = [&](const std::vector<double>& values, const std::vector<double>& xyzt) {
      std::vector<double> saved(p->net->saved_size(p->n)), out(p->n * size_t(p->net->outputs()));
      p->net->forward(values.data(), p->n, xyzt.data(), saved.data(), out.data());
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += out[i] * p->grad_coefficients[i];
      return sum;
    };
    const double h = 1e-6;
    for (const ParameterInfo& info : p->set.infos()) {
      if (info.offset < p->net->parameter_offset()) continue;
      const size_t begin = info.offset - p->net->parameter_offset();
      const std::vector<double> direction = synthetic::random_values(info.size, -1, 1, 100 + begin);
      const auto d = testing::directional_derivative(
          [&](const std::vector<double>& v) { return loss(v, p->xyzt); }, params, begin, direction,
          at.grads.data() + begin, h);
      EXPECT_NEAR(d.numeric, d.analytic, 1e-7 * std::max(1.0, std::abs(d.analytic))) << info.name;
    }
    const std::vector<double> direction = synthetic::random_values(p->xyzt.size(), -1, 1, 99);
    const auto d = testing::directional_derivative(
        [&](const std::vector<double>& v) { return loss(params, v); }, p->xyzt, 0, direction,
        at.grad_xyzt.data(), h);
    EXPECT_NEAR(d.numeric, d.analytic, 1e-7 * std::max(1.0, std::abs(d.analytic))) << "xyzt";
  }
}

TEST(MotionMlp, WithoutTheInputGradientTheParameterGradientsAreUnchanged) {
  for (const MotionMlpOptions& options : {small_options(), MotionMlpOptions{}}) {
    const auto p = make_problem(options, 37, 5);
    const std::vector<double> params = run_values(*p);
    const Result with = run<float>(*p, params, p->xyzt, true);
    const Result without = run<float>(*p, params, p->xyzt, false);
    EXPECT_EQ(with.coefficients, without.coefficients);
    EXPECT_EQ(with.grads, without.grads);
  }
}

TEST(MotionMlp, NoPointsIsNoWork) {
  ParameterSet set;
  const MotionMlp net(set, "m.", MotionMlpOptions{});
  EXPECT_EQ(net.saved_size(0), 0u);
  EXPECT_EQ(net.scratch_size(0), 0u);
  net.forward(0, nullptr, nullptr, nullptr);
  net.backward(0, nullptr, nullptr, nullptr, nullptr);
  for (float g : set.grads()) EXPECT_EQ(g, 0.0f);
}

// --- the PyTorch reference -------------------------------------------------------------------

struct ReferenceCase {
  const char* name;
  MotionMlpOptions options;
  size_t n;
};

std::vector<ReferenceCase> reference_cases() {
  MotionMlpOptions plain;  // no skip, three inputs, one frequency, one basis function
  plain.basis = 1;
  plain.depth = 3;
  plain.width = 16;
  plain.inputs = 3;
  plain.frequencies = 1;
  plain.skips = {};
  return {{"published", MotionMlpOptions{}, 256},
          {"two_skips", small_options(), 100},
          {"plain", plain, 50}};
}

// Frequencies checked against torch's own: spacing, max_freq, count.
struct FrequencyCheck {
  FrequencySpacing spacing;
  int max_freq, count;
};
const FrequencyCheck kFrequencyChecks[] = {
    {FrequencySpacing::kLinear, 16, 16}, {FrequencySpacing::kLinear, 5, 5},
    {FrequencySpacing::kLinear, 7, 3},   {FrequencySpacing::kLinear, 10, 10},
    {FrequencySpacing::kLinear, 1, 1},   {FrequencySpacing::kLinear, 3, 7},
    {FrequencySpacing::kLog, 10, 10},    {FrequencySpacing::kLog, 4, 4},
    {FrequencySpacing::kLog, 5, 5}};

std::string frequency_file(const FrequencyCheck& c) {
  return std::string("ref_frequencies_") +
         (c.spacing == FrequencySpacing::kLog ? "log_" : "linear_") + std::to_string(c.max_freq) +
         "_" + std::to_string(c.count) + ".npy";
}

// Float bounds (normwise relative): the embedding's angles f x reach 17 x 2 = 34 and are rounded
// to fp32 (an absolute error up to 34 x 2^-24 = 2e-6 in a cosine, 1e-7 typically), and every
// layer adds its sums' roundings. Measured below 1e-6 for outputs, parameter gradients and the
// input's gradient (whose terms f (cos g_sin - sin g_cos) partly cancel): a margin of 10.
constexpr double kFloatBound = 1e-5;
constexpr double kFloatInputBound = 1e-5;

class MotionMlpReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-motion-mlp-" + std::to_string(::getpid()));
    uint64_t seed = 300;
    for (const ReferenceCase& c : reference_cases()) {
      const fs::path dir = root_ / c.name;
      fs::create_directories(dir);
      problems().push_back(make_problem(c.options, c.n, seed += 10));
      const Problem& p = *problems().back();
      const MotionMlpOptions& o = c.options;
      nlohmann::json spec = {{"basis", o.basis},
                             {"depth", o.depth},
                             {"width", o.width},
                             {"inputs", o.inputs},
                             {"frequencies", o.frequencies},
                             {"skips", o.skips},
                             {"sf_mag_div", o.sf_mag_div},
                             {"frequency_checks", nlohmann::json::array()}};
      for (const FrequencyCheck& f : kFrequencyChecks) {
        spec["frequency_checks"].push_back(
            {f.spacing == FrequencySpacing::kLog ? "log" : "linear", f.max_freq, f.count});
      }
      std::ofstream(dir / "case.json") << spec.dump();
      test::write_npy((dir / "xyzt.npy").string(), {{p.n, size_t(o.inputs)}, p.xyzt});
      test::write_npy((dir / "grad_coefficients.npy").string(),
                      {{p.n, size_t(p.net->outputs())}, p.grad_coefficients});
      const std::string prefix = "motion_mlp.";
      for (const ParameterInfo& info : p.set.infos()) {
        if (info.name.rfind(prefix, 0) != 0) continue;
        const float* v = p.set.values().data() + info.offset;
        test::write_npy((dir / ("param." + info.name.substr(prefix.size()) + ".npy")).string(),
                        {std::vector<size_t>(info.shape.begin(), info.shape.end()),
                         std::vector<double>(v, v + info.size)});
      }
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/motion_mlp_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    problems().clear();
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }
  static std::vector<std::unique_ptr<Problem>>& problems() {
    static std::vector<std::unique_ptr<Problem>> all;
    return all;
  }
  static std::vector<double> reference(const std::string& name, const std::string& file) {
    return test::read_npy((root_ / name / file).string()).data;
  }

  // Every output and gradient against the reference; returns the worst errors (outputs and
  // parameter gradients, the input's gradient).
  static std::pair<double, double> check(size_t index, const Result& r, double bound,
                                         double input_bound, const char* precision) {
    const ReferenceCase c = reference_cases()[index];
    const Problem& p = *problems()[index];
    const std::string trace = std::string(c.name) + " in " + precision;
    double worst = relative_error(r.coefficients, reference(c.name, "ref_coefficients.npy"));
    EXPECT_LE(worst, bound) << trace << ": coefficients";
    const double input = relative_error(r.grad_xyzt, reference(c.name, "ref_grad_xyzt.npy"));
    EXPECT_LE(input, input_bound) << trace << ": grad_xyzt";
    for (const ParameterInfo& info : p.set.infos()) {
      if (info.offset < p.net->parameter_offset()) continue;
      const size_t begin = info.offset - p.net->parameter_offset();
      const std::vector<double> ours(r.grads.begin() + long(begin),
                                     r.grads.begin() + long(begin + info.size));
      const std::string file = "ref_grad_param." + info.name.substr(11) + ".npy";
      const std::vector<double> expected = reference(c.name, file);
      // Every layer gets a gradient (the head is not zero here), so none passes by being zero.
      double largest = 0;
      for (double v : expected) largest = std::max(largest, std::abs(v));
      EXPECT_GT(largest, 0.0) << trace << ": " << info.name;
      const double e = relative_error(ours, expected);
      EXPECT_LE(e, bound) << trace << ": " << info.name;
      worst = std::max(worst, e);
    }
    std::printf("  %-9s %-6s outputs and parameter gradients %.1e, input gradient %.1e\n", c.name,
                precision, worst, input);
    return {worst, input};
  }

  static inline fs::path root_;
  static inline int status_ = -1;
};

TEST_F(MotionMlpReference, FrequenciesAreTorchsFloat32Values) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  const std::string name = reference_cases()[0].name;
  const std::vector<double> published = reference(name, "ref_frequencies.npy");
  const std::vector<float>& ours = problems()[0]->net->embed().frequencies();
  EXPECT_EQ(as_double(ours), published);
  for (const FrequencyCheck& f : kFrequencyChecks) {
    EXPECT_EQ(as_double(periodic_embed_frequencies(f.spacing, f.max_freq, f.count)),
              reference(name, frequency_file(f)))
        << frequency_file(f);
  }
}

TEST_F(MotionMlpReference, DoubleMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  for (size_t i = 0; i < problems().size(); ++i) {
    const Problem& p = *problems()[i];
    check(i, run<double>(p, run_values(p), p.xyzt), 1e-10, 1e-10, "double");
  }
}

TEST_F(MotionMlpReference, FloatOnTheParameterSetMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  for (size_t i = 0; i < problems().size(); ++i) {
    check(i, run_on_set(*problems()[i]), kFloatBound, kFloatInputBound, "float");
  }
}

}  // namespace
}  // namespace mvibr::nn
