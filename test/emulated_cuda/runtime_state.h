// What the emulated runtime (runtime.cpp) and its block scheduler (emulator.cpp) share.
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>

#include "cuda_runtime.h"

namespace mvibr::emulated {

// A misuse of the emulated device that no CUDA error code describes.
struct EmulatorError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace runtime {

// Before a launch on `stream`: the sticky fault if any, the stream's pending work drained (stream
// order), then the shape and the stream checked, and the launch counted (coverage; device memory
// counts as written by it). An error is also the last error.
cudaError_t begin_launch(const void* kernel, bool shape_ok, cudaStream_t stream);
// A kernel faulted: the next call that waits for the device returns cudaErrorLaunchFailure.
void record_fault();
// Launches so far, by kernel.
std::map<const void*, size_t> launches_so_far();

}  // namespace runtime
}  // namespace mvibr::emulated
