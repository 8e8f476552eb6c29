// bf16_gemm against a double loop over the same rounded operands, in every form, on sizes around
// AMX's tiles (16 rows, 32 bf16 steps), strided, overwriting and accumulating; that it rounds
// its operands (to nearest even) and nothing else; that a call gives the same bits on any thread;
// and Linear with bf16 operands against its double twin, which multiplies the same rounded values.
#include "../../src/nn/bf16_gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <vector>

#include "../../src/nn/vector_math.h"
#include "mvibr/nn/layers.h"
#include "support/bf16_operands.h"
#include "support/gemm_problems.h"

namespace mvibr::nn {
namespace {

using testing::gemm_form_name;
using testing::random_floats;

double rounded(float x) {
  return double(float_of(int32_t(bf16_bits(x)) << 16));
}

// A, B and C's start for C [m, n] with k steps, each leading dimension 5 more than its width.
struct Problem : testing::GemmProblem {
  Problem(GemmForm f, size_t m_, size_t n_, size_t k_, uint64_t seed)
      : GemmProblem(f, m_, n_, k_, seed, 5), start(random_floats(m * ldc, seed + 2)) {}
  std::vector<float> run(bool accumulate) const {
    std::vector<float> c = start;
    bf16_gemm(form, m, n, k, a.data(), lda, b.data(), ldb, accumulate, c.data(), ldc);
    return c;
  }

  std::vector<float> start;
};

// The products of bf16 values are exact in fp32; a sum of k + 1 terms in fp32, in any order, is
// within k u (1 + O(k u)) of the exact sum relative to the sum of the terms' magnitudes,
// u = 2^-24. The bound allows (k + 2) u.
TEST(Bf16Gemm, MatchesADoubleLoopOnRoundedOperandsInEveryForm) {
  if (testing::bf16_linear_refused_here()) return;
  const size_t sizes[] = {1, 3, 15, 16, 17, 32, 33, 70, 129};
  const double u = std::ldexp(1.0, -24);
  uint64_t seed = 1;
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    for (size_t m : sizes) {
      for (size_t n : sizes) {
        for (size_t k : {size_t(1), size_t(19), size_t(32), size_t(33), size_t(150)}) {
          for (bool accumulate : {false, true}) {
            const Problem p(form, m, n, k, seed);
            seed += 3;
            const std::vector<float> c = p.run(accumulate);
            double worst = 0;
            for (size_t i = 0; i < m; ++i) {
              for (size_t j = 0; j < n; ++j) {
                double exact = accumulate ? p.start[i * p.ldc + j] : 0;
                double magnitude = std::abs(exact);
                for (size_t s = 0; s < k; ++s) {
                  const double term = rounded(p.a_at(i, s)) * rounded(p.b_at(s, j));
                  exact += term;
                  magnitude += std::abs(term);
                }
                worst = std::max(worst, std::abs(c[i * p.ldc + j] - exact) / magnitude);
              }
              // The padding between rows of C is left alone.
              for (size_t j = n; j < p.ldc; ++j) {
                ASSERT_EQ(c[i * p.ldc + j], p.start[i * p.ldc + j]) << gemm_form_name(form);
              }
            }
            EXPECT_LE(worst, double(k + 2) * u) << gemm_form_name(form) << " m " << m << " n " << n
                                                << " k " << k << " accumulate " << accumulate;
          }
        }
      }
    }
  }
}

// Each rounding this CPU runs equals bf16_bits bit for bit on every length from 1 to 100 (whole
// vectors and tails), on values that include ties both ways, subnormals (which AVX512-BF16's
// conversion would flush) at every position of a group, NaNs, infinities and signed zeros.
TEST(Bf16Gemm, EachRoundingIsBf16BitsToTheBit) {
  if (testing::bf16_linear_refused_here()) return;
  std::vector<float> values = random_floats(4096, 21);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            float_of(0x7F800001),  // a signalling NaN
                            float_of(int32_t(0xFFC12345)),
                            std::numeric_limits<float>::denorm_min(),
                            -float_of(0x007FFFFF),  // the largest subnormal, which rounds up
                            float_of(0x00008000),   // a subnormal tie
                            1.0f + std::ldexp(1.0f, -8),
                            1.0f + 3 * std::ldexp(1.0f, -8),
                            std::numeric_limits<float>::max()};
  // Every 7th value special: each one several times within the first 140, in varied positions.
  for (size_t i = 0; i < values.size(); i += 7) values[i] = specials[(i / 7) % std::size(specials)];
  for (Bf16Rounding rounding : available_bf16_roundings()) {
    for (size_t offset : {0, 5, 40}) {
      for (size_t count = 1; count <= 100; ++count) {
        std::vector<uint16_t> out(count + 1, 0xABCD);
        round_to_bf16_on(rounding, count, values.data() + offset, out.data());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], bf16_bits(values[offset + i]))
              << "rounding " << int(rounding) << " count " << count << " value " << i << " ("
              << values[offset + i] << ")";
        }
        ASSERT_EQ(out[count], 0xABCD) << "wrote past the end";
      }
    }
  }
}

