// small_gemm's kernels and bf16_gemm side by side in one run: every form on each instruction set
// this CPU runs (AVX2, AVX-512) and on bf16 operands (oneDNN: AMX where the CPU has it), at the
// networks' layer widths, over 640 rows (a chunk of the aggregators' rows, nn/aggregator.cpp's
// kChunkRows). flops_per_second counts 2 m n k. The correctness columns: differs_from_avx2 counts
// the elements of C whose bits differ from the AVX2 kernels' (the kernels promise none);
// bf16_error is bf16_gemm's largest error against the double product of the same rounded
// operands, relative to C's largest magnitude (fp32 sums: about 1e-7).
//   gemm_bench [--benchmark_* flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../src/nn/bf16_gemm.h"
#include "../src/nn/small_gemm.h"

namespace mvibr::nn {
namespace {

constexpr size_t kRows = 640;

// C [m, n] = op(A) op(B) over k for a layer `width` wide (in = out): the forward (kNT) and the
// input gradient (kNN) over the rows, the weight gradient (kTN) summed over them.
struct Problem {
  Problem(GemmForm f, size_t width) : form(f) {
    m = form == GemmForm::kTN ? width : kRows;
    n = width;
    k = form == GemmForm::kTN ? kRows : width;
    lda = form == GemmForm::kTN ? m : k;
    ldb = form == GemmForm::kNT ? k : n;
    a.resize(kRows * width);
    b.resize(form == GemmForm::kTN ? kRows * width : width * width);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 97) / 97.0f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 89) / 89.0f - 0.5f;
  }
  // The product on bf16 operands, and its error against double's on the same rounded values.
  double bf16_error(const std::vector<float>& c) const {
    const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
    std::vector<double> exact(m * n);
    bf16_gemm(form, m, n, k, a64.data(), lda, b64.data(), ldb, false, exact.data(), n);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      worst = std::max(worst, std::abs(c[i] - exact[i]));
      largest = std::max(largest, std::abs(exact[i]));
    }
    return worst / largest;
  }
  std::vector<float> product(GemmIsa isa) const {
    std::vector<float> c(m * n);
    small_gemm_on(isa, form, m, n, k, a.data(), lda, b.data(), ldb, false, c.data(), n);
    return c;
  }

  GemmForm form;
  size_t m, n, k, lda, ldb;
  std::vector<float> a, b;
};

benchmark::Counter flops(const Problem& p) {
  return benchmark::Counter(2.0 * double(p.m) * double(p.n) * double(p.k),
                            benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const std::pair<GemmForm, const char*> forms[] = {{GemmForm::kNT, "forward_NT"},
                                                    {GemmForm::kNN, "input_grad_NN"},
                                                    {GemmForm::kTN, "weight_grad_TN"}};
  for (const auto& [form, form_name] : forms) {
    for (size_t width : {16, 32, 64, 128, 256}) {
      for (GemmIsa isa : available_gemm_isas()) {
        const std::string name = std::string("BM_small_gemm/") + form_name + "/" +
                                 gemm_isa_name(isa) + "/width" + std::to_string(width);
        benchmark::RegisterBenchmark(
            name.c_str(), [form = form, width, isa](benchmark::State& state) {
              const Problem p(form, width);
              std::vector<float> c(p.m * p.n);
              for (auto _ : state) {
                small_gemm_on(isa, p.form, p.m, p.n, p.k, p.a.data(), p.lda, p.b.data(), p.ldb,
                              false, c.data(), p.n);
                benchmark::ClobberMemory();
              }
              const std::vector<float> avx2 = p.product(GemmIsa::kAvx2);
              double differ = 0;
              for (size_t i = 0; i < c.size(); ++i) differ += std::memcmp(&c[i], &avx2[i], 4) != 0;
              state.counters["differs_from_avx2"] = differ;
              state.counters["flops_per_second"] = flops(p);
            });
      }
      const std::string name =
          std::string("BM_bf16_gemm/") + form_name + "/onednn/width" + std::to_string(width);
      benchmark::RegisterBenchmark(name.c_str(), [form = form, width](benchmark::State& state) {
        const Problem p(form, width);
        std::vector<float> c(p.m * p.n);
        for (auto _ : state) {
          bf16_gemm(p.form, p.m, p.n, p.k, p.a.data(), p.lda, p.b.data(), p.ldb, false, c.data(),
                    p.n);
          benchmark::ClobberMemory();
        }
        state.counters["bf16_error"] = p.bf16_error(c);
        state.counters["flops_per_second"] = flops(p);
      });
    }
  }
}

}  // namespace
}  // namespace mvibr::nn

int main(int argc, char** argv) {
  mvibr::nn::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
