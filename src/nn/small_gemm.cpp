// Register-blocked float GEMM for small products (see small_gemm.h). C is computed in tiles of up
// to 6 rows and 16 columns, held in 12 AVX registers while all k steps of the tile run (kTN: a
// block of steps at a time, below), each element's sum one FMA chain; C is read (when
// accumulating) and written once, at the end. Tiles at the edges of C are the same code on fewer
// rows or masked lanes, so an element's arithmetic is the same wherever it sits.
//
// kNN and kNT first copy B (a layer's weights, small next to A) into panels of 16 columns, the
// last one 8 wide when at most 8 columns remain, [k][width] and zero-padded: the kernel then
// loads whole vectors of B whatever n, and the panels stay in L1 while the rows of A stream by.
//
// kTN (weight gradients, k up to ~100k rows of A and B) runs in blocks of kBlockSteps rows: with
// every tile over all k rows, each tile re-read A and B from L3 at their row strides (66 GFLOP/s
// for a 256 x 256 gradient over 1024 rows, against 112 for kNT; 105 now). A block's B is copied
// into panels of 16 columns as above, one staying in L1 while the tiles down it read the block's
// A in place from L2 (packing A too measured ~10% slower). A tile's sums wait between blocks in a
// scratch buffer, loaded back into its registers to continue the same FMA chain; only the last
// block adds C and stores to it.
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

constexpr size_t kLanes = 8;
constexpr size_t kTileRows = 6;  // 6 x 2 accumulators, 2 vectors of B, 1 of A: 15 registers
constexpr size_t kTileColumns = 2 * kLanes;
// kTN's rows of A and B per block: a panel of B, [256][16], is 16 KiB (L1); the block's A, up to
// 256 wide, 256 KiB (L2).
constexpr size_t kBlockSteps = 256;

// The first `count` lanes, 0 <= count <= 8.
__m256i lane_mask(size_t count) {
  static const int32_t kTable[2 * kLanes] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                             0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTable + kLanes - count));
}

// One tile's operands: A's element (row r, step s) at a[r * a_row + s * a_step], B's vectors for
// step s at b + s * b_step (+ 8), the tile of C at c, which the sums are added to when
// `add_to_c`. `mask` selects the columns of C in the tile's last vector when it is partial.
// `sums` (row r's vectors at sums + r * 16) holds the sums between blocks of steps: the kernel
// starts from them when `resume_sums`, and stores them there instead of to C when `keep_sums`.
struct Tile {
  const float* a;
  size_t a_row, a_step;
  const float* b;
  size_t b_step;
  float* c;
  size_t ldc, steps;
  __m256i mask;
  bool add_to_c;
  float* sums;
  bool resume_sums, keep_sums;
};

// A vector of floats without __m256's may_alias: GCC keeps arrays of these in registers, while
// __m256 accumulators were stored back to the stack on every step.
typedef float Floats __attribute__((vector_size(32)));

// R rows, V vectors of columns; kPartial: the last vector has columns missing, so C is loaded and
// stored masked.
template <size_t R, size_t V, bool kPartial>
void tile_kernel(const Tile& t) {
  const size_t a_row = t.a_row, a_step = t.a_step, b_step = t.b_step, ldc = t.ldc;
  const __m256i mask = t.mask;
  float* const c = t.c;
  Floats acc[R][V] = {};
  if (t.resume_sums) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v)
        acc[r][v] = _mm256_load_ps(t.sums + r * kTileColumns + v * kLanes);
    }
  }
  const float* a = t.a;
  const float* b = t.b;
  for (size_t s = t.steps; s > 0; --s, a += a_step, b += b_step) {
    Floats bv[V];
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) bv[v] = _mm256_loadu_ps(b + v * kLanes);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const Floats ar = _mm256_broadcast_ss(a + r * a_row);
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  if (t.keep_sums) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (size_t v = 0; v < V; ++v)
        _mm256_store_ps(t.sums + r * kTileColumns + v * kLanes, acc[r][v]);
    }
    return;
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (size_t v = 0; v < V; ++v) {
      float* to = c + r * ldc + v * kLanes;
      if (kPartial && v == V - 1) {
        if (t.add_to_c) acc[r][v] += _mm256_maskload_ps(to, mask);
        _mm256_maskstore_ps(to, mask, acc[r][v]);
      } else {
        if (t.add_to_c) acc[r][v] += _mm256_loadu_ps(to);
        _mm256_storeu_ps(to, acc[r][v]);
      }
    }
  }
}

using Kernel = void (*)(const Tile&);

template <size_t V, bool kPartial, size_t... R>
constexpr std::array<Kernel, kTileRows> kernels_by_rows(std::index_sequence<R...>) {
  return {&tile_kernel<R + 1, V, kPartial>...};
}

template <size_t V, bool kPartial>
constexpr std::array<Kernel, kTileRows> kKernels =
    kernels_by_rows<V, kPartial>(std::make_index_sequence<kTileRows>());

// The tile of `rows` rows and `width` columns (<= 16).
void run_tile(size_t rows, size_t width, Tile& t) {
  const size_t vectors = width > kLanes ? 2 : 1;
  const size_t last = width - (vectors - 1) * kLanes;
  const size_t r = rows - 1;
  if (last == kLanes) {
    (vectors == 2 ? kKernels<2, false> : kKernels<1, false>)[r](t);
    return;
  }
  t.mask = lane_mask(last);
  (vectors == 2 ? kKernels<2, true> : kKernels<1, true>)[r](t);
}

