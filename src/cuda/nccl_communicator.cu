// NCCL collectives behind the Communicator interface (see dist/nccl_communicator.h).
// - Every call is enqueued on the communicator's own stream and waited for by polling the stream
//   and ncclCommGetAsyncError (a blocking cudaStreamSynchronize would hang on a dead peer).
// - The wait is bounded by the timeout: past it, or on an NCCL error, the communicator is aborted
//   (ncclCommAbort) and the call throws, naming what it waited for; the rank's error handler then
//   ends the job (MPI_Abort). abort() does the same from the watchdog's thread.
// - After an abort every call throws: no collective is issued on a null communicator.
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "check.h"
#include "mvibr/core/device.h"
#include "mvibr/dist/nccl_communicator.h"
#include "nccl_check.h"

namespace mvibr::dist {

namespace {

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
  NcclCommunicator(Communicator& bootstrap, int device, double timeout_seconds)
      : rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        device_(device),
        timeout_(timeout_seconds) {
    try {
      MVIBR_CUDA_CHECK(cudaSetDevice(device_));
      ncclUniqueId id{};
      if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bootstrap.broadcast(&id, sizeof(id), 0);
      check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
      MVIBR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      MVIBR_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
      MVIBR_CUDA_CHECK(cudaMemset(scratch_, 0, sizeof(float)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    run("ncclAllReduce", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclFloat32, nccl_op(op), comm, stream_);
    });
  }
  void all_reduce(double* data, size_t count, ReduceOp op) override {
    run("ncclAllReduce (float64)", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclFloat64, nccl_op(op), comm, stream_);
    });
  }
  void all_reduce_bf16_sum(uint16_t* data, size_t count) override {
    run("ncclAllReduce (bfloat16)", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm, stream_);
    });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    run("ncclBroadcast", [&](ncclComm_t comm) {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream_);
    });
  }
  void all_gather(const void* send, size_t bytes, void* receive) override {
    run("ncclAllGather", [&](ncclComm_t comm) {
      return ncclAllGather(send, receive, bytes, ncclUint8, comm, stream_);
    });
  }
  void barrier() override { all_reduce(scratch_, 1, ReduceOp::kSum); }

  // From any thread (the watchdog's): waits at most a second for a call in progress to let go.
  void abort() override {
    std::unique_lock<std::timed_mutex> lock(mutex_, std::chrono::seconds(1));
    if (!lock.owns_lock()) {
      std::fprintf(stderr, "rank %d: an NCCL call holds the communicator; not aborted\n", rank_);
      return;
    }
    abort_held();
  }

 private:
  // Issues `collective` on the live communicator and waits for it: see the file's note.
  template <typename Collective>
  void run(const char* call, const Collective& collective) {
    std::unique_lock<std::timed_mutex> lock(mutex_);
    if (comm_ == nullptr) {
      throw RuntimeFailure(std::string(call) + " on rank " + std::to_string(rank_) +
                           ": the NCCL communicator was aborted");
    }
    // The calling thread's current device is per thread (the gradient buckets' worker calls in
    // too): this communicator's device must be current for the launch.
    MVIBR_CUDA_CHECK(cudaSetDevice(device_));
    check_nccl(collective(comm_), call);
    wait(call, lock);
  }

  // Polls with `lock` held, letting go of it between polls so that abort() can come in.
  void wait(const char* call, std::unique_lock<std::timed_mutex>& lock) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) MVIBR_CUDA_CHECK(status);
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_held();
        fail(call, std::string("failed: ") + ncclGetErrorString(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort_held();
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%g", timeout_.count());
        fail(call, std::string("has not completed after ") + seconds +
                       " s: another rank has failed or stalls");
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
      if (comm_ == nullptr) fail(call, "was given up by the watchdog");
    }
  }

  [[noreturn]] void fail(const char* call, const std::string& what) const {
    throw RuntimeFailure(std::string(call) + " on rank " + std::to_string(rank_) + " " + what +
                         "; NCCL communicator aborted");
  }

  void abort_held() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  void release() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    stream_ = nullptr;
    scratch_ = nullptr;
    comm_ = nullptr;
  }

  int rank_, size_, device_;
  std::chrono::duration<double> timeout_;
  std::timed_mutex mutex_;  // one call at a time; abort() from another thread
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;  // barrier()'s value, zeroed once
};

}  // namespace

int select_device(const Topology& topology) {
  const int devices = cuda_device_count();
  if (devices == 0) return -1;
  const int device = topology.local_rank % devices;
  MVIBR_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     double timeout_seconds) {
  if (device < 0 || device >= cuda_device_count()) {
    throw RuntimeFailure("NCCL needs a CUDA device; rank " + std::to_string(bootstrap.rank()) +
                         " has device " + std::to_string(device) + " of " +
                         std::to_string(cuda_device_count()));
  }
  if (!(timeout_seconds > 0)) throw InvalidArgument("NCCL timeout must be > 0 seconds");
  return std::make_unique<NcclCommunicator>(bootstrap, device, timeout_seconds);
}

}  // namespace mvibr::dist
