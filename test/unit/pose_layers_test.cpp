// The pose model's geometric layers: soft-argmax (nn/soft_argmax.h), triangulation weights and
// triangulation by normal equations (geom/triangulation.h).
// - Forward and every gradient against the PyTorch float64 reference
//   (test/reference/pose_layers_reference.py) as normwise relative errors
//   max|ours - ref| / max|ref|: double within 1e-10, float within 1e-5 (values) and 1e-4
//   (gradients; the triangulation solves in double whatever T is, so its float error is the
//   rounding of its inputs and outputs); the test prints the measured errors.
// - The double backward against central differences.
// - Exact projections of known joints from rings of cameras (1000 px images, metres) come back
//   to rounding: 1e-12 relative in double, 1e-6 in float (the solve runs in double; what is left
//   is the float output's rounding).
// - Edge cases: one view with weight, all weights zero, non-finite points, weights, confidences
//   and heatmaps (flagged, zeros out, no NaN), a huge multiplier, J == C and J < C.
// mvibr's normal equations and the published SVD DLT give the same joint for exact 2D points
// (both find A's null vector; checked once against the published function, numbers in the
// reference's docstring); under noise they normalise the same algebraic error differently.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../../src/nn/vector_math.h"
#include "mvibr/core/error.h"
#include "mvibr/core/relative_error.h"
#include "mvibr/geom/camera.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/nn/soft_argmax.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"
#include "support/finite_difference.h"

