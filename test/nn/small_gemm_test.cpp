// small_gemm against a double-precision loop, in every form, on sizes around its register tiles
// (AVX2: 6 rows, 16 columns; AVX-512: 12 rows, 32 columns), and its promise of a fixed order: an
// element of C comes out bit for bit the same whatever part of C a call computes around it, by
// the same FMA chain on either instruction set, and accumulating adds to C what overwriting would
// have written. Every test runs on each set of kernels this CPU has (the suffix names it).
#include "../../src/nn/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "support/gemm_problems.h"

namespace mvibr::nn {
namespace {

using testing::gemm_form_name;
using testing::random_floats;

// Leading dimensions 3 more than the widths.
struct Problem : testing::GemmProblem {
  Problem(GemmForm f, size_t m_, size_t n_, size_t k_, uint64_t seed)
      : GemmProblem(f, m_, n_, k_, seed, 3) {}
};

class SmallGemm : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
            size_t ldb, bool accumulate, float* c, size_t ldc) const {
    small_gemm_on(GetParam(), form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
  // cblas_sgemm (builds for baseline x86-64) makes no promise of an order.
  bool fixed_order() const { return GetParam() != GemmIsa::kBlas; }
};

// A recursive float sum of k + 1 terms (C's start and k products, each FMA one rounding) is
// within (k + 1) u (1 + O(k u)) of the exact sum relative to the sum of the terms' magnitudes,
// u = 2^-24; the bound allows (k + 2) u.
TEST_P(SmallGemm, MatchesADoubleLoopInEveryFormAroundTheTile) {
  const size_t sizes[] = {1, 2, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 31, 32, 33, 70};
  const double u = std::ldexp(1.0, -24);
  uint64_t seed = 1;
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    for (size_t m : sizes) {
      for (size_t n : sizes) {
        for (size_t k : {size_t(1), size_t(4), size_t(9), size_t(35), size_t(64), size_t(150)}) {
          for (bool accumulate : {false, true}) {
            const Problem p(form, m, n, k, seed++);
            const std::vector<float> start = random_floats(m * p.ldc, seed++);
            std::vector<float> c = start;
            gemm(form, m, n, k, p.a.data(), p.lda, p.b.data(), p.ldb, accumulate, c.data(), p.ldc);
            double worst = 0;
            for (size_t i = 0; i < m; ++i) {
              for (size_t j = 0; j < n; ++j) {
                double exact = accumulate ? start[i * p.ldc + j] : 0, magnitude = std::abs(exact);
                for (size_t s = 0; s < k; ++s) {
                  const double term = double(p.a_at(i, s)) * p.b_at(s, j);
                  exact += term;
                  magnitude += std::abs(term);
                }
                worst = std::max(worst, std::abs(c[i * p.ldc + j] - exact) / magnitude);
              }
            }
            EXPECT_LE(worst, double(k + 2) * u) << gemm_form_name(form) << " m " << m << " n " << n
                                                << " k " << k << " accumulate " << accumulate;
            // The padding between rows of C is left alone.
            for (size_t i = 0; i < m; ++i) {
              for (size_t j = n; j < p.ldc; ++j) ASSERT_EQ(c[i * p.ldc + j], start[i * p.ldc + j]);
            }
          }
        }
      }
    }
  }
}

TEST_P(SmallGemm, NoStepsOverwritesWithZeroOrLeavesC) {
  testing::expect_no_steps_overwrite_with_zero_or_leave_c(
      [this](GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
             const float* b, size_t ldb, bool accumulate, float* c,
             size_t ldc) { gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc); });
}

