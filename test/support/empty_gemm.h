// A GEMM with no steps (k = 0), in every form: accumulating leaves C as it was, overwriting
// zeroes it. Shared by small_gemm's and bf16_gemm's tests.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "../../src/nn/small_gemm.h"

namespace mvibr::testing {

// gemm(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc), small_gemm's signature.
template <typename Gemm>
void expect_no_steps_overwrite_with_zero_or_leave_c(Gemm gemm) {
  for (nn::GemmForm form : {nn::GemmForm::kNN, nn::GemmForm::kNT, nn::GemmForm::kTN}) {
    std::vector<float> c = {1, 2, 3, 4, 5, 6};
    const float none = 0;
    gemm(form, 2, 3, 0, &none, 1, &none, 1, true, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4, 5, 6})) << "form " << int(form);
    gemm(form, 2, 3, 0, &none, 1, &none, 1, false, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float>(6, 0.0f))) << "form " << int(form);
  }
}

}  // namespace mvibr::testing
