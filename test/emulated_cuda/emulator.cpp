// The emulated CUDA device's block scheduler (see cuda_runtime.h): a launch runs its blocks one
// after another, each block's threads as fibers; the runtime API is in runtime.cpp.
#include "cuda_runtime.h"
#include "runtime_state.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

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
// Processes exit together (ctest -j, MPI ranks), so the report goes out in one write() on an
// O_APPEND descriptor: stdio would split it at its buffer size and interleave the lines.
struct CoverageAtExit {
  ~CoverageAtExit() {
    const char* file = std::getenv("MVIBR_EMULATED_COVERAGE");
    const std::map<const void*, size_t> launches = runtime::launches_so_far();
    if (file == nullptr || *file == '\0' || launches.empty()) return;
    std::string report;
    for (const auto& [kernel, count] : launches) {
      Dl_info info{};
      if (dladdr(kernel, &info) == 0) continue;
      const uintptr_t offset =
          reinterpret_cast<uintptr_t>(kernel) - reinterpret_cast<uintptr_t>(info.dli_fbase);
      char number[64];
      std::snprintf(number, sizeof number, "%zu ", count);
      report += number;
      report += info.dli_fname;
      std::snprintf(number, sizeof number, " 0x%zx ", size_t(offset));
      report += number;
      report += info.dli_sname ? info.dli_sname : "-";
      report += '\n';
    }
    const int out = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (out < 0) return;
    if (write(out, report.data(), report.size()) != ssize_t(report.size()))
      std::fprintf(stderr, "emulator: coverage report to %s cut short\n", file);
    close(out);
  }
} coverage_at_exit;

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
  const size_t threads = size_t(block_dim.x) * block_dim.y * block_dim.z;
  const bool shape_ok = grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 0x7fffffffu &&
                        grid.y <= 65535 && grid.z <= 65535 && threads >= 1 && threads <= 1024 &&
                        block_dim.z <= 64 && shared_bytes <= 48 * 1024;
  if (const cudaError_t error = runtime::begin_launch(kernel, shape_ok, stream)) return error;
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
    runtime::record_fault();  // seen by the next call that waits for the device
    return cudaSuccess;
  }
  in_kernel = false;
  current_block = nullptr;
  return cudaSuccess;
}

std::vector<LaunchCount> launch_counts() {
  std::vector<LaunchCount> counts;
  for (const auto& [kernel, count] : runtime::launches_so_far()) counts.push_back({kernel, count});
  return counts;
}

}  // namespace mvibr::emulated
