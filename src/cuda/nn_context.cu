// cuda::Context (see nn/cuda_layers.h): the cuBLAS and cuDNN handles on one stream, their math
// modes pinned to fp32, and the growing workspace.
#include "nn_context.h"

namespace mvibr::nn::cuda {

Context::Context(StreamHandle stream) : impl_(std::make_unique<Impl>()) {
  // The handles are created on the current device; without one cublasCreate fails, and that
  // failure (CUBLAS_STATUS_NOT_INITIALIZED) is the error the caller sees.
  MVIBR_CUBLAS_CHECK(cublasCreate(&impl_->cublas));
  // Default math: fp32 GEMMs compute in fp32 (TF32 only with CUBLAS_TF32_TENSOR_OP_MATH).
  MVIBR_CUBLAS_CHECK(cublasSetMathMode(impl_->cublas, CUBLAS_DEFAULT_MATH));
  MVIBR_CUDNN_CHECK(cudnnCreate(&impl_->cudnn));
  set_stream(stream);
}

Context::~Context() = default;

Context::Impl::~Impl() {
  // Queued work may still use the workspace; cudaFree waits for the device. Errors here cannot
  // be reported (a destructor), and a broken context has reported its own already.
  conv_plans.clear();  // their descriptors before the handle
  if (cudnn) cudnnDestroy(cudnn);
  if (cublas) cublasDestroy(cublas);
}

StreamHandle Context::stream() const {
  return impl_->stream;
}

void Context::synchronize() {
  MVIBR_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

void Context::set_stream(StreamHandle stream) {
  impl_->stream = stream;
  MVIBR_CUBLAS_CHECK(cublasSetStream(impl_->cublas, stream));
  MVIBR_CUDNN_CHECK(cudnnSetStream(impl_->cudnn, stream));
}

void Context::set_conv_search(ConvSearch search) {
  impl_->conv_search = search;
  impl_->conv_plans.clear();
}

void Context::set_deterministic(bool deterministic) {
  impl_->deterministic = deterministic;
  impl_->conv_plans.clear();
}

void Context::set_workspace_limit(size_t bytes) {
  impl_->workspace_limit = bytes;
  impl_->conv_plans.clear();
}

void Context::set_gemm_precision(GemmPrecision precision) {
  impl_->gemm_precision = precision;
}

GemmPrecision Context::gemm_precision() const {
  return impl_->gemm_precision;
}

void* Context::Impl::workspace(size_t bytes) {
  return workspace_.get(bytes, stream);
}

void* Context::Impl::Growing::get(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  if (bytes > bytes_) {
    MVIBR_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (data_) MVIBR_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
    // Round up to 1 MiB so that a run of slowly growing requests reallocates rarely.
    constexpr size_t kGranule = size_t(1) << 20;
    const size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
    MVIBR_CUDA_CHECK(cudaMalloc(&data_, rounded));
    bytes_ = rounded;
  }
  return data_;
}

Context::Impl::Growing::~Growing() {
  if (data_) cudaFree(data_);  // waits for the device; no error can be reported here
}

}  // namespace mvibr::nn::cuda
