// bf16 GEMM through oneDNN's matmul (see bf16_gemm.h).
// - Each thread rounds its operands into its own dense buffers and keeps its own primitives, one
//   per shape: building one costs far more than running it, and oneDNN's primitives with the
//   default (shared) scratchpad must not run on two threads at once; each thread passes its own.
// - oneDNN runs a call on the threads OpenMP offers the caller: one inside a parallel region (the
//   networks' chunks), and one outside, where the call holds OpenMP to a single thread, so that
//   its blocking and its results are the same for any thread count.
// - Dense copies let each form be a plain matmul: kTN's A is read as its transpose through
//   strides (oneDNN's transposing copy was faster than ours); B is always [k, n], kNT's weights
//   transposed once as they are rounded and kept (bf16_weights).
// - The rounding is AVX512-BF16's conversion, or AVX-512 integer arithmetic for groups holding a
//   subnormal and on CPUs without it: bf16_bits' to the bit (NaNs quieted, subnormals kept). The
//   compiler's AVX2 loop of bf16_bits had spent as long as the products.
#include "bf16_gemm.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/layers.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Holds OpenMP to one thread for a call made outside a parallel region (see the note above).
class OneThread {
 public:
  OneThread() : saved_(omp_in_parallel() ? 0 : omp_get_max_threads()) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// op(A) [m, k] and op(B) [k, n] as oneDNN reads the dense copies: A [m, k] (kTN: stored [k, m]),
// B [k, n] in every form.
memory::desc source_desc(GemmForm form, size_t m, size_t k) {
  const memory::dims strides =
      form == GemmForm::kTN ? memory::dims{1, memory::dim(m)} : memory::dims{memory::dim(k), 1};
  return memory::desc({memory::dim(m), memory::dim(k)}, memory::data_type::bf16, strides);
}

memory::desc weights_desc(size_t k, size_t n) {
  return memory::desc({memory::dim(k), memory::dim(n)}, memory::data_type::bf16,
                      memory::dims{memory::dim(n), 1});
}

// A primitive and its arguments, whose data handles each call points at its buffers (memory
// objects cost a few microseconds to create, as much as the smallest products).
struct Matmul {
  dnnl::matmul primitive;
  memory source, weights, bias, dst, scratchpad;
};

// What tells one primitive from another.
struct Product {
  GemmForm form;
  size_t m, n, k;
  bool accumulate;
  size_t ldc;
  bool bias;
  Activation activation;
  auto key() const { return std::tuple(form, m, n, k, accumulate, ldc, bias, activation); }
  bool operator<(const Product& other) const { return key() < other.key(); }
};

Matmul make_matmul(const Product& p) {
  const memory::desc source = source_desc(p.form, p.m, p.k), weights = weights_desc(p.k, p.n);
  const memory::desc dst({memory::dim(p.m), memory::dim(p.n)}, memory::data_type::f32,
                         memory::dims{memory::dim(p.ldc), 1});
  const memory::desc bias =
      p.bias ? memory::desc({1, memory::dim(p.n)}, memory::data_type::f32, memory::dims{0, 1})
             : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops post;
  if (p.accumulate) post.append_sum(1.0f);
  if (p.activation == Activation::kRelu) {
    post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  } else if (p.activation == Activation::kElu) {
    post.append_eltwise(1.0f, dnnl::algorithm::eltwise_elu, 1.0f, 0.0f);
  }
  attr.set_post_ops(post);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(source, weights, bias, dst), attr,
                                        cpu_engine());
  const dnnl::engine& engine = cpu_engine();
  return {dnnl::matmul(pd),
          memory(source, engine, nullptr),
          memory(weights, engine, nullptr),
          memory(bias, engine, nullptr),
          memory(dst, engine, nullptr),
          memory(pd.scratchpad_desc(), engine, nullptr)};
}

// A thread's primitives, by product.
Matmul& matmul_for(const Product& p) {
  thread_local std::map<Product, Matmul> primitives;
  auto it = primitives.find(p);
  if (it == primitives.end()) {
    const OneThread one_thread;  // oneDNN blocks for the threads it will have
    try {
      it = primitives.emplace(p, make_matmul(p)).first;
    } catch (const dnnl::error& e) {
      throw RuntimeFailure(std::string("oneDNN bf16 matmul set-up failed: ") + e.what());
    }
  }
  return it->second;
}

