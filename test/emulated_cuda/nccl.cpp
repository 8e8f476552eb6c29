// The emulated NCCL over MPI (see nccl.h).
#include "nccl.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cublas_v2.h"  // round_to_bfloat16

struct ncclComm {
  int rank = 0, size = 1;
  MPI_Comm mpi = MPI_COMM_NULL;  // null for one rank
};

namespace {

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclFloat32:
      return 4;
    case ncclFloat64:
      return 8;
  }
  return 0;
}

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

uint16_t float_to_bf16(float value) {
  value = mvibr::emulated::round_to_bfloat16(value);
  uint32_t wide;
  std::memcpy(&wide, &value, 4);
  return uint16_t(wide >> 16);
}

// Every rank's `bytes` from `send`, rank by rank, into `all`.
ncclResult_t gather(ncclComm_t comm, const void* send, size_t bytes, void* all) {
  if (comm->size == 1) {
    std::memmove(all, send, bytes);
    return ncclSuccess;
  }
  if (bytes > size_t(INT32_MAX)) return ncclInvalidArgument;
  return MPI_Allgather(send, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, comm->mpi) ==
                 MPI_SUCCESS
             ? ncclSuccess
             : ncclSystemError;
}

template <typename T>
void reduce(const std::vector<char>& all, size_t count, int ranks, ncclRedOp_t op, T* out) {
  const T* values = reinterpret_cast<const T*>(all.data());
  for (size_t i = 0; i < count; ++i) {
    T result = values[i];
    for (int r = 1; r < ranks; ++r) {
      const T v = values[size_t(r) * count + i];
      result = op == ncclMax    ? (v > result ? v : result)
               : op == ncclMin  ? (v < result ? v : result)
               : op == ncclProd ? result * v
                                : result + v;
    }
    if (op == ncclAvg) result = result / T(ranks);
    out[i] = result;
  }
}

bool valid(ncclComm_t comm, const void* pointer, size_t bytes) {
  return comm != nullptr && (bytes == 0 || mvibr::emulated::device_range(pointer, bytes));
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<unsigned> counter{0};
  std::memset(id->internal, 0, sizeof id->internal);
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  std::snprintf(id->internal, sizeof id->internal, "emulated-nccl %d %lld %u", int(getpid()),
                (long long)now, counter++);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto made = new ncclComm;
  made->rank = rank;
  made->size = nranks;
  if (nranks > 1) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      delete made;
      return ncclInvalidUsage;  // several ranks need the processes of an mpirun
    }
    // The ranks that share the id, in rank order.
    const size_t colour = std::hash<std::string>()(std::string(id.internal, sizeof id.internal));
    MPI_Comm_split(MPI_COMM_WORLD, int(colour & 0x3fffffff), rank, &made->mpi);
    int size = 0, mine = 0;
    MPI_Comm_size(made->mpi, &size);
    MPI_Comm_rank(made->mpi, &mine);
    if (size != nranks || mine != rank) {
      MPI_Comm_free(&made->mpi);
      delete made;
      return ncclInvalidUsage;
    }
  }
  *comm = made;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;  // no collective with peers that may be gone: the MPI communicator is dropped
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || !valid(comm, send, bytes) || !valid(comm, receive, bytes)) {
    return ncclInvalidArgument;
  }
  std::vector<char> all(bytes * size_t(comm->size));
  if (const ncclResult_t r = gather(comm, send, bytes, all.data()); r != ncclSuccess) return r;
  switch (type) {
    case ncclFloat32:
      reduce(all, count, comm->size, op, static_cast<float*>(receive));
      break;
    case ncclFloat64:
      reduce(all, count, comm->size, op, static_cast<double*>(receive));
      break;
    case ncclInt32:
      reduce(all, count, comm->size, op, static_cast<int32_t*>(receive));
      break;
    case ncclBfloat16: {
      if (op != ncclSum) return ncclInvalidArgument;  // what mvibr sends in bf16
      const uint16_t* values = reinterpret_cast<const uint16_t*>(all.data());
      uint16_t* out = static_cast<uint16_t*>(receive);
      for (size_t i = 0; i < count; ++i) {
        uint16_t sum = values[i];
        for (int r = 1; r < comm->size; ++r) {
          sum = float_to_bf16(bf16_to_float(sum) + bf16_to_float(values[size_t(r) * count + i]));
        }
        out[i] = sum;
      }
      break;
    }
    default:
      return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || comm == nullptr || root < 0 || root >= comm->size ||
      !valid(comm, receive, bytes) || (comm->rank == root && !valid(comm, send, bytes))) {
    return ncclInvalidArgument;
  }
  if (comm->rank == root && send != receive) std::memmove(receive, send, bytes);
  if (comm->size == 1) return ncclSuccess;
  if (bytes > size_t(INT32_MAX)) return ncclInvalidArgument;
  return MPI_Bcast(receive, int(bytes), MPI_BYTE, root, comm->mpi) == MPI_SUCCESS ? ncclSuccess
                                                                                  : ncclSystemError;
}

ncclResult_t ncclAllGather(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || !valid(comm, send, bytes) ||
      !valid(comm, receive, bytes * size_t(comm->size))) {
    return ncclInvalidArgument;
  }
  std::vector<char> all(bytes * size_t(comm->size));
  if (const ncclResult_t r = gather(comm, send, bytes, all.data()); r != ncclSuccess) return r;
  std::memcpy(receive, all.data(), all.size());
  return ncclSuccess;
}
