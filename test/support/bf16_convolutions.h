// Whether this CPU runs bf16 convolutions (nn/conv_layers.h: ConvOperands::kBf16).
// - oneDNN has them on AVX-512 (AMX, AVX512-BF16, or emulated on AVX-512 alone), not on AVX2.
// - Where it has none, a test of bf16 checks instead that they are refused in one line.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"

namespace mvibr::testing {

// True, after checking the refusal, where this CPU has no bf16 convolutions.
inline bool bf16_convolutions_refused_here() {
  try {
    nn::check_conv_operands(nn::ConvOperands::kBf16);
    return false;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("precision = bf16: oneDNN has no bf16 convolution"),
              std::string::npos)
        << e.what();
    std::printf(
        "  this CPU has no bf16 convolutions (no AVX-512): checked that they are refused\n");
    return true;
  }
}

}  // namespace mvibr::testing
