// The collectives data-parallel training needs, behind one interface with two implementations:
// MPI for host buffers (the CPU backend, and the small control messages of every run) and NCCL
// for device buffers. Every rank must call the same collectives in the same order; a call blocks
// until the collective is complete on this rank. Errors are RuntimeFailure naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mvibr::dist {

enum class ReduceOp { kSum, kAverage, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"

  // In place, over every rank's `count` values.
  virtual void all_reduce(float* data, size_t count, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t count, ReduceOp op) = 0;
  // bfloat16 values (the upper half of a float's bits), summed; each addition rounds to nearest
  // even in bfloat16. Half the bytes of a float all-reduce, as DDP's bf16 compression hook.
  virtual void all_reduce_bf16_sum(uint16_t* data, size_t count) = 0;
  // `bytes` of root's `data` into every rank's `data`.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `bytes` of `send`, by rank, into `receive` (size() * bytes).
  virtual void all_gather(const void* send, size_t bytes, void* receive) = 0;
  virtual void barrier() = 0;
  // Gives up what is in flight so that the job can end, from any thread (NCCL: ncclCommAbort);
  // every later call throws. MPI's collectives end with MPI_Abort: nothing to do for them.
  virtual void abort() {}
};

// float <-> bfloat16, rounding to nearest even (NaN stays NaN).
uint16_t to_bf16(float value);
float from_bf16(uint16_t value);

// A job of one rank without MPI: every collective leaves the data as it is (all_gather copies).
// What `mvibr train` uses in tests and libraries that run one process.
std::unique_ptr<Communicator> single_process_communicator();

// Typed helpers over the byte-level calls.
template <typename T>
std::vector<T> all_gather_value(Communicator& comm, const T& value) {
  std::vector<T> values(size_t(comm.size()));
  comm.all_gather(&value, sizeof(T), values.data());
  return values;
}

// Root's string on every rank (its length first, then its bytes).
std::string broadcast_string(Communicator& comm, const std::string& text, int root);

// Every rank's string, by rank, on every rank.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text);

}  // namespace mvibr::dist
