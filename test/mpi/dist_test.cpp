// The data-parallel building blocks under mpirun -np 2: the MPI communicator's collectives,
// bucketed gradient all-reduce (with and without the worker thread), the config and parameter
// agreement checks, and the watchdog.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "mpi_test_main.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/agreement.h"
#include "mvibr/dist/gradient_buckets.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/dist/watchdog.h"

namespace mvibr::dist {
namespace {

std::unique_ptr<Communicator> world() {
  return testing::mpi_session().world();
}

TEST(Communicator, ReducesBroadcastsAndGathers) {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  ASSERT_EQ(size, 2) << "run under mpirun -np 2";
  EXPECT_EQ(comm->backend(), "mpi");

  std::vector<float> values = {float(rank + 1), -2.0f * float(rank), 0.5f};
  comm->all_reduce(values.data(), values.size(), ReduceOp::kSum);
  EXPECT_EQ(values, (std::vector<float>{3.0f, -2.0f, 1.0f}));
  std::vector<double> average = {double(rank), 10.0 * rank};
  comm->all_reduce(average.data(), average.size(), ReduceOp::kAverage);
  EXPECT_EQ(average, (std::vector<double>{0.5, 5.0}));
  double largest = rank == 1 ? 7.0 : -1.0;
  comm->all_reduce(&largest, 1, ReduceOp::kMax);
  EXPECT_EQ(largest, 7.0);

  uint64_t token = rank == 1 ? 0xfeedULL : 0;
  comm->broadcast(&token, sizeof(token), 1);
  EXPECT_EQ(token, 0xfeedULL);
  EXPECT_EQ(all_gather_value<int>(*comm, 10 + rank), (std::vector<int>{10, 11}));
  EXPECT_EQ(broadcast_string(*comm, rank == 0 ? "from rank 0" : "ignored", 0), "from rank 0");
  EXPECT_EQ(all_gather_strings(*comm, rank == 0 ? "" : "one"),
            (std::vector<std::string>{"", "one"}));
  comm->barrier();
}

// Gradients of a model with three "networks" whose backward finishes them in the order
// 2, 1, 0, each marked ready in pieces from its end down, as a backward pass does.
void check_buckets(bool overlap, size_t bucket_bytes) {
  auto comm = world();
  const int rank = comm->rank();
  const std::vector<GradientRange> networks = {{0, 1000}, {1000, 37}, {1037, 2000}};
  std::vector<float> grads(3037 + 5);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i % 97) * (rank == 0 ? 1.0f : -0.5f);
  std::vector<float> expected(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) expected[i] = 0.5f * float(i % 97);
  for (size_t i = 3037; i < grads.size(); ++i) expected[i] = grads[i];  // outside every range

  GradientBuckets buckets(*comm, {networks[2], networks[1], networks[0]}, bucket_bytes,
                          ReduceOp::kSum, overlap);
  for (int pass = 0; pass < 2; ++pass) {  // reusable from pass to pass
    std::vector<float> g = grads;
    buckets.begin(g.data());
    for (int n = 2; n >= 0; --n) {
      size_t end = networks[size_t(n)].offset + networks[size_t(n)].count;
      while (end > networks[size_t(n)].offset) {
        const size_t begin = std::max(networks[size_t(n)].offset, end > 300 ? end - 300 : 0);
        buckets.mark_ready(begin, end - begin);
        end = begin;
      }
    }
    buckets.finish();
    EXPECT_EQ(g, expected) << "overlap " << overlap << ", pass " << pass;
    EXPECT_GT(buckets.communication_seconds(), 0.0);
    EXPECT_GE(buckets.exposed_seconds(), 0.0);
  }
  size_t covered = 0;
  for (const GradientRange& b : buckets.buckets()) {
    EXPECT_LE(b.count * sizeof(float), std::max<size_t>(bucket_bytes, sizeof(float)));
    covered += b.count;
  }
  EXPECT_EQ(covered, 3037u);
}

TEST(GradientBuckets, SumEveryRanksGradientsWithAWorkerThread) {
  check_buckets(true, 1024);
}

TEST(GradientBuckets, SumEveryRanksGradientsInline) {
  check_buckets(false, 1024);
}

TEST(Bfloat16, RoundsToNearestEven) {
  EXPECT_EQ(from_bf16(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(from_bf16(to_bf16(-3.5f)), -3.5f);
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (even: 1).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 1.5f / 256)), 1.0f + 2.0f / 256);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(INFINITY))));
}

