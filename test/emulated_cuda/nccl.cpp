// The emulated NCCL over MPI (see nccl.h).
#include "nccl.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cublas_v2.h"  // round_to_bfloat16
#include "status_text.h"

struct ncclComm {
  int rank = 0, size = 1;
  MPI_Comm mpi = MPI_COMM_NULL;  // null for one rank
  // Set by ncclCommAbort; shared with the collectives still in flight.
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
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

// A collective over MPI in flight: its own copy of what it sends and the buffer MPI fills, so
// that neither depends on the caller's memory once the communicator is aborted.
struct InFlight {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> sent, received;
  std::function<void(const std::vector<char>&)> finish;  // writes the result
  std::shared_ptr<std::atomic<bool>> aborted;
};

// Collectives abandoned by ncclCommAbort whose peers may never come: MPI may still write into
// their buffers, so they live until the process ends.
void abandon(std::shared_ptr<InFlight> operation) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<InFlight>> abandoned;
  std::lock_guard<std::mutex> lock(mutex);
  abandoned.push_back(std::move(operation));
}

// Issues on `stream` the collective that `post` starts (non-blocking MPI from `sent` into
// `received`); `finish` writes its result once every peer has joined, in stream order, as an NCCL
// collective on a GPU stream completes when its peers join.
ncclResult_t issue(ncclComm_t comm, cudaStream_t stream, const void* send, size_t send_bytes,
                   size_t receive_bytes,
                   const std::function<int(const void*, void*, MPI_Request*)>& post,
                   std::function<void(const std::vector<char>&)> finish) {
  if (send_bytes > size_t(INT32_MAX)) return ncclInvalidArgument;
  auto operation = std::make_shared<InFlight>();
  operation->sent.assign(static_cast<const char*>(send),
                         static_cast<const char*>(send) + send_bytes);
  operation->received.resize(receive_bytes);
  operation->finish = std::move(finish);
  operation->aborted = comm->aborted;
  if (post(operation->sent.data(), operation->received.data(), &operation->request) !=
      MPI_SUCCESS) {
    return ncclSystemError;
  }
  mvibr::emulated::enqueue_pending(stream, [operation](bool wait) {
    if (*operation->aborted) {
      abandon(operation);
      return true;
    }
    int done = 0;
    if (wait) {
      MPI_Wait(&operation->request, MPI_STATUS_IGNORE);
      done = 1;
    } else {
      MPI_Test(&operation->request, &done, MPI_STATUS_IGNORE);
    }
    if (done) operation->finish(operation->received);
    return done != 0;
  });
  return ncclSuccess;
}

// One rank's collective: its own `bytes` from `send` go straight to `finish`.
ncclResult_t finish_at_once(const void* send, size_t bytes,
                            const std::function<void(const std::vector<char>&)>& finish) {
  const char* data = static_cast<const char*>(send);
  finish(std::vector<char>(data, data + bytes));
  return ncclSuccess;
}

// Every rank's `bytes` from `send`, rank by rank, to `finish`: at once for one rank, else in
// flight on `stream`.
ncclResult_t gather(ncclComm_t comm, cudaStream_t stream, const void* send, size_t bytes,
                    std::function<void(const std::vector<char>&)> finish) {
  if (comm->size == 1) return finish_at_once(send, bytes, finish);
  MPI_Comm mpi = comm->mpi;
  return issue(
      comm, stream, send, bytes, bytes * size_t(comm->size),
      [bytes, mpi](const void* sent, void* received, MPI_Request* request) {
        return MPI_Iallgather(sent, int(bytes), MPI_BYTE, received, int(bytes), MPI_BYTE, mpi,
                              request);
      },
      std::move(finish));
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

// A send buffer must hold data: reading device memory nothing has written is an error here (on a
// GPU it sends garbage, which compute-sanitizer's initcheck reports).
bool written(const void* pointer, size_t bytes) {
  if (bytes == 0 || mvibr::emulated::device_range_written(pointer, bytes)) return true;
  std::fprintf(stderr,
               "emulated NCCL: a collective sends %zu bytes of device memory that nothing "
               "has written\n",
               bytes);
  return false;
}

}  // namespace

