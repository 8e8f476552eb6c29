// NCCL collectives behind the Communicator interface (see dist/nccl_communicator.h). Every call
// is enqueued on the communicator's own stream and waited for by polling both the stream and
// ncclCommGetAsyncError: a blocking cudaStreamSynchronize would hang forever on a dead peer,
// while the poll turns an NCCL failure into ncclCommAbort and an exception.
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "check.h"
#include "mvibr/core/device.h"
#include "mvibr/dist/nccl_communicator.h"

namespace mvibr::dist {

namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  throw RuntimeFailure(std::string(call) + " failed: " + ncclGetErrorString(result));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device)
      : rank_(bootstrap.rank()), size_(bootstrap.size()), device_(device) {
    MVIBR_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap.broadcast(&id, sizeof(id), 0);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    MVIBR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MVIBR_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
  }
  ~NcclCommunicator() override {
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    bind_device();
    check_nccl(ncclAllReduce(data, data, count, ncclFloat32, nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    wait("ncclAllReduce");
  }
  void all_reduce(double* data, size_t count, ReduceOp op) override {
    bind_device();
    check_nccl(ncclAllReduce(data, data, count, ncclFloat64, nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    wait("ncclAllReduce");
  }
  void all_reduce_bf16_sum(uint16_t* data, size_t count) override {
    bind_device();
    check_nccl(ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm_, stream_),
               "ncclAllReduce (bfloat16)");
    wait("ncclAllReduce (bfloat16)");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    bind_device();
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
    wait("ncclBroadcast");
  }
  void all_gather(const void* send, size_t bytes, void* receive) override {
    bind_device();
    check_nccl(ncclAllGather(send, receive, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
    wait("ncclAllGather");
  }
  void barrier() override { all_reduce(scratch_, 1, ReduceOp::kSum); }

 private:
  // The calling thread's current device is per thread: the gradient buckets' worker thread calls
  // in too, and the device this communicator's stream lives on must be current for the launch.
  void bind_device() { MVIBR_CUDA_CHECK(cudaSetDevice(device_)); }

  // Until the stream has drained: NCCL errors (a peer gone, a network failure) abort.
  void wait(const char* call) {
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) MVIBR_CUDA_CHECK(status);
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw RuntimeFailure(std::string(call) + " failed on rank " + std::to_string(rank_) + ": " +
                             ncclGetErrorString(async) + "; NCCL communicator aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
};

}  // namespace

int select_device(const Topology& topology) {
  const int devices = cuda_device_count();
  if (devices == 0) return -1;
  const int device = topology.local_rank % devices;
  MVIBR_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  if (device < 0 || device >= cuda_device_count()) {
    throw RuntimeFailure("NCCL needs a CUDA device; rank " + std::to_string(bootstrap.rank()) +
                         " has device " + std::to_string(device) + " of " +
                         std::to_string(cuda_device_count()));
  }
  return std::make_unique<NcclCommunicator>(bootstrap, device);
}

}  // namespace mvibr::dist
