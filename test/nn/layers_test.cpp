// Every layer's hand-written backward against central finite differences in double precision,
// coordinate by coordinate (the layers are small here), for the parameters and the input.
#include "mvibr/nn/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::nn {
namespace {

using Vector = std::vector<double>;

Vector random_vector(size_t count, uint64_t seed, double lo = -1, double hi = 1) {
  return synthetic::random_values(count, lo, hi, seed);
}

double dot(const Vector& a, const Vector& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// max |finite difference - analytic| / max |analytic| over every coordinate of `at`, where `loss`
// is a scalar function of `at` and `grad` its analytic gradient there.
double gradient_error(const std::function<double(const Vector&)>& loss, Vector at,
                      const Vector& grad) {
  const double h = 1e-6;
  double difference = 0, scale = 0;
  for (size_t i = 0; i < at.size(); ++i) {
    const double saved = at[i];
    at[i] = saved + h;
    const double plus = loss(at);
    at[i] = saved - h;
    const double minus = loss(at);
    at[i] = saved;
    difference = std::max(difference, std::abs((plus - minus) / (2 * h) - grad[i]));
    scale = std::max(scale, std::abs(grad[i]));
  }
  EXPECT_GT(scale, 0) << "a zero gradient checks nothing";
  return difference / scale;
}

constexpr double kBound = 1e-7;

TEST(LayerLinear, BackwardMatchesFiniteDifferences) {
  for (bool bias : {true, false}) {
    ParameterSet set;
    ParameterBlock block(set, "net.", ParameterGroup::kMlp);
    const Linear layer(block, "fc", 5, 7, bias);
    ASSERT_EQ(block.size(), bias ? 42u : 35u);
    const size_t n = 9;
    const Vector params = random_vector(block.size(), 1), x = random_vector(n * 5, 2),
                 up = random_vector(n * 7, 3);
    auto loss = [&](const Vector& p, const Vector& in) {
      Vector y(n * 7);
      layer.forward(p.data(), n, in.data(), y.data());
      return dot(y, up);
    };
    Vector grads(block.size(), 0.0), grad_x(n * 5, 0.0);
    layer.backward(params.data(), grads.data(), n, x.data(), up.data(), grad_x.data());
    EXPECT_LE(gradient_error([&](const Vector& p) { return loss(p, x); }, params, grads), kBound);
    EXPECT_LE(gradient_error([&](const Vector& in) { return loss(params, in); }, x, grad_x),
              kBound);

    // Parameter gradients accumulate; the input gradient accumulates when asked to.
    Vector again = grads, grad_x_again = grad_x;
    layer.backward(params.data(), again.data(), n, x.data(), up.data(), grad_x_again.data(), true);
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_NEAR(again[i], 2 * grads[i], 1e-12);
    for (size_t i = 0; i < grad_x.size(); ++i) EXPECT_NEAR(grad_x_again[i], 2 * grad_x[i], 1e-12);
  }
}

TEST(LayerLinear, ForwardIsXWTransposePlusBiasInFloatToo) {
  ParameterSet set;
  ParameterBlock block(set, "net.", ParameterGroup::kMlp);
  const Linear layer(block, "fc", 3, 2);
  const std::vector<float> params = {1, 2, 3, 4, 5, 6, 0.5f, -1};  // W [2,3], b [2]
  const std::vector<float> x = {1, 0, -1, 2, 1, 0};
  std::vector<float> y(4);
  layer.forward(params.data(), 2, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{-1.5f, -3, 4.5f, 12}));
  EXPECT_EQ(set.infos()[0].name, "net.fc.weight");
  EXPECT_EQ(set.infos()[0].shape, (std::vector<int>{2, 3}));
  EXPECT_EQ(set.infos()[1].name, "net.fc.bias");
}

TEST(LayerActivations, BackwardFromTheOutputMatchesFiniteDifferences) {
  using Activation = void (*)(size_t, double*);
  using Backward = void (*)(size_t, const double*, double*);
  const std::vector<std::pair<Activation, Backward>> activations = {
      {elu<double>, elu_backward<double>},
      {relu<double>, relu_backward<double>},
      {sigmoid<double>, sigmoid_backward<double>}};
  for (const auto& [forward, backward] : activations) {
    const size_t n = 40;
    const Vector x = random_vector(n, 4, -3, 3), up = random_vector(n, 5);
    auto loss = [&](const Vector& in) {
      Vector y = in;
      forward(n, y.data());
      return dot(y, up);
    };
    Vector y = x, grad = up;
    forward(n, y.data());
    backward(n, y.data(), grad.data());
    EXPECT_LE(gradient_error(loss, x, grad), kBound);
  }
  std::vector<float> values = {-1.0f, 0.0f, 2.0f};
  elu(values.size(), values.data());
  EXPECT_FLOAT_EQ(values[0], std::expm1(-1.0f));
  EXPECT_EQ(values[1], 0.0f);
  EXPECT_EQ(values[2], 2.0f);
}

TEST(LayerActivations, FloatEluIsAccurateEverywhere) {
  // Dense over [-100, 10] (enough elements for an OpenMP team), plus the awkward values.
  const size_t n = 1 << 18;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(-100.0 + 110.0 * double(i) / double(n));
  for (float special :
       {0.0f, -0.0f, 1e-30f, -1e-30f, -1e-7f, -86.9f, -87.0f, -87.5f, -1e30f, 3e38f}) {
    x.push_back(special);
  }
  std::vector<float> y = x;
  elu(y.size(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = x[i] > 0 ? double(x[i]) : std::expm1(double(x[i]));
    ASSERT_NEAR(y[i], expected, x[i] > 0 ? 0.0 : 2.5e-7) << x[i];
  }
}

TEST(LayerNormTest, BackwardMatchesFiniteDifferences) {
  ParameterSet set;
  ParameterBlock block(set, "net.", ParameterGroup::kMlp);
  const LayerNorm norm(block, "norm", 7, 1e-6);
  const size_t n = 6;
  const Vector params = random_vector(block.size(), 6), x = random_vector(n * 7, 7, -2, 2),
               up = random_vector(n * 7, 8);
  auto loss = [&](const Vector& p, const Vector& in) {
    Vector y(n * 7), xhat(n * 7), rstd(n);
    norm.forward(p.data(), n, in.data(), y.data(), xhat.data(), rstd.data());
    return dot(y, up);
  };
  Vector y(n * 7), xhat(n * 7), rstd(n), grads(block.size(), 0.0), grad_x(n * 7);
  norm.forward(params.data(), n, x.data(), y.data(), xhat.data(), rstd.data());
  norm.backward(params.data(), grads.data(), n, xhat.data(), rstd.data(), up.data(), grad_x.data());
  EXPECT_LE(gradient_error([&](const Vector& p) { return loss(p, x); }, params, grads), kBound);
  EXPECT_LE(gradient_error([&](const Vector& in) { return loss(params, in); }, x, grad_x), kBound);

  // Normalised rows: zero mean, unit (biased) variance before the affine part.
  for (size_t i = 0; i < n; ++i) {
    double mean = 0, var = 0;
    for (int c = 0; c < 7; ++c) mean += xhat[i * 7 + c] / 7;
    for (int c = 0; c < 7; ++c) var += (xhat[i * 7 + c] - mean) * (xhat[i * 7 + c] - mean) / 7;
    EXPECT_NEAR(mean, 0, 1e-12);
    EXPECT_NEAR(var, 1, 1e-5);
  }
}

TEST(LayerAttention, BackwardMatchesFiniteDifferencesForBothMasks) {
  for (AttentionMask mode : {AttentionMask::kQueries, AttentionMask::kKeys}) {
    ParameterSet set;
    ParameterBlock block(set, "net.", ParameterGroup::kMlp);
    const MultiHeadAttention attention(block, "att", 4, 16, 4, 4, mode);
    ASSERT_EQ(block.size(), 4u * 16 * 16 + 32);
    const size_t batch = 3, len = 5, tokens = batch * len;
    // Sequence 0 has two invalid tokens, sequence 1 none valid, sequence 2 all valid.
    const Vector valid = {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    const Vector params = random_vector(block.size(), 9, -0.5, 0.5),
                 x = random_vector(tokens * 16, 10, -2, 2), up = random_vector(tokens * 16, 11);
    auto loss = [&](const Vector& p, const Vector& in) {
      Vector saved(attention.saved_size(batch, len)), y(tokens * 16);
      attention.forward(p.data(), batch, len, in.data(), valid.data(), saved.data(), y.data());
      return dot(y, up);
    };
    Vector saved(attention.saved_size(batch, len)), y(tokens * 16);
    attention.forward(params.data(), batch, len, x.data(), valid.data(), saved.data(), y.data());
    Vector grads(block.size(), 0.0), grad_x(tokens * 16),
        scratch(attention.scratch_size(batch, len));
    attention.backward(params.data(), grads.data(), batch, len, x.data(), valid.data(),
                       saved.data(), up.data(), grad_x.data(), scratch.data());
    EXPECT_LE(gradient_error([&](const Vector& p) { return loss(p, x); }, params, grads), kBound);
    EXPECT_LE(gradient_error([&](const Vector& in) { return loss(params, in); }, x, grad_x),
              kBound);
  }
}

TEST(LayerAttention, MaskSemantics) {
  // The probabilities the forward saves: kKeys gives invalid keys none, kQueries gives invalid
  // queries a uniform row and leaves valid queries free to attend to invalid keys.
  for (AttentionMask mode : {AttentionMask::kQueries, AttentionMask::kKeys}) {
    ParameterSet set;
    ParameterBlock block(set, "net.", ParameterGroup::kMlp);
    const MultiHeadAttention attention(block, "att", 4, 16, 4, 4, mode);
    Vector params(block.size(), 0.0);
    const size_t len = 4;
    const Vector valid = {1, 0, 1, 1};
    const Vector x = random_vector(len * 16, 12);
    const Vector w = random_vector(2 * 16 * 16, 13);
    std::copy(w.begin(), w.end(), params.begin());  // w_qs, w_ks: unequal scores
    Vector saved(attention.saved_size(1, len)), y(len * 16);
    attention.forward(params.data(), 1, len, x.data(), valid.data(), saved.data(), y.data());
    const double* probs = saved.data() + 3 * len * 16;  // after q, k, v
    for (size_t i = 0; i < len; ++i) {
      for (size_t j = 0; j < len; ++j) {
        const double p = probs[i * len + j];  // head 0
        if (mode == AttentionMask::kKeys) {
          if (valid[j] == 0) {
            EXPECT_EQ(p, 0) << i << " " << j;
          }
        } else if (valid[i] == 0) {
          EXPECT_NEAR(p, 1.0 / len, 1e-15) << i << " " << j;
        }
      }
    }
    // Under kQueries a valid query still attends to the invalid key.
    if (mode == AttentionMask::kQueries) {
      EXPECT_GT(probs[0 * len + 1], 0);
    }
  }
}

TEST(LayerParameterBlock, StaysContiguousAndNamesUnderItsPrefix) {
  ParameterSet set;
  set.add("other.weight", {2}, ParameterGroup::kFeature);
  ParameterBlock block(set, "net.", ParameterGroup::kMlp);
  EXPECT_EQ(block.offset(), 2u);
  EXPECT_EQ(block.add("a", {3, 2}), 0u);
  EXPECT_EQ(block.add("b", {}), 6u);
  EXPECT_EQ(block.size(), 7u);
  EXPECT_EQ(set.info(set.find("net.b")).group, ParameterGroup::kMlp);
  set.add("intruder", {1}, ParameterGroup::kMlp);
  EXPECT_THROW(block.add("c", {1}), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::nn