// 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7 and rounds to the even 1; 1 + 3 2^-9 rounds
// up to 1 + 2^-7. In fp32, or rounded otherwise, the sums below would differ.
TEST(Bf16Gemm, RoundsEachOperandToNearestEven) {
  if (testing::bf16_linear_refused_here()) return;
  const float tie = 1.0f + std::ldexp(1.0f, -8), above = 1.0f + 3 * std::ldexp(1.0f, -9);
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    // A = [tie, above] (one row, two steps; as a column for kTN), B = [above, tie] likewise.
    const std::vector<float> a = {tie, above}, b = {above, tie};
    const size_t lda = form == GemmForm::kTN ? 1 : 2, ldb = form == GemmForm::kNT ? 2 : 1;
    float c = 0;
    bf16_gemm(form, 1, 1, 2, a.data(), lda, b.data(), ldb, false, &c, 1);
    const double up = 1.0 + std::ldexp(1.0, -7);
    EXPECT_EQ(double(c), 1.0 * up + up * 1.0) << gemm_form_name(form);
    std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    double cd = 0;
    bf16_gemm(form, 1, 1, 2, ad.data(), lda, bd.data(), ldb, false, &cd, 1);
    EXPECT_EQ(cd, 1.0 * up + up * 1.0) << gemm_form_name(form) << " (double)";
  }
}

// The same call on every thread of a parallel region, and outside one with several threads to
// offer, gives the same bits.
TEST(Bf16Gemm, ACallGivesTheSameBitsOnAnyThread) {
  if (testing::bf16_linear_refused_here()) return;
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    const Problem p(form, 576, 129, 256, 11);
    const std::vector<float> alone = p.run(true);
    const int threads = std::max(2, omp_get_max_threads());
    std::vector<std::vector<float>> each(size_t(threads), p.start);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t) {
      bf16_gemm(form, p.m, p.n, p.k, p.a.data(), p.lda, p.b.data(), p.ldb, true,
                each[size_t(t)].data(), p.ldc);
    }
    for (const std::vector<float>& c : each) {
      ASSERT_EQ(std::memcmp(c.data(), alone.data(), c.size() * sizeof(float)), 0)
          << gemm_form_name(form);
    }
  }
}

