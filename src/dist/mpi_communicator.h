// The MPI implementation of Communicator, for host buffers (private to src/dist: other layers see
// the interface and MpiSession::world()).
#pragma once

#include <mpi.h>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Works on a duplicate of `comm`, so its messages never match another library's.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void all_reduce_bf16_sum(uint16_t* data, size_t count) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_gather(const void* send, size_t bytes, void* receive) override;
  void barrier() override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace mvibr::dist
