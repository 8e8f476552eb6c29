// FlushSubnormals (core/subnormals.h): MXCSR's FTZ and DAZ bits on this thread and the OpenMP
// pool's.
#include "mvibr/core/subnormals.h"

#include <omp.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace mvibr {
namespace {

#if defined(__SSE2__)
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)
unsigned mode() {
  return _mm_getcsr();
}
void set_mode(unsigned value) {
  _mm_setcsr(value);
}
#else
constexpr unsigned kFlushBits = 0;
unsigned mode() {
  return 0;
}
void set_mode(unsigned) {}
#endif

}  // namespace

// The pool's threads read their modes before any is set: a thread the region starts takes the
// mode of the thread that starts it.
FlushSubnormals::FlushSubnormals() : caller_mode_(mode()) {
  pool_modes_.assign(size_t(omp_get_max_threads()), 0);
#pragma omp parallel num_threads(int(pool_modes_.size()))
  {
    const unsigned own = mode();
    pool_modes_[size_t(omp_get_thread_num())] = own;
#pragma omp barrier
    set_mode(own | kFlushBits);
  }
  set_mode(caller_mode_ | kFlushBits);
}

FlushSubnormals::~FlushSubnormals() {
#pragma omp parallel num_threads(int(pool_modes_.size()))
  set_mode(pool_modes_[size_t(omp_get_thread_num())]);
  set_mode(caller_mode_);
}

}  // namespace mvibr