namespace mvibr {
namespace {

namespace fs = std::filesystem;
using Arrays = std::map<std::string, std::vector<double>>;
using nn::SoftArgmaxOptions;

constexpr double kDoubleBound = 1e-10;
constexpr double kFloatValueBound = 1e-5;
constexpr double kFloatGradientBound = 1e-4;

// Uniform values that floats represent exactly, so both precisions see the same inputs.
std::vector<double> float_values(size_t count, double lo, double hi, uint64_t seed) {
  std::vector<double> v = synthetic::random_values(count, lo, hi, seed);
  for (double& x : v) x = double(float(x));
  return v;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Cameras on a ring around a standing person (z up, metres): 3-5 m away, 0.5-2.5 m high,
// 1000x1000 px images at focal 1000 px, angles jittered off the regular ring; fewer than four
// views take a quarter of the ring each (two views facing each other see a joint along nearly
// one line, an ill-posed triangulation).
std::vector<PinholeCamera<double>> camera_ring(int n_views, uint64_t seed) {
  const std::vector<double> r = synthetic::random_values(3 * size_t(n_views), 0, 1, seed);
  std::vector<PinholeCamera<double>> cameras;
  for (int v = 0; v < n_views; ++v) {
    const double angle = 2 * M_PI * (v + 0.3 * r[3 * v]) / std::max(n_views, 4);
    const double distance = 3 + 2 * r[3 * v + 1];
    const Vec3<double> eye{distance * std::cos(angle), distance * std::sin(angle),
                           0.5 + 2 * r[3 * v + 2]};
    cameras.push_back(
        look_at_camera(eye, Vec3<double>{0, 0, 0.9}, Vec3<double>{0, 0, 1}, 1000.0, 1000, 1000));
  }
  return cameras;
}

// Joints of a person-sized box around the ring's centre: [count, 3].
std::vector<double> random_joints(size_t count, uint64_t seed) {
  std::vector<double> joints = synthetic::random_values(3 * count, -0.5, 0.5, seed);
  for (size_t i = 0; i < count; ++i) joints[3 * i + 2] = 0.9 + 1.8 * joints[3 * i + 2];
  return joints;
}

std::vector<double> projection_of(const PinholeCamera<double>& camera) {
  std::vector<double> p(12);
  projection_matrix(camera, p.data());
  return p;
}

void project(const double* p, const double* x, double* pixel) {
  const double depth = p[8] * x[0] + p[9] * x[1] + p[10] * x[2] + p[11];
  pixel[0] = (p[0] * x[0] + p[1] * x[1] + p[2] * x[2] + p[3]) / depth;
  pixel[1] = (p[4] * x[0] + p[5] * x[1] + p[6] * x[2] + p[7]) / depth;
}

// A multi-view batch: projections [B, V, 3, 4], the true joints [B, J, 3] and their exact
// projections [B, V, J, 2], plus `noise` pixels of uniform noise.
struct ViewBatch {
  int batch, views, joints;
  std::vector<double> projections, joints_3d, points;
};

ViewBatch view_batch(int batch, int views, int joints, double noise, bool float_exact,
                     uint64_t seed) {
  ViewBatch out{batch, views, joints, {}, random_joints(size_t(batch) * joints, seed), {}};
  out.points.resize(size_t(batch) * views * joints * 2);
  const std::vector<double> jitter =
      synthetic::random_values(out.points.size(), -noise, noise, seed + 1);
  for (int b = 0; b < batch; ++b) {
    for (const PinholeCamera<double>& camera : camera_ring(views, seed + 2 + b)) {
      std::vector<double> p = projection_of(camera);
      if (float_exact) p = as_double(cast<float>(p));
      out.projections.insert(out.projections.end(), p.begin(), p.end());
    }
    for (int v = 0; v < views; ++v) {
      for (int j = 0; j < joints; ++j) {
        const size_t at = 2 * ((size_t(b) * views + v) * joints + j);
        project(&out.projections[12 * (size_t(b) * views + v)],
                &out.joints_3d[3 * (size_t(b) * joints + j)], &out.points[at]);
        for (size_t k = at; k < at + 2; ++k) {
          out.points[k] += jitter[k];
          if (float_exact) out.points[k] = double(float(out.points[k]));
        }
      }
    }
  }
  return out;
}

struct PoseCase {
  const char* name;
  int batch, views, joints, channels, height, width, stride;
  double multiplier, heat_lo, heat_hi, noise_px;
};

// The published size (17 joints at stride 4, multiplier 100) with J < C; J == C at stride 1;
// the minimum of two views with a sharp softmax.
const std::vector<PoseCase>& pose_cases() {
  static const std::vector<PoseCase> cases = {
      {"published", 2, 4, 17, 20, 16, 16, 4, 100, 0, 0.05, 3},
      {"joints_equal_channels", 1, 5, 3, 3, 7, 9, 1, 1, -2, 2, 10},
      {"two_views_sharp", 3, 2, 4, 6, 12, 10, 8, 1000, -0.01, 0.01, 1},
  };
  return cases;
}

SoftArgmaxOptions options_of(const PoseCase& c) {
  return SoftArgmaxOptions::for_stride(c.stride, c.multiplier);
}

std::map<std::string, std::vector<size_t>> shapes(const PoseCase& c) {
  const size_t B = size_t(c.batch), V = size_t(c.views), J = size_t(c.joints);
  return {{"heatmaps", {B * V, size_t(c.height), size_t(c.width), size_t(c.channels)}},
          {"grad_points_2d", {B * V, J, 2}},
          {"confidences", {B, V, J}},
          {"grad_weights", {B, V, J}},
          {"projections", {B, V, 3, 4}},
          {"points", {B, V, J, 2}},
          {"weights", {B, V, J}},
          {"grad_joints", {B, J, 3}}};
}

Arrays make_inputs(const PoseCase& c, uint64_t seed) {
  const ViewBatch views = view_batch(c.batch, c.views, c.joints, c.noise_px, true, seed);
  const std::map<std::string, std::vector<size_t>> shape = shapes(c);
  const auto count = [&](const char* name) {
    size_t n = 1;
    for (size_t d : shape.at(name)) n *= d;
    return n;
  };
  return {{"heatmaps", float_values(count("heatmaps"), c.heat_lo, c.heat_hi, seed + 10)},
          {"grad_points_2d", float_values(count("grad_points_2d"), -1, 1, seed + 11)},
          {"confidences", float_values(count("confidences"), 0.05, 1, seed + 12)},
          {"grad_weights", float_values(count("grad_weights"), -1, 1, seed + 13)},
          {"projections", views.projections},
          {"points", views.points},
          {"weights", float_values(count("weights"), 0.05, 1, seed + 14)},
          {"grad_joints", float_values(count("grad_joints"), -1, 1, seed + 15)}};
}

// Every layer's outputs and gradients in T, as double.
struct Outputs {
  std::vector<double> points_2d, grad_heatmaps, weights, grad_confidences, joints, grad_points,
      grad_weights;
  std::vector<uint8_t> ok;
  int not_ok = 0, backward_not_ok = 0;
};

template <typename T>
Outputs run_layers(const PoseCase& c, const Arrays& x) {
  const int n = c.batch * c.views;
  const SoftArgmaxOptions options = options_of(c);
  const std::vector<T> heatmaps = cast<T>(x.at("heatmaps"));
  std::vector<T> points_2d(size_t(n) * c.joints * 2), grad_heatmaps(heatmaps.size(), T(0));
  nn::soft_argmax_forward(n, c.height, c.width, c.channels, c.joints, heatmaps.data(), options,
                          points_2d.data());
  nn::soft_argmax_backward(n, c.height, c.width, c.channels, c.joints, heatmaps.data(), options,
                           cast<T>(x.at("grad_points_2d")).data(), grad_heatmaps.data());

  const std::vector<T> confidences = cast<T>(x.at("confidences"));
  std::vector<T> weights(confidences.size()), grad_confidences(confidences.size());
  cpu::triangulation_weights(c.batch, c.views, c.joints, confidences.data(), weights.data());
  cpu::triangulation_weights_backward(c.batch, c.views, c.joints, confidences.data(),
                                      cast<T>(x.at("grad_weights")).data(),
                                      grad_confidences.data());

  const std::vector<T> projections = cast<T>(x.at("projections")), points = cast<T>(x.at("points")),
                       view_weights = cast<T>(x.at("weights"));
  std::vector<T> joints(size_t(c.batch) * c.joints * 3), grad_points(points.size()),
      grad_weights(view_weights.size());
  Outputs out;
  out.ok.resize(size_t(c.batch) * c.joints);
  out.not_ok =
      cpu::triangulate_joints(c.batch, c.views, c.joints, projections.data(), points.data(),
                              view_weights.data(), joints.data(), out.ok.data());
  out.backward_not_ok = cpu::triangulate_joints_backward(
      c.batch, c.views, c.joints, projections.data(), points.data(), view_weights.data(),
      cast<T>(x.at("grad_joints")).data(), grad_points.data(), grad_weights.data());
  out.points_2d = as_double(points_2d);
  out.grad_heatmaps = as_double(grad_heatmaps);
  out.weights = as_double(weights);
  out.grad_confidences = as_double(grad_confidences);
  out.joints = as_double(joints);
  out.grad_points = as_double(grad_points);
  out.grad_weights = as_double(grad_weights);
  return out;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

class PoseLayersReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-pose-layers-" + std::to_string(::getpid()));
    uint64_t seed = 2100;
    for (const PoseCase& c : pose_cases()) {
      const fs::path dir = root_ / c.name;
      fs::create_directories(dir);
      inputs()[c.name] = make_inputs(c, seed += 100);
      const SoftArgmaxOptions o = options_of(c);
      const nlohmann::json spec = {{"multiplier", o.multiplier}, {"scale_x", o.scale_x},
                                   {"offset_x", o.offset_x},     {"scale_y", o.scale_y},
                                   {"offset_y", o.offset_y},     {"joints", c.joints}};
      std::ofstream(dir / "case.json") << spec.dump();
      for (const auto& [name, shape] : shapes(c)) {
        test::write_npy((dir / (name + ".npy")).string(), {shape, inputs()[c.name].at(name)});
      }
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/pose_layers_reference.py";
    status_ = std::system(("/usr/bin/python3 " + script + " " + root_.string()).c_str());
  }
  static void TearDownTestSuite() {
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }
  static std::map<std::string, Arrays>& inputs() {
    static std::map<std::string, Arrays> all;
    return all;
  }
  static std::vector<double> reference(const PoseCase& c, const std::string& name) {
    return test::read_npy((root_ / c.name / ("ref_" + name + ".npy")).string()).data;
  }

  // Every output and gradient of every case in T; prints the worst of each.
  template <typename T>
  static void check(double value_bound, double gradient_bound, const char* precision) {
    std::map<std::string, double> worst;
    for (const PoseCase& c : pose_cases()) {
      const Outputs out = run_layers<T>(c, inputs()[c.name]);
      EXPECT_EQ(out.not_ok, 0) << c.name << " in " << precision;
      EXPECT_EQ(out.backward_not_ok, 0) << c.name << " in " << precision;
      const std::pair<const char*, const std::vector<double>*> values[] = {
          {"points_2d", &out.points_2d}, {"weights", &out.weights}, {"joints", &out.joints}};
      const std::pair<const char*, const std::vector<double>*> gradients[] = {
          {"grad_heatmaps", &out.grad_heatmaps},
          {"grad_confidences", &out.grad_confidences},
          {"grad_points", &out.grad_points},
          {"grad_weights", &out.grad_weights}};
      for (const auto& [name, ours] : values) {
        const double e = normwise_relative_error(*ours, reference(c, name));
        EXPECT_LE(e, value_bound) << c.name << " in " << precision << ": " << name;
        worst[name] = std::max(worst[name], e);
      }
      for (const auto& [name, ours] : gradients) {
        const std::vector<double> expected = reference(c, name);
        EXPECT_TRUE(std::any_of(expected.begin(), expected.end(), [](double g) { return g != 0; }))
            << c.name << ": " << name << " is zero, so it checks nothing";
        const double e = normwise_relative_error(*ours, expected);
        EXPECT_LE(e, gradient_bound) << c.name << " in " << precision << ": " << name;
        worst[name] = std::max(worst[name], e);
      }
    }
    std::printf("  %-6s", precision);
    for (const auto& [name, e] : worst) std::printf(" %s %.1e", name.c_str(), e);
    std::printf("\n");
  }

  static inline fs::path root_;
  static inline int status_ = -1;
};

TEST_F(PoseLayersReference, DoubleMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<double>(kDoubleBound, kDoubleBound, "double");
}

TEST_F(PoseLayersReference, FloatMatchesTorchFloat64) {
  ASSERT_EQ(status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 with torch)";
  check<float>(kFloatValueBound, kFloatGradientBound, "float");
}

// Central differences of L = sum(grad_out * out) along random directions, each layer's double
// backward: |numeric - analytic| within 1e-6 of sum_i |gradient_i direction_i| (the size of
// the terms the derivative sums; steps chosen for each input's scale).
TEST(PoseLayersBackward, MatchesCentralDifferences) {
  const PoseCase& c = pose_cases()[0];
  const Arrays x = make_inputs(c, 77);
  const Outputs out = run_layers<double>(c, x);
  const int n = c.batch * c.views;
  const SoftArgmaxOptions options = options_of(c);
  const auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const auto soft_argmax_loss = [&](const std::vector<double>& heatmaps) {
    std::vector<double> points(size_t(n) * c.joints * 2);
    nn::soft_argmax_forward(n, c.height, c.width, c.channels, c.joints, heatmaps.data(), options,
                            points.data());
    return dot(points, x.at("grad_points_2d"));
  };
  const auto weights_loss = [&](const std::vector<double>& confidences) {
    std::vector<double> weights(confidences.size());
    cpu::triangulation_weights(c.batch, c.views, c.joints, confidences.data(), weights.data());
    return dot(weights, x.at("grad_weights"));
  };
  // points then weights, in one vector.
  const size_t n_points = x.at("points").size();
  const auto triangulation_loss = [&](const std::vector<double>& points_and_weights) {
    std::vector<double> joints(size_t(c.batch) * c.joints * 3);
    std::vector<uint8_t> ok(size_t(c.batch) * c.joints);
    cpu::triangulate_joints(c.batch, c.views, c.joints, x.at("projections").data(),
                            points_and_weights.data(), points_and_weights.data() + n_points,
                            joints.data(), ok.data());
    return dot(joints, x.at("grad_joints"));
  };
  std::vector<double> points_and_weights = x.at("points");
  points_and_weights.insert(points_and_weights.end(), x.at("weights").begin(),
                            x.at("weights").end());

  struct Check {
    const char* name;
    std::function<double(const std::vector<double>&)> loss;
    std::vector<double> at;
    size_t begin;
    const std::vector<double>* gradient;
    double step;
  };
  const Check checks[] = {
      {"heatmaps", soft_argmax_loss, x.at("heatmaps"), 0, &out.grad_heatmaps, 1e-6},
      {"confidences", weights_loss, x.at("confidences"), 0, &out.grad_confidences, 1e-6},
      {"points", triangulation_loss, points_and_weights, 0, &out.grad_points, 1e-4},
      {"weights", triangulation_loss, points_and_weights, n_points, &out.grad_weights, 1e-6}};
  uint64_t seed = 500;
  for (const Check& check : checks) {
    double worst = 0;
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<double> direction =
          synthetic::random_values(check.gradient->size(), -1, 1, seed++);
      const auto d = testing::directional_derivative(check.loss, check.at, check.begin, direction,
                                                     check.gradient->data(), check.step);
      double size = 0;
      for (size_t i = 0; i < direction.size(); ++i) {
        size += std::abs((*check.gradient)[i] * direction[i]);
      }
      ASSERT_GT(size, 0) << check.name;
      const double e = std::abs(d.numeric - d.analytic) / size;
      EXPECT_LE(e, 1e-6) << check.name << ": numeric " << d.numeric << ", analytic " << d.analytic;
      worst = std::max(worst, e);
    }
    std::printf("  d/d%-12s central differences within %.1e\n", check.name, worst);
  }
}

// Exact projections of known joints from rings of 4 and 8 cameras come back to rounding.
template <typename T>
double exact_recovery_error(int views, bool float_exact) {
  const int batch = 3, joints = 17;
  const ViewBatch v = view_batch(batch, views, joints, 0, float_exact, 900 + uint64_t(views));
  const std::vector<T> weights =
      cast<T>(synthetic::random_values(size_t(batch) * views * joints, 0.1, 1, 31));
  std::vector<T> recovered(v.joints_3d.size());
  std::vector<uint8_t> ok(size_t(batch) * joints);
  EXPECT_EQ(cpu::triangulate_joints(batch, views, joints, cast<T>(v.projections).data(),
                                    cast<T>(v.points).data(), weights.data(), recovered.data(),
                                    ok.data()),
            0);
  return normwise_relative_error(as_double(recovered), v.joints_3d);
}

TEST(PoseTriangulation, ExactProjectionsRecoverTheJoints) {
  for (int views : {4, 8}) {
    const double e_double = exact_recovery_error<double>(views, false);
    // Float: the projections and pixels as floats hold them (6e-5 px at 1000 px).
    const double e_float = exact_recovery_error<float>(views, true);
    EXPECT_LE(e_double, 1e-12) << views << " views";
    EXPECT_LE(e_float, 1e-6) << views << " views";
    std::printf("  %d views: relative error double %.1e, float %.1e\n", views, e_double, e_float);
  }
}

// One joint of 4 views in T with the given weights and pixels; ok, joint and gradients.
struct JointResult {
  bool ok, backward_ok;
  std::vector<double> joint, grad_points, grad_weights;
};

template <typename T>
JointResult one_joint(const std::vector<double>& weights, std::vector<double> points = {}) {
  const ViewBatch v = view_batch(1, 4, 1, 0, false, 4242);
  if (points.empty()) points = v.points;
  const std::vector<T> p = cast<T>(v.projections), x = cast<T>(points), w = cast<T>(weights),
                       grad_joint = {T(1), T(-2), T(0.5)};
  std::vector<T> joint(3, T(7)), grad_points(8, T(7)), grad_weights(4, T(7));
  const JointViews<T> views{4, p.data(), x.data(), 2, w.data(), 1};
  JointResult r;
  r.ok = triangulate_joint(views, joint.data());
  r.backward_ok =
      triangulate_joint_backward(views, grad_joint.data(), grad_points.data(), grad_weights.data());
  r.joint = as_double(joint);
  r.grad_points = as_double(grad_points);
  r.grad_weights = as_double(grad_weights);
  return r;
}

void expect_flagged(const JointResult& r, const std::string& what) {
  EXPECT_FALSE(r.ok) << what;
  EXPECT_FALSE(r.backward_ok) << what;
  const auto zeros = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x == 0; });
  };
  EXPECT_TRUE(zeros(r.joint)) << what;
  EXPECT_TRUE(zeros(r.grad_points)) << what;
  EXPECT_TRUE(zeros(r.grad_weights)) << what;
}