void round_rows(size_t rows, size_t columns, const double* from, size_t ld, double* to) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < columns; ++c) {
      to[r * columns + c] = double(float_of(int32_t(bf16_bits(float(from[r * ld + c]))) << 16));
    }
  }
}

// The rows and columns of A and B as stored: A [m, k] ([k, m] for kTN), B [k, n] ([n, k] for kNT).
std::pair<size_t, size_t> a_stored(GemmForm form, size_t m, size_t k) {
  return form == GemmForm::kTN ? std::pair{k, m} : std::pair{m, k};
}
std::pair<size_t, size_t> b_stored(GemmForm form, size_t n, size_t k) {
  return form == GemmForm::kNT ? std::pair{n, k} : std::pair{k, n};
}

// The live FrozenWeights.
struct FrozenSpan {
  const float *begin, *end;
  uint64_t generation;
};
struct FrozenRegistry {
  std::atomic<uint64_t> last{0};
  std::mutex mutex;
  std::vector<FrozenSpan> spans;
};
FrozenRegistry& frozen_weights() {
  static FrozenRegistry registry;
  return registry;
}

// The generation of the live FrozenWeights that holds [begin, end), or 0.
uint64_t frozen_generation(const float* begin, const float* end) {
  const std::lock_guard<std::mutex> lock(frozen_weights().mutex);
  for (const FrozenSpan& s : frozen_weights().spans) {
    if (begin >= s.begin && end <= s.end) return s.generation;
  }
  return 0;
}

// small_gemm's empty cases: nothing to multiply.
template <typename T>
bool empty_product(size_t m, size_t n, size_t k, bool accumulate, T* c, size_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k > 0) return false;
  if (!accumulate) {
    for (size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
  }
  return true;
}

