// The emulated CUDA device: kernels/*.cu and src/cuda/ compiled as host C++ and run on the CPU
// with CUDA's semantics, so that the GPU code runs in every CI (issue 18). This header stands in
// for <cuda_runtime.h> in the emulated build (its folder comes first on the include path).
// - A launch runs its blocks one after another; a block's threads are fibers (Boost.Context) on one
//   OS thread, so __syncthreads is a real barrier, __shared__ is one copy per block (a function
//   static on the running thread), warps of 32 exchange values in __shfl_*_sync, and atomics are
//   plain read-modify-writes (nothing else runs meanwhile).
// - A block whose thread 0 finishes without meeting a barrier or a warp exchange runs its other
//   threads without fibers; a barrier met by another thread then is an error, not a guess.
// - cudaMalloc'd memory is tracked: copies and memsets check their pointers, sizes and kinds.
//   Streams and events are host-synchronous: work runs when issued, which is one valid order;
//   except work that waits for other processes (an NCCL collective, see enqueue_pending).
// - A copy, memset or later launch marks memory written; the emulated libraries refuse to read
//   memory nothing has written (uninitialised device memory).
// - Errors are CUDA's codes, kept as the last error as the runtime does. A kernel that faults
//   (an exception, a deadlocked barrier) says why on stderr and, as on a GPU, its launch
//   succeeds: the next call that waits for the device returns cudaErrorLaunchFailure, and every
//   call after it (sticky) until cudaDeviceReset.
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// One per block: a function-local static of the OS thread that runs the block's fibers.
#define __shared__ static thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaEventDefault = 0;

struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount, warpSize, maxThreadsPerBlock;
  size_t totalGlobalMem, sharedMemPerBlock;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
// The typed overload <cuda_runtime.h> gives C++ callers.
template <typename T>
cudaError_t cudaMalloc(T** pointer, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
cudaError_t cudaMallocHost(void** pointer, size_t bytes);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* destination, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* destination, int value, size_t bytes,
                            cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

namespace mvibr::emulated {

// The running thread's place, set by the scheduler before each fiber runs.
struct ThreadPlace {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
};
const ThreadPlace& place();

// Device built-ins that need the scheduler: a block barrier, a warp barrier, and the warp's
// value exchange (each lane publishes 8 bytes, then reads another lane's).
void sync_block();
void sync_warp(unsigned mask);
uint64_t exchange(uint64_t mine, int source_lane, unsigned mask);
unsigned ballot(bool predicate, unsigned mask);

// Whether [pointer, pointer + bytes) lies inside one cudaMalloc'd allocation (the emulated
// libraries check their operands with it).
bool device_range(const void* pointer, size_t bytes);

// Whether the range lies in one allocation that something has written since it was allocated
// (a copy or memset into it, or any kernel launched since, since kernels' stores are not seen);
// and marks a range written (an emulated library's output).
bool device_range_written(const void* pointer, size_t bytes);
void mark_device_range_written(const void* pointer, size_t bytes);

// Work on `stream` that completes when other processes join (an NCCL collective):
// `work(false)` says whether it is done, `work(true)` waits until it is. Later work on the
// stream, its synchronisation and cudaDeviceSynchronize wait for it; cudaStreamQuery reports
// cudaErrorNotReady until it is done, as a GPU stream does while a collective waits for peers.
void enqueue_pending(cudaStream_t stream, std::function<bool(bool wait)> work);

// Fault injection and accounting for tests: the n-th cudaMalloc from now fails (0: none);
// allocations and streams alive.
void fail_allocation(size_t n);
size_t live_allocations();
size_t live_streams();

// Bytes copied between host and device memory since the start, each way (cudaMemcpy*): what a
// PCIe bus would carry.
struct Transfers {
  size_t host_to_device = 0, device_to_host = 0;
};
Transfers transfers_so_far();

// Runs `body` as every thread of the grid; returns cudaSuccess or the error of the launch,
// which also becomes the last error. `kernel` names the kernel in the coverage report.
cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, const std::function<void()>& body);

// How many times each kernel was launched since the start (the coverage report: names are
// symbol names).
struct LaunchCount {
  const void* kernel;
  size_t launches;
};
std::vector<LaunchCount> launch_counts();

// MVIBR_LAUNCH(kernel, grid, block, shared, stream)(arguments...): the arguments are converted
// to the kernel's parameter types once, as a real launch copies them, and every thread calls the
// kernel with them.
template <typename... Parameters>
class Launch {
 public:
  Launch(void (*kernel)(Parameters...), dim3 grid, dim3 block, size_t shared_bytes = 0,
         cudaStream_t stream = nullptr)
      : kernel_(kernel), grid_(grid), block_(block), shared_(shared_bytes), stream_(stream) {}

  template <typename... Arguments>
  void operator()(Arguments&&... arguments) const {
    static_assert(sizeof...(Arguments) == sizeof...(Parameters), "wrong number of arguments");
    const std::tuple<std::decay_t<Parameters>...> copied(std::forward<Arguments>(arguments)...);
    void (*kernel)(Parameters...) = kernel_;
    launch(reinterpret_cast<const void*>(kernel_), grid_, block_, shared_, stream_,
           [&] { std::apply(kernel, copied); });
  }

 private:
  void (*kernel_)(Parameters...);
  dim3 grid_, block_;
  size_t shared_;
  cudaStream_t stream_;
};

template <typename Value>
Value shuffle(Value value, int source_lane, unsigned mask) {
  static_assert(sizeof(Value) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(Value));
  bits = exchange(bits, source_lane, mask);
  std::memcpy(&value, &bits, sizeof(Value));
  return value;
}

inline int lane() {
  const ThreadPlace& p = place();
  const unsigned linear = p.thread.x + p.block_dim.x * (p.thread.y + p.block_dim.y * p.thread.z);
  return int(linear % 32);
}

// An atomic: *address = update(old value), returning the old value (see the atomics below).
template <typename T, typename Update>
T read_modify_write(T* address, Update update) {
  const T old = *address;
  *address = update(old);
  return old;
}

}  // namespace mvibr::emulated