template <typename T>
void check_degenerate_weights(const char* precision) {
  const std::string p = precision;
  expect_flagged(one_joint<T>({0, 0.7, 0, 0}), p + ": one view with weight");
  expect_flagged(one_joint<T>({0, 0, 0, 0}), p + ": all weights zero");
  const JointResult two = one_joint<T>({0, 0.7, 0, 0.2});
  EXPECT_TRUE(two.ok && two.backward_ok) << p << ": two views with weight suffice";
  const ViewBatch v = view_batch(1, 4, 1, 0, false, 4242);
  EXPECT_LE(normwise_relative_error(two.joint, v.joints_3d), 1e-5) << p;
}

TEST(PoseTriangulation, FewerThanTwoWeightedViewsAreFlagged) {
  check_degenerate_weights<double>("double");
  check_degenerate_weights<float>("float");
}

template <typename T>
void check_non_finite(const char* precision) {
  const std::vector<double> weights = {0.3, 0.7, 0.5, 0.2};
  const ViewBatch v = view_batch(1, 4, 1, 0, false, 4242);
  for (double bad : {double(NAN), double(INFINITY), -double(INFINITY)}) {
    const std::string what = std::string(precision) + " with " + std::to_string(bad);
    std::vector<double> points = v.points;
    points[3] = bad;
    expect_flagged(one_joint<T>(weights, points), what + " in a pixel");
    std::vector<double> bad_weights = weights;
    bad_weights[2] = bad;
    expect_flagged(one_joint<T>(bad_weights), what + " in a weight");
  }
}

