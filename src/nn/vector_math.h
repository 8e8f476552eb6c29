// exp for the element-wise loops of the layers, written so that those loops vectorise: a libm
// call per element was half of the aggregation network's time. Float evaluates Cephes' expf
// inline (a degree-6 polynomial after reducing by powers of two, within 2 ulp). GCC will not
// turn a float select that guards an exponential into a blend (without -fno-trapping-math the
// exponential might trap if evaluated for both sides), so the clamps are taken on the bits with
// integer operations. Double, the oracles' precision, calls libm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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

// a * b + c, in one instruction and one rounding where the target has FMA (x86-64-v3): the
// build turns contraction off, so loops that want it say so. Separately rounded otherwise.
inline float multiply_add(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(y) = mantissa 2^k for -104 <= y <= 0: y = k ln2 + r, |r| <= ln2 / 2, k rounded by the
// 1.5 * 2^23 shifter (SSE2 has no round), and Cephes' polynomial for exp(r) (within 2 ulp). The
// polynomial takes a third fewer instructions with FMA.
struct ExpParts {
  float mantissa, k;
};
inline ExpParts exp_parts(float y) {
  const float shifter = 12582912.0f;
  const float k = (y * 1.44269504088896341f + shifter) - shifter;
  const float r = multiply_add(k, 2.12194440e-4f, multiply_add(k, -0.693359375f, y));
  float p = 1.9875691500e-4f;
  p = multiply_add(p, r, 1.3981999507e-3f);
  p = multiply_add(p, r, 8.3334519073e-3f);
  p = multiply_add(p, r, 4.1665795894e-2f);
  p = multiply_add(p, r, 1.6666665459e-1f);
  p = multiply_add(p, r, 5.0000001201e-1f);
  return {multiply_add(p * r, r, r) + 1.0f, k};
}

// exp(min(x, 0)), exactly 0 below -87 (where expf underflows anyway). ELU is mostly this.
inline float exp_nonpositive(float x) {
  const int32_t negative = bits_of(nonpositive_part(x));
  const int32_t lowest = int32_t(0xC2AE0000u);  // -87.0f
  const ExpParts e = exp_parts(float_of(std::min(negative, lowest)));
  const float value = e.mantissa * float_of((int32_t(e.k) + 127) << 23);
  return float_of(bits_of(value) & (negative > lowest ? 0 : -1));
}

// exp(min(x, 0)) into float's subnormals too, exactly 0 below -104 (where expf rounds to 0), and
// NaN for NaN: for terms that still count once scaled up (the soft-argmax's gradients). 2^k is
// no normal float below 2^-126, so it is applied as 2^(k + 64) 2^-64, one multiply more.
inline float exp_nonpositive_with_subnormals(float x) {
  const int32_t negative = bits_of(nonpositive_part(x));
  const int32_t lowest = int32_t(0xC2D00000u);  // -104.0f
  const ExpParts e = exp_parts(float_of(std::min(negative, lowest)));
  const float value = e.mantissa * float_of((int32_t(e.k) + 64 + 127) << 23) * 0x1p-64f;
  const int32_t nan = (bits_of(x) & INT32_MAX) > 0x7F800000 ? 0x7FC00000 : 0;
  return float_of((bits_of(value) & (negative > lowest ? 0 : -1)) | nan);
}
inline double exp_nonpositive_with_subnormals(double x) {
  return std::exp(std::min(x, 0.0));
}
inline double exp_nonpositive(double x) {
  return std::exp(std::min(x, 0.0));
}

// ELU (alpha 1) as max(x, 0) + exp(min(x, 0)) - 1: no select, so loops of it vectorise. Float
// takes exp(x) - 1, as PyTorch's vectorised ELU does (an ulp of 1 absolute near zero); double
// keeps expm1.
inline float elu_of(float x) {
  return (x - nonpositive_part(x)) + (exp_nonpositive(x) - 1.0f);
}
inline double elu_of(double x) {
  return x > 0 ? x : std::expm1(x);
}

// ELU's derivative from its output y: 1 above zero, y + 1 below.
inline float elu_slope(float y) {
  return nonpositive_part(y) + 1.0f;
}
inline double elu_slope(double y) {
  return y > 0 ? 1.0 : y + 1.0;
}

// x rounded to bfloat16 (its bits), to nearest even: the upper half of its bits after adding half
// of the lower half's range (less one unless the kept part is odd). A NaN keeps its sign and
// exponent and gets a quiet payload instead (the rounding could carry it to infinity). As oneDNN
// and PyTorch round.
inline uint16_t bf16_bits(float x) {
  const uint32_t bits = uint32_t(bits_of(x));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return uint16_t(nan ? (bits >> 16) | 0x40u : rounded);
}

// The logistic function. Float from exp(-|x|), which cannot overflow, so loops of it vectorise:
// 1 / (1 + e) above zero, e / (1 + e) below. Double as PyTorch writes it.
inline float sigmoid_of(float x) {
  const float e = exp_nonpositive(-std::abs(x));
  return (x >= 0 ? 1.0f : e) / (1.0f + e);
}
inline double sigmoid_of(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Reductions over contiguous arrays in kLanes interleaved partial results, combined in a fixed
// tree at the end: one running sum is a chain of dependent additions that the compiler must keep
// in order (no -ffast-math here), while the lanes become one vector register. The order depends
// on n alone, so results are still reproducible.
constexpr size_t kLanes = 8;

template <typename T>
inline T combine_lanes(const T* lane) {
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

template <typename T>
inline T dot(const T* x, const T* y, size_t n) {
  T lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] += x[i + k] * y[i + k];
  }
  for (size_t k = 0; i < n; ++i, ++k) lane[k] += x[i] * y[i];
  return combine_lanes(lane);
}

template <typename T>
inline T sum(const T* x, size_t n) {
  T lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] += x[i + k];
  }
  for (size_t k = 0; i < n; ++i, ++k) lane[k] += x[i];
  return combine_lanes(lane);
}

// The largest of x[0..n), n >= 1 (no NaN).
template <typename T>
inline T max_of(const T* x, size_t n) {
  T lane[kLanes];
  for (size_t k = 0; k < kLanes; ++k) lane[k] = x[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] = lane[k] < x[i + k] ? x[i + k] : lane[k];
  }
  for (size_t k = 0; i < n; ++i, ++k) lane[k] = lane[k] < x[i] ? x[i] : lane[k];
  for (size_t k = 1; k < kLanes; ++k) lane[0] = lane[0] < lane[k] ? lane[k] : lane[0];
  return lane[0];
}

}  // namespace mvibr::nn