#define threadIdx (::mvibr::emulated::place().thread)
#define blockIdx (::mvibr::emulated::place().block)
#define blockDim (::mvibr::emulated::place().block_dim)
#define gridDim (::mvibr::emulated::place().grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() {
  ::mvibr::emulated::sync_block();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::mvibr::emulated::sync_warp(mask);
}
template <typename T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
  const int lane = ::mvibr::emulated::lane();
  return ::mvibr::emulated::shuffle(value, (lane / width) * width + source_lane % width, mask);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const int lane = ::mvibr::emulated::lane();
  const int source = lane % width + int(delta) < width ? lane + int(delta) : lane;
  return ::mvibr::emulated::shuffle(value, source, mask);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  const int lane = ::mvibr::emulated::lane();
  const int source = lane % width >= int(delta) ? lane - int(delta) : lane;
  return ::mvibr::emulated::shuffle(value, source, mask);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  const int lane = ::mvibr::emulated::lane();
  const int source = ((lane % width) ^ lane_mask) < width ? lane ^ lane_mask : lane;
  return ::mvibr::emulated::shuffle(value, source, mask);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::mvibr::emulated::ballot(predicate != 0, mask);
}

// Atomics: a block's fibers switch only at barriers and exchanges and blocks run one after
// another, so a read-modify-write is atomic as it stands. They return the old value.
template <typename T>
T atomicAdd(T* address, T value) {
  return ::mvibr::emulated::read_modify_write(address, [&](T old) { return old + value; });
}
template <typename T>
T atomicMax(T* address, T value) {
  return ::mvibr::emulated::read_modify_write(address,
                                              [&](T old) { return old < value ? value : old; });
}
template <typename T>
T atomicMin(T* address, T value) {
  return ::mvibr::emulated::read_modify_write(address,
                                              [&](T old) { return value < old ? value : old; });
}
template <typename T>
T atomicExch(T* address, T value) {
  return ::mvibr::emulated::read_modify_write(address, [&](T) { return value; });
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  return ::mvibr::emulated::read_modify_write(address,
                                              [&](T old) { return old == compare ? value : old; });
}

// CUDA's integer min and max for device code.
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}

// Round-to-nearest arithmetic that nvcc never contracts into FMAs: the emulated build compiles
// with -ffp-contract=off, so the plain operations are the same.
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dsub_rn(double a, double b) {
  return a - b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline double __ddiv_rn(double a, double b) {
  return a / b;
}