#pragma GCC push_options
#pragma GCC target("avx512f")
// bf16_bits on the first `count` (at most 16) lanes at `in`.
// (The shifts are the zero-masked forms: GCC 12 warns of the plain ones' undefined pass-through.)
inline void round_lanes(const float* in, uint16_t* out, __mmask16 lanes) {
  const __mmask16 all = 0xFFFF;
  const __m512 x = _mm512_maskz_loadu_ps(lanes, in);
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i upper = _mm512_maskz_srli_epi32(all, bits, 16);
  const __m512i odd = _mm512_and_si512(upper, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      all, _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(upper, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  _mm512_mask_cvtepi32_storeu_epi16(out, lanes, _mm512_mask_mov_epi32(rounded, nan, quiet));
}

void round_row_avx512(size_t count, const float* in, uint16_t* out) {
  size_t c = 0;
  for (; c + 16 <= count; c += 16) round_lanes(in + c, out + c, __mmask16(0xFFFF));
  if (c < count) round_lanes(in + c, out + c, __mmask16((1u << (count - c)) - 1));
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bf16")
// AVX512-BF16's conversion, 32 values an instruction. It rounds as bf16_bits but for subnormal
// inputs, which it flushes to zero: a group of 32 holding one goes through round_lanes instead.
void round_row_avx512_bf16(size_t count, const float* in, uint16_t* out) {
  constexpr int kSubnormal = 0x20;  // fpclass's denormal category
  size_t c = 0;
  for (; c + 32 <= count; c += 32) {
    const __m512 low = _mm512_loadu_ps(in + c), high = _mm512_loadu_ps(in + c + 16);
    if (_mm512_fpclass_ps_mask(low, kSubnormal) | _mm512_fpclass_ps_mask(high, kSubnormal)) {
      round_lanes(in + c, out + c, __mmask16(0xFFFF));
      round_lanes(in + c + 16, out + c + 16, __mmask16(0xFFFF));
    } else {
      _mm512_storeu_si512(out + c, __m512i(_mm512_cvtne2ps_pbh(high, low)));
    }
  }
  round_row_avx512(count - c, in + c, out + c);
}
#pragma GCC pop_options

bool cpu_has_avx512_bf16() {
  static const bool has = (__builtin_cpu_init(), __builtin_cpu_supports("avx512bf16"));
  return has;
}

}  // namespace

uint16_t* bf16_buffer(Bf16Buffer which, size_t count) {
  struct alignas(64) Line {  // AMX loads whole cache lines
    uint16_t values[32];
  };
  thread_local std::vector<Line> buffers[size_t(Bf16Buffer::kCount)];
  std::vector<Line>& buffer = buffers[size_t(which)];
  const size_t lines = (count + 31) / 32;
  if (buffer.size() < lines) buffer.resize(lines);
  return buffer.data()->values;
}

std::vector<Bf16Rounding> available_bf16_roundings() {
  if (cpu_has_avx512_bf16()) return {Bf16Rounding::kAvx512, Bf16Rounding::kAvx512Bf16};
  return {Bf16Rounding::kAvx512};
}

void round_to_bf16_on(Bf16Rounding rounding, size_t count, const float* in, uint16_t* out) {
  if (rounding == Bf16Rounding::kAvx512Bf16) {
    round_row_avx512_bf16(count, in, out);
  } else {
    round_row_avx512(count, in, out);
  }
}

void round_rows_to_bf16(size_t rows, size_t columns, const float* from, size_t ld, uint16_t* to) {
  static const Bf16Rounding best = available_bf16_roundings().back();
  for (size_t r = 0; r < rows; ++r) {
    round_to_bf16_on(best, columns, from + r * ld, to + r * columns);
  }
}

namespace {

// The primitive a call needs, or null where there is nothing to multiply (C then handled as
// small_gemm handles it). Built before any rounding: where oneDNN has none, the call fails first.
Matmul* matmul_to_run(GemmForm form, size_t m, size_t n, size_t k, bool accumulate, float* c,
                      size_t ldc, Bf16Epilogue epilogue) {
  const bool plain = !epilogue.bias && epilogue.activation == Activation::kNone;
  if (!plain && k == 0) throw InvalidArgument("bf16_gemm: a bias or an activation needs k > 0");
  if (empty_product(m, n, k, accumulate, c, ldc)) return nullptr;
  return &matmul_for(
      {form, m, n, k, accumulate, ldc, epilogue.bias != nullptr, epilogue.activation});
}

void execute(Matmul& mm, const uint16_t* a, const uint16_t* b, float* c, const float* bias) {
  const OneThread one_thread;
  thread_local std::vector<uint8_t> scratch;
  thread_local dnnl::stream stream(cpu_engine());
  const size_t scratch_bytes = mm.scratchpad.get_desc().get_size();
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  try {
    mm.source.set_data_handle(const_cast<uint16_t*>(a));
    mm.weights.set_data_handle(const_cast<uint16_t*>(b));
    mm.dst.set_data_handle(c);
    mm.scratchpad.set_data_handle(scratch.data());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mm.source},
                                         {DNNL_ARG_WEIGHTS, mm.weights},
                                         {DNNL_ARG_DST, mm.dst},
                                         {DNNL_ARG_SCRATCHPAD, mm.scratchpad}};
    if (bias) {
      mm.bias.set_data_handle(const_cast<float*>(bias));
      args.emplace(DNNL_ARG_BIAS, mm.bias);
    }
    mm.primitive.execute(stream, args);
  } catch (const dnnl::error& e) {
    throw RuntimeFailure(std::string("oneDNN bf16 matmul failed: ") + e.what());
  }
}

}  // namespace

void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const uint16_t* a, const uint16_t* b,
               bool accumulate, float* c, size_t ldc) {
  if (Matmul* mm = matmul_to_run(form, m, n, k, accumulate, c, ldc, {}))
    execute(*mm, a, b, c, nullptr);
}

FrozenWeights::FrozenWeights(const float* values, size_t count)
    : generation_(++frozen_weights().last) {
  const std::lock_guard<std::mutex> lock(frozen_weights().mutex);
  frozen_weights().spans.push_back({values, values + count, generation_});
}

