// Known answers for the emulated cuBLAS and cuDNN, worked out by hand from the libraries'
// documented semantics (column-major GEMMs with transposes and leading dimensions, beta = 0 not
// reading C, the FAST compute types' input rounding; NCHW cross-correlation with padding and
// stride, convolution mode's flipped filter, the backward passes as adjoints, bias sums,
// broadcasting adds) -- not from mvibr's callers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cublas_v2.h"
#include "cudnn.h"
#include "mvibr/core/device.h"

namespace mvibr::emulated {
namespace {

TEST(EmulatedCublas, SgemmIsColumnMajorWithTransposesAndLeadingDimensions) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // A is 2x3 stored with lda 3 (a padding row), B^T stored as 2x3 (B is 3x2), C 2x2 with ldc 2.
  // A = [1 2 3; 4 5 6], B = [1 0; 0 1; 1 1]: A B = [4 5; 10 11].
  DeviceArray<float> a(std::vector<float>{1, 4, -99, 2, 5, -99, 3, 6, -99});
  DeviceArray<float> bt(std::vector<float>{1, 0, 0, 1, 1, 1});  // B^T column-major 2x3
  DeviceArray<float> c(std::vector<float>{NAN, NAN, NAN, NAN});
  const float one = 1, zero = 0, two = 2;
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one, a.data(), 3, bt.data(), 2,
                        &zero, c.data(), 2),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.to_host(), (std::vector<float>{4, 10, 5, 11}));  // NaN in C not read with beta 0
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one, a.data(), 3, bt.data(), 2,
                        &two, c.data(), 2),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.to_host(), (std::vector<float>{12, 30, 15, 33}));  // AB + 2 AB
  // A^T (3x2) times a 2-vector: op(A) = A^T with A stored 2x3.
  DeviceArray<float> v(std::vector<float>{1, -1}), out(3);
  ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, 3, 1, 2, &one, a.data(), 3, v.data(), 2,
                        &zero, out.data(), 3),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(out.to_host(), (std::vector<float>{-3, -3, -3}));
  // A leading dimension shorter than the rows, and an operand that is not device memory.
  EXPECT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a.data(), 1, bt.data(), 3,
                        &zero, c.data(), 2),
            CUBLAS_STATUS_INVALID_VALUE);
  std::vector<float> host(9);
  EXPECT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 3, &one, host.data(), 3, bt.data(),
                        2, &zero, c.data(), 2),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(handle);
}

TEST(EmulatedCublas, FastComputeTypesRoundTheInputs) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  // 1 + 2^-12 is 1 in fp16 (10 mantissa bits) and in bf16 (7); 1 + 2^-9 survives fp16 only.
  const float tiny = 1.0f + std::ldexp(1.0f, -12), small = 1.0f + std::ldexp(1.0f, -9);
  DeviceArray<float> a(std::vector<float>{tiny, small}), b(std::vector<float>{1, 1}), c(1);
  const float one = 1, zero = 0;
  const auto product = [&](cublasComputeType_t type) {
    EXPECT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, a.data(), CUDA_R_32F, 1,
                           b.data(), CUDA_R_32F, 2, &zero, c.data(), CUDA_R_32F, 1, type,
                           CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    return c.to_host()[0];
  };
  EXPECT_EQ(product(CUBLAS_COMPUTE_32F), tiny + small);
  EXPECT_EQ(product(CUBLAS_COMPUTE_32F_FAST_16F), 1.0f + small);
  EXPECT_EQ(product(CUBLAS_COMPUTE_32F_FAST_16BF), 2.0f);
  EXPECT_EQ(round_to_half(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_to_half(65520.0f)));
  EXPECT_EQ(round_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // a tie: to even
  cublasDestroy(handle);
}

struct Conv {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Conv(int n, int c, int h, int width, int k, int r, int pad, int stride,
       cudnnConvolutionMode_t mode) {
    cudnnCreate(&handle);
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateTensorDescriptor(&bias);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&conv);
    cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, width);
    cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, r);
    cudnnSetConvolution2dDescriptor(conv, pad, pad, stride, stride, 1, 1, mode, CUDNN_DATA_FLOAT);
    int on, oc, oh, ow;
    cudnnGetConvolution2dForwardOutputDim(conv, x, w, &on, &oc, &oh, &ow);
    cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow);
    cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, oc, 1, 1);
  }
  ~Conv() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroy(handle);
  }
};

