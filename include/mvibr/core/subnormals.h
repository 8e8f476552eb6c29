// Flushing subnormal floats to zero on the CPU, as torch.set_flush_denormal(True) does.
// - Arithmetic on subnormals (|x| < 1.2e-38) takes microcode assists, 30-150x slower: the pose
//   model's sharpened heatmaps give gradients that small, and oneDNN's and OpenBLAS's kernels
//   then crawl (the head's 1x1 backward 2.8 ms a call instead of 0.4).
// - x86's MXCSR FTZ (results) and DAZ (inputs) bits; the mode is per thread, so the guard sets it
//   on the calling thread and on each thread of the OpenMP pool (oneDNN's too), whose new
//   threads inherit it, and gives every one back its own mode when it ends.
// - Elsewhere than x86 it changes nothing.
#pragma once

#include <vector>

namespace mvibr {

class FlushSubnormals {
 public:
  FlushSubnormals();
  ~FlushSubnormals();
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned caller_mode_ = 0;
  std::vector<unsigned> pool_modes_;  // by OpenMP thread number
};

}  // namespace mvibr