namespace {
std::atomic<int> live_communicators{0};
}  // namespace

int mvibr::emulated::live_nccl_communicators() {
  return live_communicators;
}

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = 0;
  return ncclSuccess;
}

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
  ++live_communicators;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  --live_communicators;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  *comm->aborted = true;  // collectives in flight end, their streams drain
  delete comm;
  --live_communicators;  // no collective with peers that may be gone: the MPI communicator is
                         // dropped
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  static const std::pair<ncclResult_t, const char*> texts[] = {
      {ncclSuccess, "no error"},
      {ncclUnhandledCudaError, "unhandled cuda error"},
      {ncclSystemError, "unhandled system error"},
      {ncclInternalError, "internal error"},
      {ncclInvalidArgument, "invalid argument"},
      {ncclInvalidUsage, "invalid usage"},
      {ncclRemoteError, "remote process exited or there was a network error"},
      {ncclInProgress, "NCCL operation in progress"},
  };
  return mvibr::emulated::status_text(result, texts, "unknown result code");
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || !valid(comm, send, bytes) || !valid(comm, receive, bytes) ||
      (type == ncclBfloat16 && op != ncclSum)) {  // bf16 sums: what mvibr sends in bf16
    return ncclInvalidArgument;
  }
  if (!written(send, bytes)) return ncclInvalidUsage;
  mvibr::emulated::mark_device_range_written(receive, bytes);
  const int ranks = comm->size;
  return gather(comm, stream, send, bytes, [=](const std::vector<char>& all) {
    switch (type) {
      case ncclFloat32:
        reduce(all, count, ranks, op, static_cast<float*>(receive));
        break;
      case ncclFloat64:
        reduce(all, count, ranks, op, static_cast<double*>(receive));
        break;
      case ncclInt32:
        reduce(all, count, ranks, op, static_cast<int32_t*>(receive));
        break;
      case ncclBfloat16: {
        const uint16_t* values = reinterpret_cast<const uint16_t*>(all.data());
        uint16_t* out = static_cast<uint16_t*>(receive);
        for (size_t i = 0; i < count; ++i) {
          uint16_t sum = values[i];
          for (int r = 1; r < ranks; ++r) {
            sum = float_to_bf16(bf16_to_float(sum) + bf16_to_float(values[size_t(r) * count + i]));
          }
          out[i] = sum;
        }
        break;
      }
      default:
        break;
    }
  });
}

ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || comm == nullptr || root < 0 || root >= comm->size ||
      !valid(comm, receive, bytes) || (comm->rank == root && !valid(comm, send, bytes))) {
    return ncclInvalidArgument;
  }
  const bool sends = comm->rank == root;
  if (bytes > size_t(INT32_MAX)) return ncclInvalidArgument;
  if (sends && !written(send, bytes)) return ncclInvalidUsage;
  mvibr::emulated::mark_device_range_written(receive, bytes);
  const auto deliver = [receive](const std::vector<char>& data) {
    std::memcpy(receive, data.data(), data.size());
  };
  if (comm->size == 1) return finish_at_once(send, bytes, deliver);
  MPI_Comm mpi = comm->mpi;
  return issue(
      comm, stream, sends ? send : nullptr, sends ? bytes : 0, bytes,
      [=](const void* sent, void* received, MPI_Request* request) {
        if (sends) std::memcpy(received, sent, bytes);
        return MPI_Ibcast(received, int(bytes), MPI_BYTE, root, mpi, request);
      },
      deliver);
}

ncclResult_t ncclAllGather(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(type);
  if (type_bytes(type) == 0 || !valid(comm, send, bytes) ||
      !valid(comm, receive, bytes * size_t(comm->size))) {
    return ncclInvalidArgument;
  }
  if (!written(send, bytes)) return ncclInvalidUsage;
  mvibr::emulated::mark_device_range_written(receive, bytes * size_t(comm->size));
  return gather(comm, stream, send, bytes, [receive](const std::vector<char>& all) {
    std::memcpy(receive, all.data(), all.size());
  });
}