TEST(EmulatedCudnn, ForwardIsCrossCorrelationWithPaddingStrideAndFlippedConvolution) {
  // x = [1 2 3; 4 5 6; 7 8 9], w = [1 0; 0 -1]: cross-correlation x[i][j] - x[i+1][j+1] = -4.
  Conv plain(1, 1, 3, 3, 1, 2, 0, 1, CUDNN_CROSS_CORRELATION);
  DeviceArray<float> x(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  DeviceArray<float> w(std::vector<float>{1, 0, 0, -1}), y(4);
  const float one = 1, zero = 0;
  ASSERT_EQ(cudnnConvolutionForward(plain.handle, &one, plain.x, x.data(), plain.w, w.data(),
                                    plain.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                    0, &zero, plain.y, y.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(y.to_host(), (std::vector<float>{-4, -4, -4, -4}));
  // Convolution mode turns the filter round: x[i+1][j+1] - x[i][j] = 4.
  Conv flipped(1, 1, 3, 3, 1, 2, 0, 1, CUDNN_CONVOLUTION);
  cudnnConvolutionForward(flipped.handle, &one, flipped.x, x.data(), flipped.w, w.data(),
                          flipped.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                          flipped.y, y.data());
  EXPECT_EQ(y.to_host(), (std::vector<float>{4, 4, 4, 4}));
  // Pad 1, stride 2, a 3x3 box filter: outputs at (0,0), (0,2), (2,0), (2,2) sum the clipped
  // neighbourhoods: 1+2+4+5, 2+3+5+6, 4+5+7+8, 5+6+8+9.
  Conv padded(1, 1, 3, 3, 1, 3, 1, 2, CUDNN_CROSS_CORRELATION);
  DeviceArray<float> box(std::vector<float>(9, 1.0f)), out(4);
  // GEMM asks for an im2col workspace: without it the call is refused.
  EXPECT_EQ(cudnnConvolutionForward(padded.handle, &one, padded.x, x.data(), padded.w, box.data(),
                                    padded.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, nullptr, 0, &zero,
                                    padded.y, out.data()),
            CUDNN_STATUS_BAD_PARAM);
  size_t bytes = 0;
  ASSERT_EQ(
      cudnnGetConvolutionForwardWorkspaceSize(padded.handle, padded.x, padded.w, padded.conv,
                                              padded.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &bytes),
      CUDNN_STATUS_SUCCESS);
  DeviceArray<char> workspace(bytes);
  ASSERT_EQ(cudnnConvolutionForward(padded.handle, &one, padded.x, x.data(), padded.w, box.data(),
                                    padded.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, workspace.data(),
                                    bytes, &zero, padded.y, out.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(out.to_host(), (std::vector<float>{12, 16, 24, 28}));
  // The bias broadcast over the plane: y + 0.5.
  DeviceArray<float> bias(std::vector<float>{0.5f});
  ASSERT_EQ(
      cudnnAddTensor(padded.handle, &one, padded.bias, bias.data(), &one, padded.y, out.data()),
      CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(out.to_host(), (std::vector<float>{12.5f, 16.5f, 24.5f, 28.5f}));
}

// The backward passes are the adjoints of the forward: <conv(x, w), dy> = <x, dx(w, dy)> =
// <w, dw(x, dy)>, on a strided, padded, multi-channel case with integer values (exact sums).
TEST(EmulatedCudnn, BackwardPassesAreTheForwardsAdjointsAndBiasSumsThePlane) {
  Conv c(2, 3, 5, 4, 2, 3, 1, 2, CUDNN_CROSS_CORRELATION);
  std::vector<float> xv(2 * 3 * 5 * 4), wv(2 * 3 * 3 * 3), dyv(2 * 2 * 3 * 2);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(int(i * 7 % 11) - 5);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = float(int(i * 5 % 7) - 3);
  for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = float(int(i * 3 % 5) - 2);
  DeviceArray<float> x(xv), w(wv), dy(dyv), y(dyv.size()), dx(xv.size()), dw(wv.size()), db(2);
  const float one = 1, zero = 0;
  ASSERT_EQ(cudnnConvolutionForward(c.handle, &one, c.x, x.data(), c.w, w.data(), c.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    c.y, y.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnConvolutionBackwardData(c.handle, &one, c.w, w.data(), c.y, dy.data(), c.conv,
                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &zero, c.x,
                                         dx.data()),
            CUDNN_STATUS_SUCCESS);
  size_t bytes = 0;
  cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.x, c.y, c.conv, c.w,
                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &bytes);
  DeviceArray<char> workspace(bytes);
  ASSERT_EQ(cudnnConvolutionBackwardFilter(c.handle, &one, c.x, x.data(), c.y, dy.data(), c.conv,
                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, workspace.data(),
                                           bytes, &zero, c.w, dw.data()),
            CUDNN_STATUS_SUCCESS);
  const auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * b[i];
    return sum;
  };
  const double forward = dot(y.to_host(), dyv);
  EXPECT_NE(forward, 0);
  EXPECT_EQ(dot(xv, dx.to_host()), forward);
  EXPECT_EQ(dot(wv, dw.to_host()), forward);
  ASSERT_EQ(cudnnConvolutionBackwardBias(c.handle, &one, c.y, dy.data(), &zero, c.bias, db.data()),
            CUDNN_STATUS_SUCCESS);
  double plane0 = 0, plane1 = 0;
  for (int n = 0; n < 2; ++n) {
    for (int i = 0; i < 6; ++i) {
      plane0 += dyv[size_t(n * 12 + i)];
      plane1 += dyv[size_t(n * 12 + 6 + i)];
    }
  }
  EXPECT_EQ(db.to_host(), (std::vector<float>{float(plane0), float(plane1)}));
}

TEST(EmulatedCudnn, RankingsOfferAlgorithmsMvibrMustSkipAndDescriptorsAreChecked) {
  Conv c(1, 2, 6, 6, 3, 3, 0, 1, CUDNN_CROSS_CORRELATION);
  int count = 0;
  cudnnGetConvolutionForwardAlgorithmMaxCount(c.handle, &count);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(static_cast<size_t>(count));
  int returned = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.x, c.w, c.conv, c.y, count,
                                                   &returned, ranked.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_GE(returned, 4);
  EXPECT_EQ(ranked[0].algo, CUDNN_CONVOLUTION_FWD_ALGO_FFT);  // first, and not GEMM-like
  EXPECT_EQ(ranked[1].mathType, CUDNN_TENSOR_OP_MATH);        // not fp32
  // An output descriptor of the wrong size is refused everywhere.
  cudnnTensorDescriptor_t wrong;
  cudnnCreateTensorDescriptor(&wrong);
  cudnnSetTensor4dDescriptor(wrong, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 5, 5);
  EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.x, c.w, c.conv, wrong, count,
                                                   &returned, ranked.data()),
            CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(wrong);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(c.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 2, 6, 6),
            CUDNN_STATUS_NOT_SUPPORTED);
}

}  // namespace
}  // namespace mvibr::emulated