TEST(PoseTriangulation, NonFiniteInputsAreFlaggedNotPropagated) {
  check_non_finite<double>("double");
  check_non_finite<float>("float");
}

// The chain as the model runs it: a NaN heatmap and all-zero confidences each spoil only their
// own joint, which the triangulation flags; every other joint stays ok and finite.
TEST(PoseTriangulation, BadHeatmapsAndConfidencesFlagOnlyTheirJoint) {
  const PoseCase& c = pose_cases()[0];
  Arrays x = make_inputs(c, 31);
  // Sample 1, view 2, joint 5: a NaN cell. Sample 0, joint 3: zero confidence in every view.
  const size_t map_size = size_t(c.height) * c.width * c.channels;
  x["heatmaps"][(1 * c.views + 2) * map_size + 40 * size_t(c.channels) + 5] = NAN;
  for (int v = 0; v < c.views; ++v) x["confidences"][size_t(v) * c.joints + 3] = 0;
  const int n = c.batch * c.views;
  std::vector<double> points(size_t(n) * c.joints * 2), weights(x["confidences"].size());
  nn::soft_argmax_forward(n, c.height, c.width, c.channels, c.joints, x["heatmaps"].data(),
                          options_of(c), points.data());
  cpu::triangulation_weights(c.batch, c.views, c.joints, x["confidences"].data(), weights.data());
  std::vector<double> joints(size_t(c.batch) * c.joints * 3), grad_points(points.size()),
      grad_weights(weights.size());
  std::vector<uint8_t> ok(size_t(c.batch) * c.joints);
  EXPECT_EQ(cpu::triangulate_joints(c.batch, c.views, c.joints, x["projections"].data(),
                                    points.data(), weights.data(), joints.data(), ok.data()),
            2);
  EXPECT_EQ(cpu::triangulate_joints_backward(c.batch, c.views, c.joints, x["projections"].data(),
                                             points.data(), weights.data(), x["grad_joints"].data(),
                                             grad_points.data(), grad_weights.data()),
            2);
  for (int bj = 0; bj < c.batch * c.joints; ++bj) {
    EXPECT_EQ(ok[bj], bj == 3 || bj == c.joints + 5 ? 0 : 1) << "joint " << bj;
  }
  EXPECT_TRUE(all_finite(joints));
  // The flagged joints' gradients are zeros, so none is NaN.
  EXPECT_TRUE(all_finite(grad_points));
  EXPECT_TRUE(all_finite(grad_weights));
}

