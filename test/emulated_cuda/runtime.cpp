// The emulated CUDA runtime (see cuda_runtime.h): device memory, streams, events, errors, and the
// tables the block scheduler (emulator.cpp) checks a launch against.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "runtime_state.h"

namespace mvibr::emulated {
namespace {

cudaError_t last_error = cudaSuccess;
// A kernel that faulted: as on a GPU its launch succeeds, the next call that waits for the device
// sees the fault, and from then on every call does (sticky) until cudaDeviceReset.
cudaError_t fault = cudaSuccess;
bool fault_seen = false;
// Launches by kernel, and the lock of every table here: made once and never destroyed, since the
// scheduler's coverage report reads them while statics are being destroyed at exit.
std::map<const void*, size_t>& launches = *new std::map<const void*, size_t>;
// Device memory by base. `written`: a copy or memset wrote into it, or a kernel was launched
// after it was allocated (kernels' stores are not seen, so any launch counts).
struct Allocation {
  size_t bytes = 0;
  uint64_t launches_before = 0;
  bool written = false;
};
std::map<uintptr_t, Allocation> allocations;
uint64_t total_launches = 0;
size_t failing_allocation = 0;  // fail the n-th cudaMalloc from now (0: none)
Transfers transfers;
std::set<const void*> streams, events;
// Work issued on a stream that completes later (see enqueue_pending), by stream.
std::map<const void*, std::vector<std::function<bool(bool)>>> pending_work;
std::mutex& state_mutex = *new std::mutex;  // kernels run on the launching thread

cudaError_t fail(cudaError_t error) {
  last_error = error;
  return error;
}

// The fault, once a call has waited for the device (or earlier, `waits`); else success.
cudaError_t device_fault(bool waits) {
  if (fault == cudaSuccess || !(waits || fault_seen)) return cudaSuccess;
  fault_seen = true;
  return fail(fault);
}

// The allocation that holds [pointer, pointer + bytes), if any.
Allocation* allocation_of(const void* pointer, size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(pointer);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  const size_t size = it->second.bytes;
  return p >= it->first && bytes <= size && p - it->first <= size - bytes ? &it->second : nullptr;
}

bool in_device_memory(const void* pointer, size_t bytes) {
  return allocation_of(pointer, bytes) != nullptr;
}

void mark_written(const void* pointer, size_t bytes) {
  if (Allocation* a = allocation_of(pointer, bytes)) a->written = true;
}

// Waits for the work pending on `stream` (stream order: what comes after it waits). Called
// without state_mutex held: the wait may block on other processes.
void drain(cudaStream_t stream) {
  std::vector<std::function<bool(bool)>> work;
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    const auto it = pending_work.find(stream);
    if (it == pending_work.end()) return;
    work = std::move(it->second);
    pending_work.erase(it);
  }
  for (auto& item : work) item(true);
}

void drain_all() {
  std::vector<const void*> busy;
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    for (const auto& entry : pending_work) busy.push_back(entry.first);
  }
  for (const void* stream : busy) drain(static_cast<cudaStream_t>(const_cast<void*>(stream)));
}

bool valid_stream(cudaStream_t stream) {
  return stream == nullptr || streams.count(stream) != 0;
}

}  // namespace

namespace runtime {

cudaError_t begin_launch(const void* kernel, bool shape_ok, cudaStream_t stream) {
  if (const cudaError_t f = device_fault(false)) return f;
  drain(stream);
  std::lock_guard<std::mutex> lock(state_mutex);
  if (!shape_ok) return fail(cudaErrorInvalidConfiguration);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  ++launches[kernel];
  ++total_launches;
  return cudaSuccess;
}

void record_fault() {
  fault = cudaErrorLaunchFailure;
}

std::map<const void*, size_t> launches_so_far() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return launches;
}

}  // namespace runtime

bool device_range(const void* pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_mutex);
  return in_device_memory(pointer, bytes);
}

bool device_range_written(const void* pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_mutex);
  const Allocation* a = allocation_of(pointer, bytes);
  return a != nullptr && (a->written || total_launches > a->launches_before);
}

void mark_device_range_written(const void* pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_mutex);
  mark_written(pointer, bytes);
}

void fail_allocation(size_t n) {
  std::lock_guard<std::mutex> lock(state_mutex);
  failing_allocation = n;
}

Transfers transfers_so_far() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return transfers;
}

size_t live_allocations() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return allocations.size();
}

size_t live_streams() {
  std::lock_guard<std::mutex> lock(state_mutex);
  return streams.size();
}

void enqueue_pending(cudaStream_t stream, std::function<bool(bool wait)> work) {
  std::lock_guard<std::mutex> lock(state_mutex);
  if (!valid_stream(stream)) throw EmulatorError("work enqueued on a stream that does not exist");
  pending_work[stream].push_back(std::move(work));
}

}  // namespace mvibr::emulated

