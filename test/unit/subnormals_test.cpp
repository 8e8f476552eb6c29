// FlushSubnormals: while it lives, a product that would be subnormal comes out 0 and a subnormal
// input counts as 0, on the calling thread and on every OpenMP thread; after it, each thread
// computes with subnormals again.
#include "mvibr/core/subnormals.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <vector>

namespace mvibr {
namespace {

// FLT_MIN / 4 as the product of two normal floats, and a subnormal input doubled, on this thread
// (volatile: computed at run time, under the thread's mode).
struct Results {
  float product, doubled;
};
Results compute() {
  volatile float tiny = FLT_MIN, quarter = 0.25f, subnormal = FLT_MIN / 8, two = 2.0f;
  return {tiny * quarter, subnormal * two};
}

// compute() on every thread of a parallel region of `threads`.
std::vector<Results> on_each_thread(int threads) {
  std::vector<Results> results(size_t(threads), Results{-1, -1});
#pragma omp parallel num_threads(threads)
  results[size_t(omp_get_thread_num())] = compute();
  return results;
}

TEST(FlushSubnormals, FlushesOnEveryThreadWhileItLives) {
  const int threads = omp_get_max_threads();
  ASSERT_EQ(compute().product, FLT_MIN / 4) << "the test needs subnormals to start with";
  {
    const FlushSubnormals flush;
    EXPECT_EQ(compute().product, 0.0f);
    EXPECT_EQ(compute().doubled, 0.0f);
    const std::vector<Results> pool = on_each_thread(threads);
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(pool[size_t(t)].product, 0.0f) << "thread " << t;
      EXPECT_EQ(pool[size_t(t)].doubled, 0.0f) << "thread " << t;
    }
  }
  EXPECT_EQ(compute().product, FLT_MIN / 4);
  EXPECT_EQ(compute().doubled, FLT_MIN / 4);
  const std::vector<Results> pool = on_each_thread(threads);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(pool[size_t(t)].product, FLT_MIN / 4) << "thread " << t;
    EXPECT_EQ(pool[size_t(t)].doubled, FLT_MIN / 4) << "thread " << t;
  }
}

}  // namespace
}  // namespace mvibr