// kNN's and kNT's B (weights) are kept rounded by address and shape. Changed in place, even in
// one value, they are rounded again: outside any FrozenWeights (compared with the values they came
// from), and in a FrozenWeights made after the change. Unchanged, the kept copy gives the same
// bits.
TEST(Bf16Gemm, WeightsChangedInPlaceAreRoundedAgain) {
  if (testing::bf16_linear_refused_here()) return;
  for (bool frozen : {false, true}) {
    for (GemmForm form : {GemmForm::kNN, GemmForm::kNT}) {
      Problem p(form, 40, 33, 70, 31);
      const auto run = [&] {
        std::optional<FrozenWeights> scope;
        if (frozen) scope.emplace(p.b.data(), p.b.size());
        return p.run(false);
      };
      const std::vector<float> first = run();
      EXPECT_EQ(first, run()) << gemm_form_name(form);
      const size_t changed = form == GemmForm::kNT ? 5 * p.ldb + 7 : 7 * p.ldb + 5;  // B^T (5, 7)
      p.b[changed] += 0.5f;
      const std::vector<float> second = run();
      const double bound = double((p.k + 2) * p.k) * std::ldexp(1.0, -24);  // terms below 1
      for (size_t i = 0; i < p.m; ++i) {
        for (size_t j = 0; j < p.n; ++j) {
          double exact = 0;
          for (size_t s = 0; s < p.k; ++s) exact += rounded(p.a_at(i, s)) * rounded(p.b_at(s, j));
          ASSERT_NEAR(second[i * p.ldc + j], exact, bound)
              << gemm_form_name(form) << " frozen " << frozen << " (" << i << ", " << j << ")";
        }
      }
      EXPECT_NE(first, second) << gemm_form_name(form) << " frozen " << frozen;
    }
  }
}

TEST(Bf16Gemm, NoStepsOverwritesWithZeroOrLeavesC) {
  testing::expect_no_steps_overwrite_with_zero_or_leave_c(
      [](GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
         size_t ldb, bool accumulate, float* c,
         size_t ldc) { bf16_gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc); });
}

// A Linear with bf16 operands, every pass (whole and sliced), in float against double: both
// multiply the same rounded values, so they differ by fp32's sums alone. The bias's gradient sums
// the unrounded output gradient in both.
TEST(Bf16Gemm, LinearInFloatMatchesItsDoubleTwin) {
  if (testing::bf16_linear_refused_here()) return;
  ParameterSet set;
  ParameterBlock block(set, "l.", ParameterGroup::kMlp);
  const int in = 70, out = 33;
  const size_t n = 100;
  const Linear layer(block, "fc", in, out, true, Operands::kBf16);
  const std::vector<float> params = random_floats(set.values().size(), 3),
                           x = random_floats(n * in, 4), grad_y = random_floats(n * out, 5);
  const std::vector<double> params_d(params.begin(), params.end()), x_d(x.begin(), x.end()),
      grad_y_d(grad_y.begin(), grad_y.end());
  std::vector<float> y(n * out), grads(set.values().size()), grad_x(n * in);
  std::vector<double> y_d(n * out), grads_d(set.values().size()), grad_x_d(n * in);
  // fp32 sums of k + 1 terms below 1 in magnitude: within (k + 2) (k + 1) 2^-24 of the exact.
  const auto expect_near = [](const std::vector<float>& f, const std::vector<double>& d,
                              double bound, const char* what) {
    for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(f[i], d[i], bound) << what << " " << i;
  };
  const auto bound = [](size_t k) { return double((k + 2) * (k + 1)) * std::ldexp(1.0, -24); };
  // The forward's bias and activation run in oneDNN's pass (Bf16Epilogue) in float.
  for (Activation activation : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
    layer.forward(params.data(), n, x.data(), y.data(), activation);
    layer.forward(params_d.data(), n, x_d.data(), y_d.data(), activation);
    expect_near(y, y_d, bound(in), "y");
  }
  layer.backward(params.data(), grads.data(), n, x.data(), grad_y.data(), grad_x.data());
  layer.backward(params_d.data(), grads_d.data(), n, x_d.data(), grad_y_d.data(), grad_x_d.data());
  expect_near(grad_x, grad_x_d, bound(out), "grad_x");
  expect_near(grads, grads_d, bound(n), "grads");
  // And the rounding is there: fp32 operands give another product.
  ParameterSet set_fp32;
  ParameterBlock block_fp32(set_fp32, "l.", ParameterGroup::kMlp);
  const Linear fp32(block_fp32, "fc", in, out);
  std::vector<double> y_fp32(n * out);
  fp32.forward(params_d.data(), n, x_d.data(), y_fp32.data(), Activation::kElu);
  double gap = 0;
  for (size_t i = 0; i < y_d.size(); ++i) gap = std::max(gap, std::abs(y_d[i] - y_fp32[i]));
  EXPECT_GT(gap, 1e-3);
}

}  // namespace
}  // namespace mvibr::nn
