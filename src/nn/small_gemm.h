// Float GEMM for the dense layers of the networks, whose products are small: a chunk of a few
// hundred rows times weights 1 to ~100 wide. OpenBLAS spent nearly as long zeroing C (beta = 0)
// and packing both operands as multiplying them; and its sums, like oneDNN's, run in an order that
// depends on the number of rows in the call, so the same row came out differently in chunks of
// different sizes. Here the order is fixed.
#pragma once

#include <cstddef>
#include <vector>

namespace mvibr::nn {

// Row-major operands: op(A) is [m, k], op(B) is [k, n], C is [m, n].
enum class GemmForm {
  kNN,  // C = A B, A [m, k], B [k, n]:   a layer's input gradient, grad_y W
  kNT,  // C = A B^T, A [m, k], B [n, k]: a layer's forward, x W^T
  kTN,  // C = A^T B, A [k, m], B [k, n]: a weight gradient, grad_y^T x
};

// C = op(A) op(B), or C += op(A) op(B) when `accumulate`; single-threaded (callers parallelise
// around it), on the best kernels this CPU runs. With AVX2 and FMA, each element's sum is one
// chain of fused multiply-adds over k in increasing order, from 0, then added to C when
// accumulating. The order depends on nothing else: not on m, nor on the element's row or column
// within the call, nor on the vector width (AVX2 or AVX-512), so a row of A gives the same row of
// C in any call (kNN, kNT) on any such CPU, and kTN's sums run over the rows of A and B in their
// order. Builds for baseline x86-64 call cblas_sgemm instead, whose order OpenBLAS does not
// document.
void small_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
                const float* b, size_t ldb, bool accumulate, float* c, size_t ldc);

// small_gemm's kernels: cblas_sgemm (builds for baseline x86-64), AVX2, AVX-512.
enum class GemmIsa { kBlas, kAvx2, kAvx512 };

// The kernels this build and CPU run, the best last; small_gemm uses the best.
std::vector<GemmIsa> available_gemm_isas();
GemmIsa best_gemm_isa();
const char* gemm_isa_name(GemmIsa isa);

// small_gemm on the given kernels, one of available_gemm_isas() (tests, benchmarks).
void small_gemm_on(GemmIsa isa, GemmForm form, size_t m, size_t n, size_t k, const float* a,
                   size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc);

}  // namespace mvibr::nn
