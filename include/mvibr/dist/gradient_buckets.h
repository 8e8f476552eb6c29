// Gradient all-reduce overlapped with the backward pass, as PyTorch DDP does it: the flat
// gradient buffer is cut into buckets (bucket_mb each, in the order the backward pass finishes
// them), and a bucket is all-reduced as soon as every gradient in it is final, on a worker thread,
// while the backward pass goes on with the layers before it. finish() waits for the rest.
//
// Why a thread and not MPI_Iallreduce alone: Open MPI progresses a non-blocking collective only
// inside MPI calls, and the backward pass makes none, so the reduction would happen in the final
// wait anyway. A thread blocked in MPI_Allreduce is the progress engine. Every rank must mark the
// same ranges in the same order, so buckets start in the same order everywhere (collectives
// match by order).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

struct GradientRange {
  size_t offset = 0, count = 0;  // values [offset, offset + count) of the flat buffer
};

class GradientBuckets {
 public:
  // `ready_order`: disjoint ranges of the gradient buffer in the order the backward pass makes
  // them final; each is cut from its end downwards (a network's backward finishes its last layer
  // first) into buckets of at most `bucket_bytes`. Gradients outside every range are never
  // reduced. With `overlap` false (or one rank) buckets are reduced in mark_ready's caller.
  // With `bf16`, each bucket travels as bfloat16 (half the bytes; sums rounded to 8 significant
  // bits) and comes back as float; `op` must then be kSum.
  GradientBuckets(Communicator& comm, std::vector<GradientRange> ready_order, size_t bucket_bytes,
                  ReduceOp op, bool overlap, bool bf16 = false);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Starts a backward pass over `grads` (which must stay alive until finish() returns).
  void begin(float* grads);
  // The gradients [offset, offset + count) are final: every bucket this completes is reduced.
  // Throws InvalidArgument when the range was already marked in this pass.
  void mark_ready(size_t offset, size_t count);
  // Waits until every bucket has been reduced; rethrows the worker's error. Throws
  // InvalidArgument when a bucket was never completed (a range left unmarked).
  void finish();

  const std::vector<GradientRange>& buckets() const { return buckets_; }
  // Of the last pass: seconds spent in all-reduce, and the part of it finish() waited for (the
  // rest was hidden behind the backward pass).
  double communication_seconds() const { return communication_seconds_; }
  double exposed_seconds() const { return exposed_seconds_; }

 private:
  void reduce(size_t bucket);
  void worker_loop();

  Communicator& comm_;
  ReduceOp op_;
  bool bf16_;
  std::vector<uint16_t> bf16_buffer_;  // one bucket in bfloat16 (reduce() runs one at a time)
  std::vector<GradientRange> buckets_;
  std::vector<size_t> remaining_;      // values of each bucket not yet marked ready in this pass
  std::vector<GradientRange> marked_;  // the ranges marked ready in this pass
  float* grads_ = nullptr;
  size_t launched_ = 0, reduced_ = 0;
  double communication_seconds_ = 0, exposed_seconds_ = 0;

  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  std::deque<size_t> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace mvibr::dist
