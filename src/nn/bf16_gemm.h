// small_gemm on bf16 operands (Operands::kBf16): the dense layers' products on AMX.
// - The operands are rounded to bfloat16 (to nearest even, as bf16_bits), their products summed
//   in fp32 by oneDNN's matmul: AMX tiles where the CPU has them, AVX512-BF16 or AVX-512
//   emulation where not (it needs AVX-512: check_linear_operands). At the DynIBaR networks'
//   128-256 widths it runs 2.9-4.2x small_gemm's AVX-512 fp32 FLOP rate over 640 rows, rounding
//   counted (bench/gemm_bench; the weight gradient's transposed read the slowest).
// - Single-threaded, as small_gemm: callers parallelise around it. The same call gives the same
//   bits; a row's sum order may depend on the call's shape (oneDNN's blocking), unlike small_gemm.
// - Double, for the oracles, multiplies the same rounded values exactly (cblas_dgemm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mvibr/nn/layers.h"
#include "small_gemm.h"

namespace mvibr::nn {

// What a product can add to C in the pass that writes it (oneDNN's post-ops): a bias [n] on every
// row, then an activation (oneDNN's: ELU from its own exp, within a few fp32 ulps of
// Linear's). A layer's forward writes its output once instead of twice. It needs k > 0.
struct Bf16Epilogue {
  const float* bias = nullptr;
  Activation activation = Activation::kNone;
};

// C = op(bf16(A)) op(bf16(B)), or C += ... when `accumulate`, then the epilogue; forms and strides
// as small_gemm's.
void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
               const float* b, size_t ldb, bool accumulate, float* c, size_t ldc,
               Bf16Epilogue epilogue = {});
void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const double* a, size_t lda,
               const double* b, size_t ldb, bool accumulate, double* c, size_t ldc);

// The same product on operands rounded already and dense: A [m, k] ([k, m] for kTN, as small_gemm's
// forms store them with lda its width), B [k, n] in every form (bf16_weights transposes kNT's).
// An operand that two products share is then rounded once.
void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const uint16_t* a, const uint16_t* b,
               bool accumulate, float* c, size_t ldc);

// B of a kNN or kNT product (a layer's weights, as small_gemm's forms store them) rounded, dense
// [k, n]. Each thread keeps the copies it made, by address and shape, and reuses one while a
// FrozenWeights (layers.h) made since holds B, or else where B still holds the values it came
// from bit for bit: the layers multiply the same weights in every chunk of a pass. Valid until
// the thread's next call with the same address and shape.
const uint16_t* bf16_weights(GemmForm form, size_t n, size_t k, const float* b, size_t ldb);

// The rows x columns matrix at `from` (row stride ld) rounded into a dense copy at `to`, bit for
// bit as bf16_bits; AVX-512 (every CPU that runs bf16_gemm has it).
void round_rows_to_bf16(size_t rows, size_t columns, const float* from, size_t ld, uint16_t* to);

// The roundings round_rows_to_bf16 picks from: AVX-512 integer arithmetic, and AVX512-BF16's
// conversion where the CPU has it (the faster); each on `count` values (tests, benchmarks).
enum class Bf16Rounding { kAvx512, kAvx512Bf16 };
std::vector<Bf16Rounding> available_bf16_roundings();
void round_to_bf16_on(Bf16Rounding rounding, size_t count, const float* in, uint16_t* out);

// A thread's buffers of bf16 values, kept from call to call: bf16_gemm's rounded A and B, and one
// for a caller's operand that two products share.
enum class Bf16Buffer { kA, kB, kShared, kCount };
uint16_t* bf16_buffer(Bf16Buffer which, size_t count);

}  // namespace mvibr::nn
