// When a layer's element-wise loop is worth an OpenMP team: large, and not already inside a
// parallel region (a network that parallelises over chunks of its batch calls layers serially).
#pragma once

#include <omp.h>

#include <cstddef>

namespace mvibr::nn {

inline bool worth_parallel(size_t elements) {
  return elements >= (size_t(1) << 16) && !omp_in_parallel();
}

}  // namespace mvibr::nn
