// Whether this CPU multiplies bf16 operands (nn/layers.h: Operands::kBf16), in convolutions and
// in Linear layers.
// - oneDNN has them on AVX-512 (AMX, AVX512-BF16, or emulated on AVX-512 alone), not on AVX2.
// - Where it has none, a test of bf16 checks instead that they are refused in one line.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"
#include "mvibr/nn/layers.h"

namespace mvibr::testing {

// True, after checking that `check` refuses them with `message`, where this CPU has no bf16
// operands for its layers.
template <typename Check>
bool bf16_refused_here(Check check, const std::string& message, const char* layers) {
  try {
    check();
    return false;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    std::printf("  this CPU has no bf16 %s (no AVX-512): checked that they are refused\n", layers);
    return true;
  }
}

inline bool bf16_convolutions_refused_here() {
  return bf16_refused_here([] { nn::check_conv_operands(nn::Operands::kBf16); },
                           "precision = bf16: oneDNN has no bf16 convolution", "convolutions");
}

inline bool bf16_linear_refused_here() {
  return bf16_refused_here([] { nn::check_linear_operands(nn::Operands::kBf16); },
                           "precision = bf16: oneDNN has no bf16 matmul", "Linear layers");
}

}  // namespace mvibr::testing
