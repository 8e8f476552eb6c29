// The fixture of the GPU tests that call nn/cuda_layers.h: skips (never passes) without a device,
// and gives each test a fresh Context (stream, cuBLAS and cuDNN handles, workspace). Only for a
// build with the CUDA backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "mvibr/core/device.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::testing {

class CudaContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    context_ = std::make_unique<nn::cuda::Context>();
  }
  nn::cuda::Context& context() { return *context_; }

 private:
  std::unique_ptr<nn::cuda::Context> context_;
};

}  // namespace mvibr::testing