// Logits of 1e6 (exp overflows far below) still give the hard argmax, in both precisions, and a
// tie between two cells their midpoint; the backward stays finite.
template <typename T>
void check_huge_multiplier(const char* precision) {
  const int height = 6, width = 8, channels = 2;
  std::vector<T> heatmaps(size_t(height) * width * channels, T(0.25));
  heatmaps[(2 * width + 5) * channels] = T(1);      // map 0: one peak at row 2, col 5
  heatmaps[(1 * width + 1) * channels + 1] = T(1);  // map 1: a tie at (1, 1) and (3, 7)
  heatmaps[(3 * width + 7) * channels + 1] = T(1);
  const SoftArgmaxOptions options = SoftArgmaxOptions::for_stride(4, 1e6);
  std::vector<T> points(4), grad(heatmaps.size(), T(0));
  nn::soft_argmax_forward(1, height, width, channels, channels, heatmaps.data(), options,
                          points.data());
  const std::vector<T> expected = {T(4 * 5 + 1.5), T(4 * 2 + 1.5), T(4 * 4 + 1.5), T(4 * 2 + 1.5)};
  EXPECT_EQ(points, expected) << precision;
  const std::vector<T> grad_points = {T(1), T(-1), T(0.5), T(2)};
  nn::soft_argmax_backward(1, height, width, channels, channels, heatmaps.data(), options,
                           grad_points.data(), grad.data());
  EXPECT_TRUE(all_finite(as_double(grad))) << precision;
}

