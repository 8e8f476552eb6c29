// One math, two launchers: functions marked MVIBR_HD compile as __host__ __device__ under nvcc
// and as plain inline functions in a host-only build, so the CPU backend runs the exact code
// the CUDA kernels run.
#pragma once

#if defined(__CUDACC__)
#define MVIBR_HD __host__ __device__ inline
#else
#define MVIBR_HD inline
#endif
