// Philox 4x32-10 against the known-answer vectors of Random123, and the properties the
// samplers rely on: [0, 1) range, distinct streams, and a flat distribution.
#include "mvibr/core/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace mvibr {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  const struct {
    Philox4x32 counter;
    uint32_t k0, k1;
    Philox4x32 expected;
  } cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const auto& c : cases) {
    const Philox4x32 out = philox4x32_10(c.counter, c.k0, c.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], c.expected.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformsAreInUnitIntervalAndFlat) {
  const RandomKey key{42, 3};
  constexpr int kDraws = 100000;
  int histogram[10] = {};
  for (int i = 0; i < kDraws; ++i) {
    const float u =
        philox_uniform(key, RandomStream::kStratifiedJitter, uint32_t(i / 64), uint32_t(i % 64));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ++histogram[int(u * 10)];
  }
  for (int bin : histogram) EXPECT_NEAR(bin, kDraws / 10, 5 * std::sqrt(kDraws / 10.0));
  EXPECT_EQ(uint_to_unit_float(0xffffffffu), 1.0f - 0x1.0p-24f);
}

TEST(Philox, StreamsStepsAndRaysDrawDifferentNumbers) {
  const RandomKey key{7, 11};
  std::set<float> seen;
  seen.insert(philox_uniform(key, RandomStream::kStratifiedJitter, 5, 2));
  seen.insert(philox_uniform(key, RandomStream::kImportanceSampling, 5, 2));
  seen.insert(philox_uniform(RandomKey{7, 12}, RandomStream::kStratifiedJitter, 5, 2));
  seen.insert(philox_uniform(RandomKey{8, 11}, RandomStream::kStratifiedJitter, 5, 2));
  seen.insert(philox_uniform(key, RandomStream::kStratifiedJitter, 6, 2));
  seen.insert(philox_uniform(key, RandomStream::kStratifiedJitter, 5, 3));
  seen.insert(philox_uniform(RandomKey{7, 11 + (uint64_t(1) << 32)},
                             RandomStream::kStratifiedJitter, 5, 2));
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(philox_uniform(key, RandomStream::kStratifiedJitter, 5, 2),
            philox_uniform(key, RandomStream::kStratifiedJitter, 5, 2));
}

}  // namespace
}  // namespace mvibr