using namespace mvibr::emulated;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *properties = {};
  std::snprintf(properties->name, sizeof properties->name, "emulated CUDA device");
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = 1;
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  properties->totalGlobalMem = size_t(16) << 30;
  properties->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  *pointer = nullptr;
  if (const cudaError_t f = device_fault(false)) return f;
  if (bytes == 0) return cudaSuccess;
  // 256-byte aligned as cudaMalloc's; a block of its own, which AddressSanitizer guards.
  std::lock_guard<std::mutex> lock(state_mutex);
  if (failing_allocation != 0 && --failing_allocation == 0) return fail(cudaErrorMemoryAllocation);
  // Exactly `bytes`: under AddressSanitizer the block's redzone starts at its end.
  void* memory = nullptr;
  if (posix_memalign(&memory, 256, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  allocations[reinterpret_cast<uintptr_t>(memory)] = {bytes, total_launches, false};
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  if (const cudaError_t f = device_fault(true)) return f;
  std::lock_guard<std::mutex> lock(state_mutex);
  const auto it = allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == allocations.end()) return fail(cudaErrorInvalidDevicePointer);
  allocations.erase(it);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  *pointer = std::malloc(bytes == 0 ? 1 : bytes);
  return *pointer ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t f = device_fault(false)) return f;
  if (bytes == 0) return cudaSuccess;
  drain(stream);
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
    const bool to_device = in_device_memory(destination, bytes);
    const bool from_device = in_device_memory(source, bytes);
    bool ok = false;
    switch (kind) {
      case cudaMemcpyHostToHost:
        ok = true;
        break;
      case cudaMemcpyHostToDevice:
        ok = to_device;
        break;
      case cudaMemcpyDeviceToHost:
        ok = from_device;
        break;
      case cudaMemcpyDeviceToDevice:
        ok = to_device && from_device;
        break;
      case cudaMemcpyDefault:
        ok = true;
        break;
      default:
        return fail(cudaErrorInvalidMemcpyDirection);
    }
    if (!ok) return fail(cudaErrorInvalidValue);
    mark_written(destination, bytes);
    if (to_device && !from_device) transfers.host_to_device += bytes;
    if (from_device && !to_device) transfers.device_to_host += bytes;
  }
  std::memmove(destination, source, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t f = device_fault(true)) return f;
  return cudaMemcpyAsync(destination, source, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* destination, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t f = device_fault(false)) return f;
  if (bytes == 0) return cudaSuccess;
  drain(stream);
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (!in_device_memory(destination, bytes)) return fail(cudaErrorInvalidValue);
    mark_written(destination, bytes);
  }
  std::memset(destination, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* destination, int value, size_t bytes) {
  return cudaMemsetAsync(destination, value, bytes, nullptr);
}

cudaError_t cudaDeviceSynchronize() {
  drain_all();
  return device_fault(true);
}

// Clears the fault, so that a test can go on after provoking one (on a GPU the process would
// have to end); memory and streams stay.
cudaError_t cudaDeviceReset() {
  fault = last_error = cudaSuccess;
  fault_seen = false;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  std::lock_guard<std::mutex> lock(state_mutex);
  *stream = reinterpret_cast<cudaStream_t>(new char);
  streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream != nullptr) drain(stream);
  std::lock_guard<std::mutex> lock(state_mutex);
  if (stream == nullptr || streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  drain(stream);
  if (const cudaError_t f = device_fault(true)) return f;
  std::lock_guard<std::mutex> lock(state_mutex);
  return valid_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

// Not ready while work enqueued by enqueue_pending is; everything else ran when issued.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t f = device_fault(true)) return f;
  std::lock_guard<std::mutex> lock(state_mutex);
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  const auto it = pending_work.find(stream);
  if (it == pending_work.end()) return cudaSuccess;
  auto& work = it->second;
  while (!work.empty() && work.front()(false)) work.erase(work.begin());
  if (!work.empty()) return cudaErrorNotReady;
  pending_work.erase(it);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, 0);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  std::lock_guard<std::mutex> lock(state_mutex);
  *event = reinterpret_cast<cudaEvent_t>(new char);
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(state_mutex);
  if (events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  drain(stream);
  std::lock_guard<std::mutex> lock(state_mutex);
  return events.count(event) && valid_stream(stream) ? cudaSuccess
                                                     : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (const cudaError_t f = device_fault(true)) return f;
  std::lock_guard<std::mutex> lock(state_mutex);
  return events.count(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return cudaEventSynchronize(event);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  std::lock_guard<std::mutex> lock(state_mutex);
  return events.count(event) && valid_stream(stream) ? cudaSuccess
                                                     : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::mutex> lock(state_mutex);
  if (!events.count(start) || !events.count(end)) return fail(cudaErrorInvalidResourceHandle);
  *milliseconds = 0;  // work runs when issued: no device time passes between events
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  if (const cudaError_t f = device_fault(false)) return f;  // sticky: not cleared
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  if (const cudaError_t f = device_fault(false)) return f;
  return last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "an unknown CUDA error";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    default:
      return cudaGetErrorName(error);
  }
}
