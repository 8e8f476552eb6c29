// Known answers for the emulated CUDA device itself, from CUDA's documented semantics: barriers
// and shared memory per block, warp shuffles and ballots, atomics across blocks, thread and block
// indices in three dimensions; and the errors a real device gives for a bad launch shape, a
// destroyed stream, copies outside device memory, a barrier that can never be passed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "../../src/cuda/check.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"

namespace mvibr::emulated {
namespace {

// Tree sum in shared memory: each block writes the sum of its 256 values.
__global__ void block_sums(const int* values, int* sums) {
  __shared__ int partial[256];
  const unsigned t = threadIdx.x;
  partial[t] = values[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = partial[0];
}

TEST(EmulatedDevice, SharedMemoryAndBarriersSumEachBlock) {
  std::vector<int> values(4 * 256);
  std::iota(values.begin(), values.end(), 1);
  int *device_values, *device_sums;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_values), values.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_sums), 4 * 4), cudaSuccess);
  cudaMemcpy(device_values, values.data(), values.size() * 4, cudaMemcpyHostToDevice);
  MVIBR_LAUNCH(block_sums, 4, 256, 0, nullptr)(device_values, device_sums);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  int sums[4];
  cudaMemcpy(sums, device_sums, sizeof sums, cudaMemcpyDeviceToHost);
  for (int b = 0; b < 4; ++b) {
    const int first = 256 * b + 1, last = 256 * (b + 1);
    EXPECT_EQ(sums[b], (first + last) * 256 / 2) << "block " << b;
  }
  cudaFree(device_values);
  cudaFree(device_sums);
}

// Per lane: down 1, xor 16, up 3, lane 5 of each 8-lane group, and the ballot of odd lanes.
__global__ void shuffles(int* out) {
  const int lane = int(threadIdx.x % 32), t = int(threadIdx.x);
  out[5 * t + 0] = __shfl_down_sync(0xffffffffu, 100 + lane, 1);
  out[5 * t + 1] = __shfl_xor_sync(0xffffffffu, 100 + lane, 16);
  out[5 * t + 2] = __shfl_up_sync(0xffffffffu, 100 + lane, 3);
  out[5 * t + 3] = __shfl_sync(0xffffffffu, 100 + lane, 5, 8);
  out[5 * t + 4] = int(__ballot_sync(0xffffffffu, lane % 2 == 1));
}

TEST(EmulatedDevice, WarpShufflesAndBallotsFollowCudasLaneRules) {
  DeviceArray<int> out(64 * 5);
  MVIBR_LAUNCH(shuffles, 1, 64, 0, nullptr)(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = out.to_host();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(got[5 * t + 0], 100 + (lane + 1 < 32 ? lane + 1 : lane)) << t;  // top lane keeps
    EXPECT_EQ(got[5 * t + 1], 100 + (lane ^ 16)) << t;
    EXPECT_EQ(got[5 * t + 2], 100 + (lane >= 3 ? lane - 3 : lane)) << t;
    EXPECT_EQ(got[5 * t + 3], 100 + (lane / 8) * 8 + 5) << t;
    EXPECT_EQ(unsigned(got[5 * t + 4]), 0xaaaaaaaau) << t;
  }
}

// Every thread of a 3-D grid of 3-D blocks adds 1 to its bin and writes its global id.
__global__ void indices(int* bins, int* ids) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  ids[id] = int(id);
  atomicAdd(bins + id % 7, 1);
}

TEST(EmulatedDevice, IndicesCoverTheGridAndAtomicsCountEveryThread) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int threads = 12 * 24;
  DeviceArray<int> bins(7), ids(threads);
  bins.zero();
  MVIBR_LAUNCH(indices, grid, block, 0, nullptr)(bins.data(), ids.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = ids.to_host(), counts = bins.to_host();
  for (int i = 0; i < threads; ++i) EXPECT_EQ(got[size_t(i)], i);
  for (int b = 0; b < 7; ++b) EXPECT_EQ(counts[size_t(b)], threads / 7 + (b < threads % 7));
}

