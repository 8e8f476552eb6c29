// GEMM test problems shared by small_gemm's and bf16_gemm's tests: random operands in any form
// with padded rows, and the product with no steps.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "../../src/nn/small_gemm.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::testing {

inline std::vector<float> random_floats(size_t count, uint64_t seed) {
  const std::vector<double> values = synthetic::random_values(count, -1, 1, seed);
  return std::vector<float>(values.begin(), values.end());
}

inline const char* gemm_form_name(nn::GemmForm form) {
  return form == nn::GemmForm::kNN ? "NN" : form == nn::GemmForm::kNT ? "NT" : "TN";
}

// A and B for C [m, n] with k steps, as `form` stores them, in [-1, 1]; each leading dimension
// (ldc too) `padding` more than its width.
struct GemmProblem {
  GemmProblem(nn::GemmForm f, size_t m_, size_t n_, size_t k_, uint64_t seed, size_t padding)
      : form(f), m(m_), n(n_), k(k_) {
    const bool tn = form == nn::GemmForm::kTN, nt = form == nn::GemmForm::kNT;
    const size_t a_rows = tn ? k : m, a_cols = tn ? m : k;
    const size_t b_rows = nt ? n : k, b_cols = nt ? k : n;
    lda = a_cols + padding;
    ldb = b_cols + padding;
    ldc = n + padding;
    a = random_floats(a_rows * lda, seed);
    b = random_floats(b_rows * ldb, seed + 1);
  }
  // op(A)'s element (i, s) and op(B)'s element (s, j).
  float a_at(size_t i, size_t s) const {
    return form == nn::GemmForm::kTN ? a[s * lda + i] : a[i * lda + s];
  }
  float b_at(size_t s, size_t j) const {
    return form == nn::GemmForm::kNT ? b[j * ldb + s] : b[s * ldb + j];
  }

  nn::GemmForm form;
  size_t m, n, k, lda, ldb, ldc;
  std::vector<float> a, b;
};

// A GEMM with no steps (k = 0), in every form: accumulating leaves C as it was, overwriting
// zeroes it. gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc), small_gemm's signature.
template <typename Gemm>
void expect_no_steps_overwrite_with_zero_or_leave_c(Gemm gemm) {
  for (nn::GemmForm form : {nn::GemmForm::kNN, nn::GemmForm::kNT, nn::GemmForm::kTN}) {
    std::vector<float> c = {1, 2, 3, 4, 5, 6};
    const float none = 0;
    gemm(form, 2, 3, 0, &none, 1, &none, 1, true, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4, 5, 6})) << gemm_form_name(form);
    gemm(form, 2, 3, 0, &none, 1, &none, 1, false, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>(6, 0.0f))) << gemm_form_name(form);
  }
}

}  // namespace mvibr::testing
