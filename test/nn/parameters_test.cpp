// The flat parameter store and the seeded initialisers.
#include "mvibr/nn/parameters.h"

#include <gtest/gtest.h>

#include <cmath>

#include "mvibr/core/error.h"

namespace mvibr::nn {
namespace {

TEST(Parameters, LiveInOneFlatBufferUnderTheirNames) {
  ParameterSet set;
  const Parameter a = set.add("net.fc.weight", {3, 4}, ParameterGroup::kMlp);
  const Parameter b = set.add("net.fc.bias", {3}, ParameterGroup::kFeature);
  EXPECT_EQ(set.size(), 15u);
  EXPECT_EQ(set.info(b).offset, 12u);
  set.value(a)[11] = 2.0f;
  set.value(b)[0] = 3.0f;
  EXPECT_EQ(set.values()[11], 2.0f);
  EXPECT_EQ(set.values()[12], 3.0f);
  EXPECT_EQ(set.find("net.fc.bias").index, b.index);
  EXPECT_THROW(set.find("net.fc.other"), InvalidArgument);
  EXPECT_THROW(set.add("net.fc.bias", {1}, ParameterGroup::kMlp), InvalidArgument);
  set.grad(a)[0] = 1.0f;
  set.zero_grads();
  EXPECT_EQ(set.grads()[0], 0.0f);
}

TEST(Parameters, InitialisersFollowTheirDistributionsAndSeeds) {
  std::vector<float> x(200000), y(200000);
  Initializer(1).kaiming_normal(x.data(), x.size(), 50);
  double mean = 0, square = 0;
  for (float v : x) {
    mean += v;
    square += double(v) * v;
  }
  mean /= double(x.size());
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(square / double(x.size())), std::sqrt(2.0 / 50), 0.002);
  Initializer(1).kaiming_normal(y.data(), y.size(), 50);
  EXPECT_EQ(x, y);
  Initializer(2).uniform(y.data(), y.size(), 0.25f);
  for (float v : y) ASSERT_LE(std::abs(v), 0.25f);
  EXPECT_NE(x, y);
}

}  // namespace
}  // namespace mvibr::nn