// Every block [i0, i0 + rows) x [j0, j0 + cols) of C, computed alone (from the matching parts of
// A and B), equals the same elements of the whole product bit for bit: one row, the register
// tile's remainders, blocks at odd offsets.
TEST_P(SmallGemm, AnElementIsTheSameBitsWhateverTheCallAroundIt) {
  if (!fixed_order()) GTEST_SKIP() << "built without AVX2 and FMA: cblas_sgemm";
  const size_t m = 41, n = 37, k = 131;
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    for (bool accumulate : {false, true}) {
      const Problem p(form, m, n, k, 7);
      const std::vector<float> start = random_floats(m * p.ldc, 9);
      std::vector<float> whole = start;
      gemm(form, m, n, k, p.a.data(), p.lda, p.b.data(), p.ldb, accumulate, whole.data(), p.ldc);
      for (size_t i0 : {0, 1, 5, 6, 13, 40}) {
        for (size_t rows : {1, 2, 3, 6, 7, 12, 13, 28}) {
          if (i0 + rows > m) continue;
          for (size_t j0 : {0, 3, 8, 16, 21, 36}) {
            for (size_t cols : {1, 7, 8, 9, 16, 17, 31, 32, 37}) {
              if (j0 + cols > n) continue;
              std::vector<float> part = start;
              const float* a = p.a.data() + (form == GemmForm::kTN ? i0 : i0 * p.lda);
              const float* b = p.b.data() + (form == GemmForm::kNT ? j0 * p.ldb : j0);
              gemm(form, rows, cols, k, a, p.lda, b, p.ldb, accumulate,
                   part.data() + i0 * p.ldc + j0, p.ldc);
              for (size_t i = i0; i < i0 + rows; ++i) {
                ASSERT_EQ(std::memcmp(part.data() + i * p.ldc + j0, whole.data() + i * p.ldc + j0,
                                      cols * sizeof(float)),
                          0)
                    << gemm_form_name(form) << " accumulate " << accumulate << " rows [" << i0
                    << ", " << i0 + rows << ") columns [" << j0 << ", " << j0 + cols << ") row "
                    << i;
              }
            }
          }
        }
      }
    }
  }
}

// The promised order itself: each element is one chain of fused multiply-adds over k in
// increasing order from 0, then added to C when accumulating, bit for bit. k = 700 spans several
// of kTN's blocks of rows, whose partial sums must continue the chain, not be added up.
TEST_P(SmallGemm, EachElementIsOneFusedChainOverK) {
  if (!fixed_order()) GTEST_SKIP() << "built without AVX2 and FMA: cblas_sgemm";
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    for (const auto& [m, n] : {std::pair<size_t, size_t>{7, 17}, {64, 57}, {1, 300}}) {
      for (bool accumulate : {false, true}) {
        const size_t k = 700;
        const Problem p(form, m, n, k, 13);
        std::vector<float> c = random_floats(m * p.ldc, 15);
        const std::vector<float> start = c;
        gemm(form, m, n, k, p.a.data(), p.lda, p.b.data(), p.ldb, accumulate, c.data(), p.ldc);
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < n; ++j) {
            float chain = 0;
            for (size_t s = 0; s < k; ++s) chain = std::fma(p.a_at(i, s), p.b_at(s, j), chain);
            if (accumulate) chain += start[i * p.ldc + j];
            ASSERT_EQ(c[i * p.ldc + j], chain)
                << gemm_form_name(form) << " m " << m << " n " << n << " accumulate " << accumulate
                << " element (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// Accumulating adds the product, as computed alone, to C: C + (op(A) op(B)), bit for bit.
TEST_P(SmallGemm, AccumulatingAddsTheProductToC) {
  if (!fixed_order()) GTEST_SKIP() << "built without AVX2 and FMA: cblas_sgemm";
  const size_t m = 13, n = 21, k = 67;
  for (GemmForm form : {GemmForm::kNN, GemmForm::kNT, GemmForm::kTN}) {
    const Problem p(form, m, n, k, 5);
    const std::vector<float> start = random_floats(m * p.ldc, 6);
    std::vector<float> product(m * p.ldc), sum = start;
    gemm(form, m, n, k, p.a.data(), p.lda, p.b.data(), p.ldb, false, product.data(), p.ldc);
    gemm(form, m, n, k, p.a.data(), p.lda, p.b.data(), p.ldb, true, sum.data(), p.ldc);
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const float expected = start[i * p.ldc + j] + product[i * p.ldc + j];
        ASSERT_EQ(std::memcmp(&sum[i * p.ldc + j], &expected, sizeof(float)), 0)
            << gemm_form_name(form) << " (" << i << ", " << j << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SmallGemm, ::testing::ValuesIn(available_gemm_isas()),
                         [](const ::testing::TestParamInfo<GemmIsa>& kernels) {
                           return std::string(gemm_isa_name(kernels.param));
                         });

}  // namespace
}  // namespace mvibr::nn