FrozenWeights::~FrozenWeights() {
  const std::lock_guard<std::mutex> lock(frozen_weights().mutex);
  std::vector<FrozenSpan>& spans = frozen_weights().spans;
  spans.erase(std::remove_if(spans.begin(), spans.end(),
                             [&](const FrozenSpan& s) { return s.generation == generation_; }),
              spans.end());
}

const uint16_t* bf16_weights(GemmForm form, size_t n, size_t k, const float* b, size_t ldb) {
  struct Rounded {
    std::vector<float> source;  // B's values, dense, when they were rounded
    std::vector<uint16_t> values;
    uint64_t generation = 0;  // of the FrozenWeights they were rounded in (0: none)
  };
  using Key = std::tuple<const float*, GemmForm, size_t, size_t, size_t>;
  thread_local std::map<Key, Rounded> cache;
  const auto [rows, columns] = b_stored(form, n, k);
  Rounded& r = cache[Key{b, form, n, k, ldb}];
  const uint64_t frozen = frozen_generation(b, b + (rows - 1) * ldb + columns);
  if (frozen != 0 && r.generation == frozen) return r.values.data();
  r.generation = frozen;
  bool same = r.source.size() == rows * columns;
  for (size_t i = 0; same && i < rows; ++i) {
    same = std::memcmp(b + i * ldb, r.source.data() + i * columns, columns * sizeof(float)) == 0;
  }
  if (same) return r.values.data();
  r.source.resize(rows * columns);
  for (size_t i = 0; i < rows; ++i) {
    std::copy(b + i * ldb, b + i * ldb + columns, r.source.begin() + long(i * columns));
  }
  r.values.resize(k * n);
  if (form == GemmForm::kNT) {  // B^T stored: [n, k] -> [k, n]
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < k; ++j) r.values[j * n + i] = bf16_bits(r.source[i * k + j]);
    }
  } else {
    round_rows_to_bf16(k, n, r.source.data(), n, r.values.data());
  }
  return r.values.data();
}

void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const float* a, size_t lda,
               const float* b, size_t ldb, bool accumulate, float* c, size_t ldc,
               Bf16Epilogue epilogue) {
  Matmul* mm = matmul_to_run(form, m, n, k, accumulate, c, ldc, epilogue);
  if (!mm) return;
  const auto [a_rows, a_columns] = a_stored(form, m, k);
  uint16_t* a16 = bf16_buffer(Bf16Buffer::kA, m * k);
  round_rows_to_bf16(a_rows, a_columns, a, lda, a16);
  const uint16_t* b16 = nullptr;
  if (form == GemmForm::kTN) {
    uint16_t* rounded = bf16_buffer(Bf16Buffer::kB, k * n);
    round_rows_to_bf16(k, n, b, ldb, rounded);
    b16 = rounded;
  } else {
    b16 = bf16_weights(form, n, k, b, ldb);
  }
  execute(*mm, a16, b16, c, epilogue.bias);
}

void bf16_gemm(GemmForm form, size_t m, size_t n, size_t k, const double* a, size_t lda,
               const double* b, size_t ldb, bool accumulate, double* c, size_t ldc) {
  if (empty_product(m, n, k, accumulate, c, ldc)) return;
  std::vector<double> a_copy(m * k), b_copy(k * n);
  const auto [a_rows, a_columns] = a_stored(form, m, k);
  const auto [b_rows, b_columns] = b_stored(form, n, k);
  round_rows(a_rows, a_columns, a, lda, a_copy.data());
  round_rows(b_rows, b_columns, b, ldb, b_copy.data());
  cblas_dgemm(CblasRowMajor, form == GemmForm::kTN ? CblasTrans : CblasNoTrans,
              form == GemmForm::kNT ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0,
              a_copy.data(), int(a_columns), b_copy.data(), int(b_columns), accumulate ? 1.0 : 0.0,
              c, int(ldc));
}

void check_linear_operands(Operands operands) {
  if (operands == Operands::kFp32) return;
  try {
    matmul_for({GemmForm::kNT, 16, 16, 16, false, 16, false, Activation::kNone});
  } catch (const RuntimeFailure&) {
    throw InvalidArgument(
        "precision = bf16: oneDNN has no bf16 matmul for this CPU (it needs AVX-512); set "
        "precision = fp32");
  }
}

}  // namespace mvibr::nn