TEST(PoseSoftArgmax, HugeMultiplierDoesNotOverflow) {
  check_huge_multiplier<double>("double");
  check_huge_multiplier<float>("float");
}

// The CPU soft-argmax's exp, against libm's in double: within 2 ulp (Cephes' polynomial) where
// the result is normal, within two of the smallest subnormal below, exactly 0 from -104 down, NaN
// for NaN, and exp(0) for anything above 0.
TEST(PoseSoftArgmax, ExpReachesTheSubnormals) {
  int subnormal = 0;
  for (float x = 0.0f; x > -110.0f; x -= 0.0137f) {
    const float ours = nn::exp_nonpositive_with_subnormals(x);
    const double exact = std::exp(double(x));
    if (x < -104.0f) {
      EXPECT_EQ(ours, 0.0f) << x;
    } else if (exact >= FLT_MIN) {
      EXPECT_LE(std::abs(ours - exact), 2 * std::ldexp(1.0, std::ilogb(exact) - 23)) << x;
    } else {
      subnormal += ours > 0;
      EXPECT_LE(std::abs(ours - exact), std::ldexp(1.0, -148)) << x;
    }
  }
  EXPECT_GT(subnormal, 1000);
  EXPECT_EQ(nn::exp_nonpositive_with_subnormals(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(nn::exp_nonpositive_with_subnormals(3.0f), 1.0f);
  EXPECT_TRUE(std::isnan(nn::exp_nonpositive_with_subnormals(std::nanf(""))));
}

// A flat heatmap's expectation is the map's centre, which at stride 4 is the image's centre in
// mvibr's pixel convention (64 px: 31.5).
TEST(PoseSoftArgmax, FlatMapGivesTheImageCentre) {
  const int side = 16, channels = 1;
  const std::vector<double> heatmaps(size_t(side) * side * channels, 0.3);
  std::vector<double> point(2);
  nn::soft_argmax_forward(1, side, side, channels, 1, heatmaps.data(),
                          SoftArgmaxOptions::for_stride(4, 100), point.data());
  EXPECT_NEAR(point[0], 31.5, 1e-12);
  EXPECT_NEAR(point[1], 31.5, 1e-12);
}

// A map whose softmax decays over ~50 orders of magnitude (logits falling 2 a cell at multiplier
// 100): the float backward writes each cell's gradient as the double one's, except those the double
// gradient puts below float's smallest normal, which are 0, never subnormal.
TEST(PoseSoftArgmax, BackwardWritesNoSubnormals) {
  const int side = 32;
  std::vector<double> map(size_t(side) * side);
  for (int row = 0; row < side; ++row) {
    for (int col = 0; col < side; ++col) map[size_t(row * side + col)] = -0.02 * (row + col);
  }
  const SoftArgmaxOptions options = SoftArgmaxOptions::for_stride(4, 100);
  const std::vector<double> grad_point = {0.7, -0.4};
  std::vector<double> exact(map.size());
  nn::soft_argmax_backward(1, side, side, 1, 1, map.data(), options, grad_point.data(),
                           exact.data());
  const std::vector<float> map_f(map.begin(), map.end()), grad_point_f = {0.7f, -0.4f};
  std::vector<float> grad(map.size(), 1.0f);
  nn::soft_argmax_backward(1, side, side, 1, 1, map_f.data(), options, grad_point_f.data(),
                           grad.data());
  int zeroed = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    ASSERT_NE(std::fpclassify(grad[i]), FP_SUBNORMAL) << "cell " << i;
    if (std::abs(exact[i]) < 0.5 * FLT_MIN) {
      EXPECT_EQ(grad[i], 0.0f) << "cell " << i;
      zeroed += exact[i] != 0;
    } else if (std::abs(exact[i]) > 2 * FLT_MIN) {
      EXPECT_NEAR(grad[i], exact[i], 1e-3 * std::abs(exact[i])) << "cell " << i;
    }
  }
  EXPECT_GT(zeroed, 50) << "the map must put gradients in float's subnormal range";
}

// The backward writes the J heatmap channels and leaves the other head's channels alone.
TEST(PoseSoftArgmax, BackwardLeavesTheOtherChannels) {
  const int n = 2, height = 5, width = 4, channels = 7, joints = 3;
  const std::vector<double> heatmaps =
      synthetic::random_values(size_t(n) * height * width * channels, -1, 1, 8);
  const std::vector<double> grad_points =
      synthetic::random_values(size_t(n) * joints * 2, -1, 1, 9);
  constexpr double kUntouched = 123.5;
  std::vector<double> grad(heatmaps.size(), kUntouched);
  nn::soft_argmax_backward(n, height, width, channels, joints, heatmaps.data(), SoftArgmaxOptions{},
                           grad_points.data(), grad.data());
  for (size_t i = 0; i < grad.size(); ++i) {
    if (int(i % channels) < joints) {
      EXPECT_NE(grad[i], kUntouched) << i;
    } else {
      EXPECT_EQ(grad[i], kUntouched) << i;
    }
  }
  EXPECT_THROW(nn::soft_argmax_forward(n, height, width, joints - 1, joints, heatmaps.data(),
                                       SoftArgmaxOptions{}, grad.data()),
               InvalidArgument);
}

// The backward from the forward's kept moments gives the gradients of the backward that makes
// them again, bit for bit; moments of another map give other gradients.
TEST(PoseSoftArgmax, KeptMomentsGiveTheSameGradients) {
  const int n = 3, height = 6, width = 5, channels = 9, joints = 7;
  const std::vector<double> drawn =
      synthetic::random_values(size_t(n) * height * width * channels, -1, 1, 10);
  const std::vector<float> heatmaps(drawn.begin(), drawn.end());
  const std::vector<double> drawn_grad =
      synthetic::random_values(size_t(n) * joints * 2, -1, 1, 11);
  const std::vector<float> grad_points(drawn_grad.begin(), drawn_grad.end());
  const SoftArgmaxOptions options = SoftArgmaxOptions::for_stride(4, 30);
  std::vector<float> points(grad_points.size()), kept_points(grad_points.size());
  std::vector<float> moments(size_t(n) * joints * nn::kSoftArgmaxMoments);
  nn::soft_argmax_forward(n, height, width, channels, joints, heatmaps.data(), options,
                          points.data());
  nn::soft_argmax_forward(n, height, width, channels, joints, heatmaps.data(), options,
                          kept_points.data(), moments.data());
  EXPECT_EQ(points, kept_points);
  std::vector<float> again(heatmaps.size(), 0.0f), kept(heatmaps.size(), 0.0f);
  nn::soft_argmax_backward(n, height, width, channels, joints, heatmaps.data(), options,
                           grad_points.data(), again.data());
  nn::soft_argmax_backward(n, height, width, channels, joints, heatmaps.data(), options,
                           grad_points.data(), kept.data(), moments.data());
  EXPECT_EQ(again, kept);
  std::vector<float> shifted = moments;
  shifted[2] += 0.5f;  // image 0, joint 0: its x
  nn::soft_argmax_backward(n, height, width, channels, joints, heatmaps.data(), options,
                           grad_points.data(), kept.data(), shifted.data());
  EXPECT_NE(again, kept);
}

// P = K [R|t] projects as the camera does, and the ray through the pixel passes through the
// point (mvibr's pixel-centre convention, camera.h).
TEST(PoseTriangulation, ProjectionMatrixMatchesTheCamera) {
  const PinholeCamera<double> camera = camera_ring(5, 3)[2];
  const std::vector<double> p = projection_of(camera);
  const double x[3] = {0.2, -0.3, 1.4};
  double pixel[2];
  project(p.data(), x, pixel);
  const Vec3<double> in_camera = transform_point(camera.w2c, Vec3<double>{x[0], x[1], x[2]});
  EXPECT_NEAR(pixel[0], camera.fx * in_camera.x / in_camera.z + camera.cx, 1e-9);
  EXPECT_NEAR(pixel[1], camera.fy * in_camera.y / in_camera.z + camera.cy, 1e-9);
  Vec3<double> origin, direction;
  pixel_to_ray(camera, pixel[0], pixel[1], &origin, &direction);
  const Vec3<double> on_ray = origin + in_camera.z * direction;
  EXPECT_NEAR(norm(on_ray - Vec3<double>{x[0], x[1], x[2]}), 0, 1e-12);
}

// The singularity test's margins: the reciprocal condition number of a rank-2 M (one view, any
// direction) is rounding noise below the tolerance; two views only 5 degrees apart, and a ring
// with one view at weight 1 and the rest at 1e-3 or 1e-5, are far above it.
template <typename T>
double reciprocal_condition(const std::vector<double>& projections,
                            const std::vector<double>& points, const std::vector<double>& weights,
                            bool* invertible) {
  const std::vector<T> p = cast<T>(projections), x = cast<T>(points), w = cast<T>(weights);
  Symmetric3<double> m;
  double r[3];
  normal_equations(JointViews<T>{int(w.size()), p.data(), x.data(), 2, w.data(), 1}, &m, r);
  SymmetricInverse3<double> inverse;
  *invertible = invert_symmetric_3x3(m, &inverse);
  const double trace = m.xx + m.yy + m.zz;
  const Symmetric3<double> n{m.xx / trace, m.yx / trace, m.yy / trace,
                             m.zx / trace, m.zy / trace, m.zz / trace};
  const Symmetric3<double>& a = inverse.adjugate;
  const double determinant = n.xx * a.xx + n.yx * a.yx + n.zx * a.zx;
  return determinant / (frobenius_norm(n) * frobenius_norm(a));
}

template <typename T>
void check_condition_margins(const char* precision) {
  double worst_single = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const ViewBatch v = view_batch(1, 1, 1, 0, false, 7000 + seed);
    bool invertible = true;
    const double rcond = reciprocal_condition<T>(v.projections, v.points, {0.8}, &invertible);
    EXPECT_FALSE(invertible) << precision << " seed " << seed << ": " << rcond;
    worst_single = std::max(worst_single, rcond);
  }
  const auto camera_at = [](double degrees) {
    const double a = degrees * M_PI / 180;
    return look_at_camera(Vec3<double>{4 * std::cos(a), 4 * std::sin(a), 1.5},
                          Vec3<double>{0, 0, 0.9}, Vec3<double>{0, 0, 1}, 1000.0, 1000, 1000);
  };
  std::vector<double> projections = projection_of(camera_at(20)), points(4);
  const std::vector<double> second = projection_of(camera_at(25));
  projections.insert(projections.end(), second.begin(), second.end());
  const double x[3] = {0.1, 0.2, 1.1};
  project(&projections[0], x, &points[0]);
  project(&projections[12], x, &points[2]);
  bool invertible = false;
  const double narrow = reciprocal_condition<T>(projections, points, {0.5, 0.5}, &invertible);
  EXPECT_TRUE(invertible) << precision;
  const double tolerance = kConditionTolerance;
  EXPECT_LT(worst_single, tolerance / 4) << precision;
  EXPECT_GT(narrow, tolerance * 100) << precision;
  // Uneven weights on a 4-view ring: one view at 1, the others at 1e-3 or (what the 1e-5 of
  // the weights gives a view with confidence 0) 1e-5.
  const ViewBatch ring = view_batch(1, 4, 1, 0, false, 4242);
  bool uneven_ok = false, epsilon_ok = false;
  const double uneven =
      reciprocal_condition<T>(ring.projections, ring.points, {1, 1e-3, 1e-3, 1e-3}, &uneven_ok);
  const double epsilon =
      reciprocal_condition<T>(ring.projections, ring.points, {1, 1e-5, 1e-5, 1e-5}, &epsilon_ok);
  std::printf(
      "  %-6s tolerance %.1e: one view's reciprocal condition <= %.1e, two views 5 deg "
      "apart %.1e, weights 1 and 1e-3 %.1e (%s), 1 and 1e-5 %.1e (%s)\n",
      precision, tolerance, worst_single, narrow, uneven, uneven_ok ? "ok" : "flagged", epsilon,
      epsilon_ok ? "ok" : "flagged");
  // The solve runs in double, so float inputs solve these too.
  EXPECT_TRUE(uneven_ok) << precision;
  EXPECT_TRUE(epsilon_ok) << precision;
}

TEST(PoseTriangulation, SingularityTestHasMargins) {
  check_condition_margins<double>("double");
  check_condition_margins<float>("float");
}

}  // namespace
}  // namespace mvibr
