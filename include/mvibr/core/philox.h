// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// Counter-based: the draw for (seed, step, ray, sample, stream) is a pure function of those
// numbers, so the CPU backend, the CUDA kernels, 1 rank and N ranks all see the same samples.
#pragma once

#include <cstdint>

#include "mvibr/core/hd.h"

namespace mvibr {

struct Philox4x32 {
  uint32_t v[4];
};

MVIBR_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on counter c with key k.
MVIBR_HD Philox4x32 philox4x32_10(Philox4x32 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(kMul0, c.v[0], &hi0);
    const uint32_t lo1 = philox_mulhilo(kMul1, c.v[2], &hi1);
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// What a draw is for; part of the counter so that different uses never share numbers.
enum class RandomStream : uint32_t {
  kStratifiedJitter = 1,
  kImportanceSampling = 2,
  kPixelSelection = 3,
  kSourceSelection = 4,
};

// The key of every draw in one training step.
struct RandomKey {
  uint64_t seed = 0;
  uint64_t step = 0;
};

// A float in [0, 1) with 24 random bits: exactly representable, identical on every device.
MVIBR_HD float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1.0p-24f;
}

// Uniform [0, 1) draw for (key, stream, ray, index).
MVIBR_HD float philox_uniform(RandomKey key, RandomStream stream, uint32_t ray, uint32_t index) {
  const Philox4x32 counter{
      {ray, index, static_cast<uint32_t>(key.step),
       (static_cast<uint32_t>(key.step >> 32) << 8) ^ static_cast<uint32_t>(stream)}};
  const Philox4x32 out = philox4x32_10(counter, static_cast<uint32_t>(key.seed),
                                       static_cast<uint32_t>(key.seed >> 32));
  return uint_to_unit_float(out.v[0]);
}

}  // namespace mvibr
