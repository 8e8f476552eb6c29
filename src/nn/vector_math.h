// exp for the element-wise loops of the layers, written so that those loops vectorise: a libm
// call per element was half of the aggregation network's time. Float evaluates Cephes' expf
// inline (a degree-6 polynomial after reducing by powers of two, within 2 ulp). GCC will not
// turn a float select that guards an exponential into a blend (without -fno-trapping-math the
// exponential might trap if evaluated for both sides), so the clamps are taken on the bits with
// integer operations. Double, the oracles' precision, calls libm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mvibr::nn {

inline int32_t bits_of(float x) {
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

inline float float_of(int32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// min(x, -0.0): x where its sign bit is set (the arithmetic shift spreads it into a mask), else
// -0.0. Non-positive floats order as signed integers by magnitude.
inline float nonpositive_part(float x) {
  return float_of((bits_of(x) & (bits_of(x) >> 31)) | INT32_MIN);
}
inline double nonpositive_part(double x) {
  return std::min(x, -0.0);
}

// exp(min(x, 0)), exactly 0 below -87 (where expf underflows anyway).
inline float exp_nonpositive(float x) {
  const int32_t negative = bits_of(nonpositive_part(x));
  const int32_t lowest = int32_t(0xC2AE0000u);  // -87.0f
  const float y = float_of(std::min(negative, lowest));
  // y = k ln2 + r, |r| <= ln2 / 2, k rounded by the 1.5 * 2^23 shifter (SSE2 has no round).
  const float shifter = 12582912.0f;
  const float k = (y * 1.44269504088896341f + shifter) - shifter;
  const float r = (y - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * r * r + r + 1.0f) * float_of((int32_t(k) + 127) << 23);
  return float_of(bits_of(e) & (negative > lowest ? 0 : -1));
}
inline double exp_nonpositive(double x) {
  return std::exp(std::min(x, 0.0));
}

}  // namespace mvibr::nn
