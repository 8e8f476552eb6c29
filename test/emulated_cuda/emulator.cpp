// The emulated CUDA device (see cuda_runtime.h): the block scheduler, device memory and the
// runtime API.
#include "cuda_runtime.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define MVIBR_EMULATED_ASAN 1
// LeakSanitizer: HDF5 keeps some allocations to the end; everything else is checked.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libhdf5_openmpi.so\n";
}
#endif

namespace mvibr::emulated {
namespace {

constexpr unsigned kWarp = 32;
constexpr size_t kStackBytes = 256 * 1024;

struct EmulatorError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class State { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

namespace fcontext = boost::context::detail;  // Boost.Context's switch: no system call

struct Fiber {
  fcontext::fcontext_t context = nullptr;  // where it resumes
  ThreadPlace place;
  State state = State::kRunnable;
  unsigned warp_mask = 0;  // the lanes a warp barrier waits for
  uint64_t slot = 0;       // what this lane publishes in an exchange
  std::exception_ptr error;
};

struct Block {
  std::vector<Fiber> fibers;
  fcontext::fcontext_t scheduler = nullptr;  // where a fiber yields to
  const std::function<void()>* body = nullptr;
  bool fibered = false;  // false: threads run directly, and must not synchronize
  bool yielded = false;  // some fiber met a barrier or an exchange
  Fiber* running = nullptr;
};

thread_local Block* current_block = nullptr;
thread_local ThreadPlace direct_place;
thread_local bool in_kernel = false;
thread_local std::vector<std::unique_ptr<char[]>> stacks;  // reused across launches
// The scheduler's stack (the launching thread's), for AddressSanitizer's fiber switches.
thread_local const void* scheduler_stack = nullptr;
thread_local size_t scheduler_stack_bytes = 0;

cudaError_t last_error = cudaSuccess;
// A kernel that faulted: as on a GPU its launch succeeds, the next call that waits for the device
// sees the fault, and from then on every call does (sticky) until cudaDeviceReset.
cudaError_t fault = cudaSuccess;
bool fault_seen = false;
std::map<const void*, size_t> launches;
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
std::set<const void*> streams, events;
// Work issued on a stream that completes later (see enqueue_pending), by stream.
std::map<const void*, std::vector<std::function<bool(bool)>>> pending_work;
std::mutex state_mutex;  // the runtime's tables; kernels run on the launching thread

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

// Switches to `to`, whose stack is [stack, stack + bytes) (null: the scheduler's); returns what
// switched back. `finished`: the side that leaves never runs again (ASan drops its fake stack).
fcontext::transfer_t jump(fcontext::fcontext_t to, const void* stack, size_t bytes,
                          bool finished = false) {
#if MVIBR_EMULATED_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, stack, bytes);
  const fcontext::transfer_t back = fcontext::jump_fcontext(to, nullptr);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
  return back;
#else
  (void)stack;
  (void)bytes;
  (void)finished;
  return fcontext::jump_fcontext(to, nullptr);
#endif
}

// A fiber's first frame: runs the kernel body as the block's running thread, then returns to
// the scheduler for good.
void fiber_entry(fcontext::transfer_t from) {
#if MVIBR_EMULATED_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack, &scheduler_stack_bytes);
#endif
  Block& block = *current_block;
  block.scheduler = from.fctx;
  Fiber& fiber = *block.running;
  try {
    (*block.body)();
  } catch (...) {
    fiber.error = std::current_exception();
  }
  fiber.state = State::kDone;
  jump(block.scheduler, scheduler_stack, scheduler_stack_bytes, true);
}

// From a fiber back to its block's scheduler, waiting in `state`.
void yield(State state) {
  Block& block = *current_block;
  Fiber& fiber = *block.running;
  fiber.state = state;
  block.yielded = true;
  block.scheduler = jump(block.scheduler, scheduler_stack, scheduler_stack_bytes).fctx;
}

Fiber& running_fiber(const char* what) {
  if (!in_kernel) throw EmulatorError(std::string(what) + " called outside a kernel");
  Block& block = *current_block;
  if (!block.fibered) {
    throw EmulatorError(std::string(what) + " reached by thread " +
                        std::to_string(direct_place.thread.x) +
                        " of a block whose thread 0 met none: a divergent barrier");
  }
  return *block.running;
}

size_t linear_thread(const ThreadPlace& p) {
  return p.thread.x + size_t(p.block_dim.x) * (p.thread.y + size_t(p.block_dim.y) * p.thread.z);
}

// Readies `fiber` to start the kernel body on `stack`, returning to the scheduler at its end.
void prepare(Fiber& fiber, char* stack) {
  fiber.context = fcontext::make_fcontext(stack + kStackBytes, kStackBytes, fiber_entry);
}

void resume(Block& block, Fiber& fiber, char* stack) {
  block.running = &fiber;
  fiber.context = jump(fiber.context, stack, kStackBytes).fctx;
  block.running = nullptr;
}

// Runs a block's threads as fibers until all are done; a barrier nobody can leave is an error.
void run_fibered(Block& block, size_t first_done) {
  const size_t n = block.fibers.size();
  while (stacks.size() < n) stacks.emplace_back(new char[kStackBytes]);
  for (size_t i = first_done; i < n; ++i) prepare(block.fibers[i], stacks[i].get());
  for (;;) {
    bool ran = false;
    for (size_t i = 0; i < n; ++i) {
      Fiber& fiber = block.fibers[i];
      if (fiber.state != State::kRunnable) continue;
      ran = true;
      resume(block, fiber, stacks[i].get());
      if (fiber.error) std::rethrow_exception(fiber.error);
    }
    if (ran) continue;
    // Nobody can run: release a warp whose waiting lanes have all arrived, else the block.
    bool released = false, all_done = true, all_at_block = true;
    for (size_t w = 0; w * kWarp < n; ++w) {
      const size_t end = std::min(n, (w + 1) * kWarp);
      unsigned waited = 0, arrived = 0, live = 0;
      for (size_t i = w * kWarp; i < end; ++i) {
        const Fiber& f = block.fibers[i];
        const unsigned bit = 1u << (i - w * kWarp);
        if (f.state != State::kDone) live |= bit;
        if (f.state == State::kAtWarpBarrier) {
          arrived |= bit;
          waited |= f.warp_mask;
        }
      }
      if (arrived != 0 && (waited & live & ~arrived) == 0) {
        for (size_t i = w * kWarp; i < end; ++i) {
          if (block.fibers[i].state == State::kAtWarpBarrier) {
            block.fibers[i].state = State::kRunnable;
          }
        }
        released = true;
      }
    }
    if (released) continue;
    for (const Fiber& f : block.fibers) {
      all_done = all_done && f.state == State::kDone;
      all_at_block = all_at_block && (f.state == State::kDone || f.state == State::kAtBlockBarrier);
    }
    if (all_done) return;
    if (all_at_block) {
      for (Fiber& f : block.fibers) {
        if (f.state == State::kAtBlockBarrier) f.state = State::kRunnable;
      }
      continue;
    }
    size_t at_block = 0, at_warp = 0;
    for (const Fiber& f : block.fibers) {
      at_block += f.state == State::kAtBlockBarrier;
      at_warp += f.state == State::kAtWarpBarrier;
    }
    throw EmulatorError("deadlock: " + std::to_string(at_block) + " thread(s) wait at " +
                        "__syncthreads and " + std::to_string(at_warp) +
                        " at a warp exchange that the others never reach");
  }
}

void run_block(Block& block, const dim3& grid, const dim3& dim, const uint3& block_index) {
  const size_t n = size_t(dim.x) * dim.y * dim.z;
  block.fibers.resize(n);
  size_t i = 0;
  for (unsigned z = 0; z < dim.z; ++z) {
    for (unsigned y = 0; y < dim.y; ++y) {
      for (unsigned x = 0; x < dim.x; ++x, ++i) {
        Fiber& fiber = block.fibers[i];
        fiber.place = {{x, y, z}, block_index, dim, grid};
        fiber.state = State::kRunnable;
        fiber.error = nullptr;
        fiber.warp_mask = 0;
      }
    }
  }
  // Thread 0 in a fiber: when it meets no barrier, the others need none either.
  block.fibered = true;
  block.yielded = false;
  while (stacks.empty()) stacks.emplace_back(new char[kStackBytes]);
  {
    Fiber& first = block.fibers[0];
    prepare(first, stacks[0].get());
    resume(block, first, stacks[0].get());
    if (first.error) std::rethrow_exception(first.error);
  }
  if (block.yielded) {
    run_fibered(block, 1);
    return;
  }
  block.fibered = false;
  for (size_t t = 1; t < n; ++t) {
    direct_place = block.fibers[t].place;
    (*block.body)();
  }
}

std::string kernel_name(const void* kernel) {
  Dl_info info{};
  if (dladdr(kernel, &info) == 0 || info.dli_sname == nullptr) {
    char text[32];
    std::snprintf(text, sizeof text, "kernel@%p", kernel);
    return text;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

// MVIBR_EMULATED_COVERAGE=FILE: every kernel launched by this process and how often, appended
// at exit, one line each: "count module offset name" (name "-" for a kernel of internal
// linkage, which test/emulated_cuda/kernel_coverage.py names from the module's symbol table).
struct CoverageAtExit {
  ~CoverageAtExit() {
    const char* file = std::getenv("MVIBR_EMULATED_COVERAGE");
    if (file == nullptr || *file == '\0' || launches.empty()) return;
    if (FILE* out = std::fopen(file, "a")) {
      for (const auto& [kernel, count] : launches) {
        Dl_info info{};
        if (dladdr(kernel, &info) == 0) continue;
        const uintptr_t offset =
            reinterpret_cast<uintptr_t>(kernel) - reinterpret_cast<uintptr_t>(info.dli_fbase);
        std::fprintf(out, "%zu %s 0x%zx %s\n", count, info.dli_fname, size_t(offset),
                     info.dli_sname ? info.dli_sname : "-");
      }
      std::fclose(out);
    }
  }
} coverage_at_exit;

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

const ThreadPlace& place() {
  if (!in_kernel) throw EmulatorError("threadIdx read outside a kernel");
  Block& block = *current_block;
  return block.fibered ? block.running->place : direct_place;
}

void sync_block() {
  running_fiber("__syncthreads");
  yield(State::kAtBlockBarrier);
}

void sync_warp(unsigned mask) {
  Fiber& fiber = running_fiber("a warp barrier");
  fiber.warp_mask = mask;
  yield(State::kAtWarpBarrier);
}

uint64_t exchange(uint64_t mine, int source_lane, unsigned mask) {
  Fiber& fiber = running_fiber("__shfl_*_sync");
  fiber.slot = mine;
  const size_t self = linear_thread(fiber.place);
  const size_t warp_start = self - self % kWarp;
  sync_warp(mask);
  const size_t source = warp_start + size_t(source_lane);
  Block& block = *current_block;
  if (source_lane < 0 || source_lane >= int(kWarp) || source >= block.fibers.size() ||
      !(mask >> source_lane & 1u)) {
    throw EmulatorError("a shuffle reads lane " + std::to_string(source_lane) +
                        ", outside the warp or its mask");
  }
  const uint64_t value = block.fibers[source].slot;
  sync_warp(mask);  // nobody publishes again before every lane has read
  return value;
}

unsigned ballot(bool predicate, unsigned mask) {
  Fiber& fiber = running_fiber("__ballot_sync");
  fiber.slot = predicate ? 1 : 0;
  const size_t self = linear_thread(fiber.place);
  const size_t warp_start = self - self % kWarp;
  sync_warp(mask);
  Block& block = *current_block;
  unsigned bits = 0;
  for (unsigned lane = 0; lane < kWarp && warp_start + lane < block.fibers.size(); ++lane) {
    if ((mask >> lane & 1u) && block.fibers[warp_start + lane].slot != 0) bits |= 1u << lane;
  }
  sync_warp(mask);
  return bits;
}

cudaError_t launch(const void* kernel, dim3 grid, dim3 block_dim, size_t shared_bytes,
                   cudaStream_t stream, const std::function<void()>& body) {
  if (const cudaError_t f = device_fault(false)) return f;
  const size_t threads = size_t(block_dim.x) * block_dim.y * block_dim.z;
  const bool shape_ok = grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 0x7fffffffu &&
                        grid.y <= 65535 && grid.z <= 65535 && threads >= 1 && threads <= 1024 &&
                        block_dim.z <= 64 && shared_bytes <= 48 * 1024;
  drain(stream);
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (!shape_ok) return fail(cudaErrorInvalidConfiguration);
    if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
    ++launches[kernel];
    ++total_launches;
  }
  if (in_kernel) throw EmulatorError("a launch from inside a kernel (dynamic parallelism)");
  Block block;
  block.body = &body;
  current_block = &block;
  in_kernel = true;
  try {
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) run_block(block, grid, block_dim, {x, y, z});
      }
    }
  } catch (const std::exception& e) {
    in_kernel = false;
    current_block = nullptr;
    std::fprintf(stderr, "emulated CUDA: kernel %s failed: %s\n", kernel_name(kernel).c_str(),
                 e.what());
    fault = cudaErrorLaunchFailure;  // seen by the next call that waits for the device
    return cudaSuccess;
  }
  in_kernel = false;
  current_block = nullptr;
  return cudaSuccess;
}

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

std::vector<LaunchCount> launch_counts() {
  std::lock_guard<std::mutex> lock(state_mutex);
  std::vector<LaunchCount> counts;
  for (const auto& [kernel, count] : launches) counts.push_back({kernel, count});
  return counts;
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
