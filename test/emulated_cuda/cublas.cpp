// The reference cuBLAS (see cublas_v2.h): the GEMMs mvibr calls as plain loops in double over
// device memory, with the argument checks the library documents, and the input roundings of the
// 16-bit and TF32 compute types.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cublas_v2.h"
#include "status_text.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
namespace mvibr::emulated {

namespace {

// Keeps `bits` of the 23 mantissa bits, rounding to nearest with ties to even.
float round_mantissa(float x, int bits) {
  if (!std::isfinite(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const int drop = 23 - bits;
  const uint32_t half = 1u << (drop - 1), keep_odd = (u >> drop) & 1u;
  u = (u + half - 1 + keep_odd) & ~((1u << drop) - 1);
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

}  // namespace

float round_to_bfloat16(float x) {
  return round_mantissa(x, 7);
}

float round_to_tf32(float x) {
  return round_mantissa(x, 10);
}

// fp16: 10 mantissa bits, exponents -14..15; below 2^-14 the spacing stays 2^-24 (subnormals);
// beyond 65504 infinity.
float round_to_half(float x) {
  if (!std::isfinite(x)) return x;
  const float magnitude = std::fabs(x);
  if (magnitude >= 65520.0f) return std::copysign(INFINITY, x);
  if (magnitude < 6.103515625e-05f) {
    const float quantum = 5.9604644775390625e-08f;  // 2^-24
    return std::nearbyint(x / quantum) * quantum;
  }
  return round_mantissa(x, 10);
}

}  // namespace mvibr::emulated

using mvibr::emulated::device_range;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  static const std::pair<cublasStatus_t, const char*> names[] = {
      MVIBR_STATUS_NAME(CUBLAS_STATUS_SUCCESS),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_NOT_INITIALIZED),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_ALLOC_FAILED),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_INVALID_VALUE),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_ARCH_MISMATCH),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_MAPPING_ERROR),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_EXECUTION_FAILED),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_INTERNAL_ERROR),
      MVIBR_STATUS_NAME(CUBLAS_STATUS_NOT_SUPPORTED),
  };
  return mvibr::emulated::status_text(status, names, "an unknown cuBLAS status");
}

namespace {

// Column-major GEMM with the operands' element rounding `round` (identity for fp32).
cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, const float* a, int lda, const float* b, int ldb,
                    float beta, float* c, int ldc, float (*round)(float)) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
      m < 0 || n < 0 || k < 0 || lda < std::max(1, na ? m : k) || ldb < std::max(1, nb ? k : n) ||
      ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // The extent each operand's leading dimension reaches: (columns - 1) * ld + rows.
  const auto extent = [](int rows, int columns, int ld) {
    return (size_t(columns) - 1) * size_t(ld) + size_t(rows);
  };
  if (k > 0 && (!device_range(a, 4 * extent(na ? m : k, na ? k : m, lda)) ||
                !device_range(b, 4 * extent(nb ? k : n, nb ? n : k, ldb)))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!device_range(c, 4 * extent(m, n, ldc))) return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int l = 0; l < k; ++l) {
        const float av = na ? a[i + size_t(l) * lda] : a[l + size_t(i) * lda];
        const float bv = nb ? b[l + size_t(j) * ldb] : b[j + size_t(l) * ldb];
        sum += double(round(av)) * double(round(bv));
      }
      float& out = c[i + size_t(j) * ldc];
      out = float(double(alpha) * sum + (beta == 0.0f ? 0.0 : double(beta) * out));
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

float exact(float x) {
  return x;
}

}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  // TF32 tensor-op math applies to Sgemm too (cublasSetMathMode).
  const bool tf32 = handle && handle->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return gemm(handle, transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc,
              tf32 ? mvibr::emulated::round_to_tf32 : exact);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulation keeps to the fp32 data mvibr passes
  }
  float (*round)(float) = exact;
  switch (computeType) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      break;
    case CUBLAS_COMPUTE_32F_FAST_16F:
      round = mvibr::emulated::round_to_half;
      break;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
      round = mvibr::emulated::round_to_bfloat16;
      break;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      round = mvibr::emulated::round_to_tf32;
      break;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return gemm(handle, transa, transb, m, n, k, *static_cast<const float*>(alpha),
              static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
              *static_cast<const float*>(beta), static_cast<float*>(C), ldc, round);
}
