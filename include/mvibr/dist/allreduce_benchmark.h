// All-reduce bandwidth as nccl-tests reports it, for any Communicator: for each message size,
// the mean time of an in-place float sum over `iterations` after `warmup`, algbw = bytes / time
// and busbw = algbw x 2 (n - 1) / n (the bandwidth each link must sustain in a ring, comparable
// across rank counts). Each result is checked: every rank fills its buffer from its rank and
// the element index, and the sum must be exact (small integers in float).
#pragma once

#include <cstddef>
#include <vector>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

struct AllReduceResult {
  size_t bytes = 0;
  double seconds = 0;    // mean per all-reduce, slowest rank
  double algbw_gbs = 0;  // bytes / seconds / 1e9
  double busbw_gbs = 0;  // algbw x 2 (n - 1) / n
  size_t wrong = 0;      // elements whose sum was not exact, on any rank
};

// Sizes from min_bytes to max_bytes, doubling (each rounded down to whole floats, at least one).
// `comm` is measured; `control` (host memory, the same ranks: MPI) gathers times and checks.
// With `device_memory` the buffer is in device memory, as NCCL needs.
std::vector<AllReduceResult> benchmark_all_reduce(Communicator& comm, Communicator& control,
                                                  size_t min_bytes, size_t max_bytes, int warmup,
                                                  int iterations, bool device_memory);

}  // namespace mvibr::dist
