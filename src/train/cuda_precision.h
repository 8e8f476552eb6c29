// The GEMM precision the CUDA steps (IBRNet's, DynIBaR's networks) set from the config's
// `precision`. Only for the files built with the CUDA backend.
#pragma once

#include "mvibr/nn/cuda_layers.h"
#include "mvibr/train/config.h"

namespace mvibr::train {

inline nn::cuda::GemmPrecision gemm_precision(Precision precision) {
  return precision == Precision::kBf16   ? nn::cuda::GemmPrecision::kBf16
         : precision == Precision::kFp16 ? nn::cuda::GemmPrecision::kFp16
                                         : nn::cuda::GemmPrecision::kFp32;
}

}  // namespace mvibr::train