TEST(GradientBuckets, Bfloat16BucketsSumAndRound) {
  auto comm = world();
  std::vector<float> g(1000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(i % 100) + (comm->rank() == 0 ? 0.25f : 0.0f);
  GradientBuckets buckets(*comm, {{0, 1000}}, 1024, ReduceOp::kSum, true, true);
  buckets.begin(g.data());
  buckets.mark_ready(0, 1000);
  buckets.finish();
  for (size_t i = 0; i < g.size(); ++i) {
    const float exact = 2.0f * float(i % 100) + 0.25f;
    EXPECT_EQ(g[i], from_bf16(to_bf16(exact))) << i;  // one addition, one rounding
  }
  EXPECT_THROW(GradientBuckets(*comm, {{0, 10}}, 1024, ReduceOp::kAverage, false, true),
               InvalidArgument);
}

TEST(GradientBuckets, OneBucketPerRangeWhenBucketsAreLarge) {
  auto comm = world();
  GradientBuckets buckets(*comm, {{10, 5}, {0, 10}}, 25 << 20, ReduceOp::kSum, true);
  ASSERT_EQ(buckets.buckets().size(), 2u);
  EXPECT_EQ(buckets.buckets()[0].offset, 10u);
  EXPECT_EQ(buckets.buckets()[1].count, 10u);
}

TEST(GradientBuckets, RejectsRangesMarkedTwiceOrNever) {
  auto comm = world();
  std::vector<float> g(20, 1.0f);
  GradientBuckets buckets(*comm, {{0, 20}}, 40, ReduceOp::kSum, false);
  buckets.begin(g.data());
  buckets.mark_ready(0, 5);
  EXPECT_THROW(buckets.mark_ready(4, 2), InvalidArgument);
  EXPECT_THROW(buckets.finish(), InvalidArgument);  // [10, 20) never marked
}

TEST(Agreement, SameConfigPasses) {
  auto comm = world();
  EXPECT_NO_THROW(check_same_config(*comm, "N_rand = 512\nseed = 0\n"));
}

TEST(Agreement, DifferentConfigNamesTheKeyOnEveryRank) {
  auto comm = world();
  const std::string text =
      comm->rank() == 0 ? "N_rand = 512\nseed = 0\n" : "N_rand = 256\nseed = 0\n";
  try {
    check_same_config(*comm, text);
    FAIL() << "configs differ";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "config key 'N_rand' differs between ranks: rank 0 has 512, rank 1 has 256");
  }
}

TEST(Agreement, DivergedParametersAreReported) {
  auto comm = world();
  std::vector<float> params(100, 0.25f);
  EXPECT_NO_THROW(check_same_parameters(*comm, params.data(), params.size(), "start"));
  if (comm->rank() == 1) params[42] = std::nextafter(0.25f, 1.0f);
  try {
    check_same_parameters(*comm, params.data(), params.size(), "step 7");
    FAIL() << "parameters differ";
  } catch (const RuntimeFailure& e) {
    EXPECT_STREQ(e.what(),
                 "parameters diverged across ranks at step 7: rank 1's differ from rank 0's");
  }
}

// A wait that outlasts the timeout fires the handler once, with the message; waits within it and
// time with nothing watched do not. No sleep must be long enough: the slow wait lasts until the
// handler has fired, and the quick ones are watched by a timeout no machine outlasts.
TEST(Watchdog, FiresOnceForAWaitThatOutlastsTheTimeout) {
  std::atomic<int> fired{0};
  std::string message;
  std::mutex mutex;
  const auto handler = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    message = m;
    ++fired;
  };
  {
    Watchdog patient(600, handler);
    {
      Watchdog::Scope quick(&patient, "a quick wait");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // nothing watched
  }
  EXPECT_EQ(fired.load(), 0);
  Watchdog watchdog(0.2, handler);
  {
    Watchdog::Scope slow(&watchdog, "all-reduce of the gradients of step 3");
    while (fired.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // three timeouts more: still once
  }
  EXPECT_EQ(fired.load(), 1);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(message,
            "all-reduce of the gradients of step 3 has not completed after 0.2 s: another rank has "
            "failed or stalls");
}

}  // namespace
}  // namespace mvibr::dist
