// What a cuda::Context holds (see nn/cuda_layers.h), for the .cu files of the layers: the cuBLAS
// and cuDNN handles, the workspace, the convolution settings and the cache of chosen algorithms,
// and status checks that turn cuBLAS and cuDNN failures into RuntimeFailure naming the call.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "check.h"
#include "mvibr/nn/cuda_layers.h"

namespace mvibr::cuda_detail {

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw RuntimeFailure(std::string("cuBLAS error in ") + call + ": " + cublasGetStatusName(status) +
                       " (" + file + ":" + std::to_string(line) + ")");
}

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw RuntimeFailure(std::string("cuDNN error in ") + call + ": " + cudnnGetErrorString(status) +
                       " (" + file + ":" + std::to_string(line) + ")");
}

}  // namespace mvibr::cuda_detail

#define MVIBR_CUBLAS_CHECK(expr) \
  ::mvibr::cuda_detail::check_cublas((expr), #expr, __FILE__, __LINE__)
#define MVIBR_CUDNN_CHECK(expr) ::mvibr::cuda_detail::check_cudnn((expr), #expr, __FILE__, __LINE__)

namespace mvibr::nn::cuda {

// The descriptors of one convolution shape and the algorithms chosen for it (each pass chosen
// on its first call). Defined in kernels/conv2d.cu.
struct ConvPlan;
using ConvKey = std::tuple<int, int, int, int, int, int, int, int>;

struct Context::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;

  ConvSearch conv_search = ConvSearch::kHeuristic;
  bool deterministic = true;
  size_t workspace_limit = size_t(256) << 20;
  GemmPrecision gemm_precision = GemmPrecision::kFp32;
  std::map<ConvKey, std::shared_ptr<ConvPlan>> conv_plans;

  // At least `bytes` of device memory, valid for work enqueued on `stream` until the next call
  // that grows it (growing first waits for the stream, so no queued work still uses the old
  // buffer). Null for 0 bytes.
  void* workspace(size_t bytes);
  // Typed: `count` elements of T, aligned for T (the buffer is cudaMalloc-aligned).
  template <typename T>
  T* workspace_of(size_t count) {
    return static_cast<T*>(workspace(count * sizeof(T)));
  }
  // A second such buffer, for a convolution's reflect-padded input or input gradient (cuDNN
  // takes the workspace at the same time).
  float* padded_maps(size_t count) {
    return static_cast<float*>(padded_.get(count * sizeof(float), stream));
  }
  // A third, for an upsampling convolution's upsampled input or its gradient.
  float* upsampled_maps(size_t count) {
    return static_cast<float*>(upsampled_.get(count * sizeof(float), stream));
  }

  ~Impl();

 private:
  // Device memory that grows on demand (see workspace).
  class Growing {
   public:
    void* get(size_t bytes, cudaStream_t stream);
    ~Growing();

   private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
  };
  Growing workspace_, padded_, upsampled_;
};

}  // namespace mvibr::nn::cuda
