// Float GEMM for the dense layers of the networks, whose products are small: a chunk of a few
// hundred rows times weights 1 to ~100 wide. OpenBLAS spent nearly as long zeroing C (beta = 0)
// and packing both operands as multiplying them; and its sums, like oneDNN's, run in an order that
// depends on the number of rows in the call, so the same row came out differently in chunks of
// different sizes. Here the order is fixed.
#pragma once

#include <cstddef>

namespace mvibr::nn {

// Row-major operands: op(A) is [m, k], op(B) is [k, n], C is [m, n].
enum class GemmForm {
  kNN,  // C = A B, A [m, k], B [k, n]:   a layer's input gradient, grad_y W
  kNT,  // C = A B^T, A [m, k], B [n, k]: a layer's forward, x W^T
  kTN,  // C = A^T B, A [k, m], B [k, n]: a weight gradient, grad_y^T x
};

// C = op(A) op(B), or C += op(A) op(B) when `accumulate`; single-threaded (callers parallelise
// around it). With AVX2 and FMA, each element's sum is one chain of fused multiply-adds over k in
// increasing order, from 0, then added to C when accumulating. The order depends on nothing else:
// not on m, nor on the element's row or column within the call, so a row of A gives the same row
// of C in any call (kNN, kNT), and kTN's sums run over the rows of A and B in their order. Builds
// for baseline x86-64 call cblas_sgemm instead, whose order OpenBLAS does not document.
void small_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
                const float* b, size_t ldb, bool accumulate, float* c, size_t ldc);

}  // namespace mvibr::nn