// Lanes 0-15 wait at the block barrier, 16-31 at a shuffle that needs lanes 0-15: no thread can
// go on. And a barrier that thread 0 never meets.
__global__ void deadlock(int* out) {
  const int lane = int(threadIdx.x % 32);
  if (lane < 16) {
    __syncthreads();
  } else {
    out[lane] = __shfl_down_sync(0xffffffffu, lane, 1);
  }
}
__global__ void divergent_barrier(int* out) {
  if (threadIdx.x == 5) __syncthreads();
  out[threadIdx.x] = 1;
}

// As on a GPU: the launch succeeds, the next wait for the device sees the fault, and every call
// after it does, until cudaDeviceReset.
TEST(EmulatedDevice, ABarrierNoThreadCanPassIsALaunchFailure) {
  DeviceArray<int> out(64);
  for (auto kernel : {deadlock, divergent_barrier}) {
    MVIBR_LAUNCH(kernel, 1, 32, 0, nullptr)(out.data());
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
    int host[64];
    EXPECT_EQ(cudaMemcpy(host, out.data(), sizeof host, cudaMemcpyDeviceToHost),
              cudaErrorLaunchFailure);
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

// MVIBR_CUDA_SYNC=1: the check after a launch waits for it and reports the fault there; without
// it, the fault surfaces at the next check that waits, naming that check.
TEST(EmulatedDevice, SynchronousLaunchesNameTheFaultingLaunch) {
  DeviceArray<int> out(64);
  const auto message = [](const std::function<void()>& run) {
    try {
      run();
    } catch (const RuntimeFailure& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ASSERT_EQ(unsetenv("MVIBR_CUDA_SYNC"), 0);
  const std::string asynchronous = message([&] {
    MVIBR_LAUNCH(deadlock, 1, 32, 0, nullptr)(out.data());
    MVIBR_CUDA_CHECK_LAUNCH();
    MVIBR_CUDA_CHECK(cudaDeviceSynchronize());
  });
  EXPECT_NE(asynchronous.find("CUDA error in cudaDeviceSynchronize()"), std::string::npos)
      << asynchronous;
  cudaDeviceReset();

  ASSERT_EQ(setenv("MVIBR_CUDA_SYNC", "1", 1), 0);
  const std::string synchronous = message([&] {
    MVIBR_LAUNCH(deadlock, 1, 32, 0, nullptr)(out.data());
    MVIBR_CUDA_CHECK_LAUNCH();
  });
  ASSERT_EQ(unsetenv("MVIBR_CUDA_SYNC"), 0);
  EXPECT_NE(synchronous.find("CUDA error in kernel (MVIBR_CUDA_SYNC=1)"), std::string::npos)
      << synchronous;
  cudaDeviceReset();
}

__global__ void nothing() {}

TEST(EmulatedDevice, BadLaunchesStreamsAndCopiesAreErrors) {
  MVIBR_LAUNCH(nothing, 1, 2048, 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  MVIBR_LAUNCH(nothing, dim3(1, 70000), 32, 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  MVIBR_LAUNCH(nothing, 1, 32, 0, stream)();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  MVIBR_LAUNCH(nothing, 1, 32, 0, stream)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);

  float host[8] = {};
  float* device;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), sizeof host), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device + 1, host, sizeof host, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // one float past the end
  EXPECT_EQ(cudaMemcpy(host, host + 4, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(host, 0, 4), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host), cudaErrorInvalidDevicePointer);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaErrorInvalidDevicePointer);  // twice
  cudaGetLastError();
}

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (MVIBR_EMULATED_ASAN) every cudaMalloc is a heap block of exactly its
// size: a kernel that writes one element past it is stopped there.
__global__ void write_one_past(int* out) {
  out[threadIdx.x] = 1;
}

TEST(EmulatedDeviceDeathTest, AWriteOnePastAnAllocationIsCaught) {
  EXPECT_DEATH(
      {
        DeviceArray<int> five(5);
        MVIBR_LAUNCH(write_one_past, 1, 6, 0, nullptr)(five.data());
      },
      "heap-buffer-overflow");
}
#endif

}  // namespace
}  // namespace mvibr::emulated
