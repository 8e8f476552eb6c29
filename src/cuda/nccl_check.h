// NCCL results as exceptions: one check for every NCCL call of the communicator.
#pragma once

#include <nccl.h>

#include <string>

#include "mvibr/core/error.h"

namespace mvibr::dist {

// mvibr's communicators are blocking (the default ncclConfig): ncclInProgress, which only a
// non-blocking communicator may return, is an error here like any other result but success.
inline void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  throw RuntimeFailure(std::string(call) + " failed: " + ncclGetErrorString(result) +
                       (result == ncclInProgress ? " (on a blocking communicator)" : ""));
}

}  // namespace mvibr::dist
