// The emulated NCCL (see cuda_runtime.h): the calls mvibr makes, carried over MPI between the
// processes of an mpirun (a one-rank communicator needs no MPI). ncclCommInitRank splits
// MPI_COMM_WORLD by the unique id, so every rank must call it, as NCCL requires.
// - A collective is posted as non-blocking MPI and completes on its stream when the peers join,
//   as on a GPU: cudaStreamQuery says cudaErrorNotReady until then (so a stalled peer is seen
//   as a wait, not a hang in the call); ncclCommAbort abandons what is in flight.
// - Operands are checked: device memory, and a send buffer something has written.
// - Sums and averages add in rank order, bfloat16 rounding after each addition as a reduction
//   in that type does.
#pragma once

#include "cuda_runtime.h"

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};
enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

struct ncclUniqueId {
  char internal[128];
};
struct ncclComm;
using ncclComm_t = ncclComm*;

// The emulation reports version 0, as the emulated cuDNN does.
ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream);

namespace mvibr::emulated {
// Communicators made and not yet destroyed or aborted (tests count leaks with it).
int live_nccl_communicators();
}  // namespace mvibr::emulated
