// Register-blocked float GEMM for small products (see small_gemm.h). The tiles and loops are
// written once, in small_gemm_tiles.inc, and compiled twice: for AVX2 (the build's target) and,
// under a target pragma, for AVX-512, which runs where the CPU has it (twice the lanes, a tile of
// 12 x 32 in 24 of its 32 registers). Both make each element of C by the same FMA chain, so
// their results are the same bits; the AVX-512 kernels are only faster: 1.5-1.9x at the
// networks' widths of 32 to 256 (up to 90% of the AVX-512 FMA peak), the DynIBaR step 1.37x
// (bench/gemm_bench).
#include "small_gemm.h"

#include <algorithm>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>
#else
#include <cblas.h>
#endif

namespace mvibr::nn {
namespace {

#if defined(__AVX2__) && defined(__FMA__)

// A thread's buffers, kept from call to call.
enum Scratch { kPanels, kSums, kScratchBuffers };

// The thread's buffer `which`, at least `floats` floats, aligned to an AVX-512 vector.
float* scratch(Scratch which, size_t floats) {
  struct alignas(64) Vector {
    float lanes[16];
  };
  thread_local std::vector<Vector> buffers[kScratchBuffers];
  std::vector<Vector>& buffer = buffers[which];
  const size_t vectors = (floats + 15) / 16;
  if (buffer.size() < vectors) buffer.resize(vectors);
  return buffer.data()->lanes;
}

namespace avx2 {

struct Isa {
  static constexpr size_t kLanes = 8;
  static constexpr size_t kTileRows = 6;  // 6 x 2 accumulators, 2 vectors of B, 1 of A: 15 of 16
  // kTN's rows of A and B per block: a panel of B, [256][16], is 16 KiB (L1); the block's A, up
  // to 256 wide, 256 KiB (L2).
  static constexpr size_t kBlockSteps = 256;
  // A vector of floats without __m256's may_alias: GCC keeps arrays of these in registers, while
  // __m256 accumulators were stored back to the stack on every step.
  typedef float Floats __attribute__((vector_size(32)));
  using Mask = __m256i;

  // The first `count` lanes, 0 <= count <= 8.
  static Mask mask(size_t count) {
    static const int32_t kTable[2 * kLanes] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + kLanes - count));
  }
  static Floats load(const float* p) { return _mm256_load_ps(p); }
  static Floats loadu(const float* p) { return _mm256_loadu_ps(p); }
  static Floats load_masked(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, Floats v) { _mm256_store_ps(p, v); }
  static void storeu(float* p, Floats v) { _mm256_storeu_ps(p, v); }
  static void store_masked(float* p, Mask m, Floats v) { _mm256_maskstore_ps(p, m, v); }
  static Floats broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Floats fma(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }
};

#include "small_gemm_tiles.inc"

}  // namespace avx2

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {

struct Isa {
  static constexpr size_t kLanes = 16;
  static constexpr size_t kTileRows = 12;  // 12 x 2 accumulators, 2 of B, 1 of A: 27 of 32
  // A panel of B, [128][32], is 16 KiB (L1).
  static constexpr size_t kBlockSteps = 128;
  typedef float Floats __attribute__((vector_size(64)));
  using Mask = __mmask16;

  // The first `count` lanes, 0 <= count <= 16.
  static Mask mask(size_t count) { return Mask((1u << count) - 1); }
  static Floats load(const float* p) { return _mm512_load_ps(p); }
  static Floats loadu(const float* p) { return _mm512_loadu_ps(p); }
  static Floats load_masked(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Floats v) { _mm512_store_ps(p, v); }
  static void storeu(float* p, Floats v) { _mm512_storeu_ps(p, v); }
  static void store_masked(float* p, Mask m, Floats v) { _mm512_mask_storeu_ps(p, m, v); }
  static Floats broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Floats fma(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
};

#include "small_gemm_tiles.inc"

}  // namespace avx512
#pragma GCC pop_options

bool cpu_has_avx512() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
  return has;
}

void multiply(GemmIsa isa, GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
              const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (isa == GemmIsa::kAvx512) {
    avx512::multiply(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  } else {
    avx2::multiply(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
}

#else  // baseline x86-64

void multiply(GemmIsa, GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
              const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, form == GemmForm::kTN ? CblasTrans : CblasNoTrans,
              form == GemmForm::kNT ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f, a,
              int(lda), b, int(ldb), accumulate ? 1.0f : 0.0f, c, int(ldc));
}

#endif

}  // namespace

std::vector<GemmIsa> available_gemm_isas() {
#if defined(__AVX2__) && defined(__FMA__)
  if (cpu_has_avx512()) return {GemmIsa::kAvx2, GemmIsa::kAvx512};
  return {GemmIsa::kAvx2};
#else
  return {GemmIsa::kBlas};
#endif
}

GemmIsa best_gemm_isa() {
  static const GemmIsa best = available_gemm_isas().back();
  return best;
}

const char* gemm_isa_name(GemmIsa isa) {
  return isa == GemmIsa::kAvx512 ? "avx512" : isa == GemmIsa::kAvx2 ? "avx2" : "blas";
}

void small_gemm_on(GemmIsa isa, GemmForm form, size_t m, size_t n, size_t k, const float* a,
                   size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  multiply(isa, form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

void small_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
                const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  small_gemm_on(best_gemm_isa(), form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

}  // namespace mvibr::nn