// A thread's buffers, kept from call to call.
enum Scratch { kPanels, kSums, kScratchBuffers };

// The thread's buffer `which`, at least `floats` floats, aligned to a vector.
float* scratch(Scratch which, size_t floats) {
  struct alignas(32) Vector {
    float lanes[kLanes];
  };
  thread_local std::vector<Vector> buffers[kScratchBuffers];
  std::vector<Vector>& buffer = buffers[which];
  const size_t vectors = (floats + kLanes - 1) / kLanes;
  if (buffer.size() < vectors) buffer.resize(vectors);
  return buffer.data()->lanes;
}

// kNN and kNT: B packed into panels, then row blocks of A against every panel.
void multiply_rows(bool b_transposed, size_t m, size_t n, size_t k, const float* a, size_t lda,
                   const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  float* packed = scratch(kPanels, k * ((n + kLanes - 1) / kLanes) * kLanes);
  for (size_t j0 = 0; j0 < n; j0 += kTileColumns) {
    const size_t width = std::min(kTileColumns, n - j0);
    const size_t padded = width > kLanes ? kTileColumns : kLanes;
    float* panel = packed + j0 * k;  // the panels before are all 16 wide
    for (size_t s = 0; s < k; ++s) {
      std::fill(panel + s * padded + width, panel + (s + 1) * padded, 0.0f);
    }
    if (b_transposed) {  // B's rows are the panel's columns
      for (size_t j = 0; j < width; ++j) {
        for (size_t s = 0; s < k; ++s) panel[s * padded + j] = b[(j0 + j) * ldb + s];
      }
    } else {
      for (size_t s = 0; s < k; ++s) {
        std::copy(b + s * ldb + j0, b + s * ldb + j0 + width, panel + s * padded);
      }
    }
  }
  for (size_t i0 = 0; i0 < m; i0 += kTileRows) {
    const size_t rows = std::min(kTileRows, m - i0);
    for (size_t j0 = 0; j0 < n; j0 += kTileColumns) {
      const size_t width = std::min(kTileColumns, n - j0);
      Tile t{a + i0 * lda,
             lda,
             1,
             packed + j0 * k,
             width > kLanes ? kTileColumns : kLanes,
             c + i0 * ldc + j0,
             ldc,
             k,
             {},
             accumulate,
             nullptr,
             false,
             false};
      run_tile(rows, width, t);
    }
  }
}

// kTN's B for a block: `steps` rows of `n` columns (row s at b + s * ldb) into panels of 16
// columns, [steps][16] one after another, the lanes past column n zero.
void pack_b_block(const float* b, size_t ldb, size_t n, size_t steps, float* panels) {
  for (size_t s = 0; s < steps; ++s, b += ldb) {
    for (size_t j0 = 0; j0 < n; j0 += kTileColumns) {
      const size_t width = std::min(kTileColumns, n - j0);
      float* to = panels + (j0 / kTileColumns * steps + s) * kTileColumns;
      for (size_t v = 0; v < kTileColumns; v += kLanes) {
        const __m256i mask = lane_mask(width > v ? std::min(kLanes, width - v) : 0);
        _mm256_store_ps(to + v, _mm256_maskload_ps(b + j0 + v, mask));
      }
    }
  }
}

// kTN: blocks of A's and B's rows; in each, every tile of C over the block's rows.
void multiply_columns(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                      size_t ldb, bool accumulate, float* c, size_t ldc) {
  const size_t tile_rows = (m + kTileRows - 1) / kTileRows;
  const size_t tile_columns = (n + kTileColumns - 1) / kTileColumns;
  float* const panels = scratch(kPanels, std::min(k, kBlockSteps) * tile_columns * kTileColumns);
  constexpr size_t kTileFloats = kTileRows * kTileColumns;
  float* const sums =
      k > kBlockSteps ? scratch(kSums, tile_rows * tile_columns * kTileFloats) : nullptr;
  for (size_t s0 = 0; s0 < k; s0 += kBlockSteps) {
    const size_t steps = std::min(kBlockSteps, k - s0);
    pack_b_block(b + s0 * ldb, ldb, n, steps, panels);
    for (size_t tj = 0; tj < tile_columns; ++tj) {
      const size_t j0 = tj * kTileColumns;
      for (size_t ti = 0; ti < tile_rows; ++ti) {
        const size_t i0 = ti * kTileRows;
        Tile t{a + s0 * lda + i0,
               1,
               lda,
               panels + tj * steps * kTileColumns,
               kTileColumns,
               c + i0 * ldc + j0,
               ldc,
               steps,
               {},
               accumulate,
               sums ? sums + (ti * tile_columns + tj) * kTileFloats : nullptr,
               s0 > 0,
               s0 + steps < k};
        run_tile(std::min(kTileRows, m - i0), std::min(kTileColumns, n - j0), t);
      }
    }
  }
}

// k >= 1 from here on.
void multiply(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
              const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (form == GemmForm::kTN) {
    multiply_columns(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  } else {
    multiply_rows(form == GemmForm::kNT, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
}

#else  // baseline x86-64

void multiply(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
              const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, form == GemmForm::kTN ? CblasTrans : CblasNoTrans,
              form == GemmForm::kNT ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f, a,
              int(lda), b, int(ldb), accumulate ? 1.0f : 0.0f, c, int(ldc));
}

#endif

}  // namespace

void small_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
                const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  multiply(form, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

}  // namespace mvibr::nn
