// Bucketed, overlapped gradient all-reduce (see gradient_buckets.h).
#include "mvibr/dist/gradient_buckets.h"

#include <algorithm>
#include <chrono>

#include "mvibr/core/error.h"
#include "mvibr/core/stopwatch.h"

namespace mvibr::dist {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<GradientRange> ready_order,
                                 size_t bucket_bytes, ReduceOp op, bool overlap, bool bf16)
    : comm_(comm), op_(op), bf16_(bf16) {
  if (bf16 && op != ReduceOp::kSum) throw InvalidArgument("bfloat16 all-reduce only sums");
  const size_t per_bucket = std::max<size_t>(1, bucket_bytes / sizeof(float));
  for (const GradientRange& range : ready_order) {
    size_t end = range.offset + range.count;
    while (end > range.offset) {
      const size_t begin = end - std::min(per_bucket, end - range.offset);
      buckets_.push_back({begin, end - begin});
      end = begin;
    }
  }
  remaining_.resize(buckets_.size());
  if (bf16_) {
    size_t largest = 0;
    for (const GradientRange& b : buckets_) largest = std::max(largest, b.count);
    bf16_buffer_.resize(largest);
  }
  if (overlap && comm_.size() > 1) worker_ = std::thread([this] { worker_loop(); });
}

GradientBuckets::~GradientBuckets() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

void GradientBuckets::begin(float* grads) {
  grads_ = grads;
  for (size_t b = 0; b < buckets_.size(); ++b) remaining_[b] = buckets_[b].count;
  marked_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  launched_ = reduced_ = 0;
  communication_seconds_ = exposed_seconds_ = 0;
  error_ = nullptr;
}

void GradientBuckets::reduce(size_t bucket) {
  const auto start = std::chrono::steady_clock::now();
  float* values = grads_ + buckets_[bucket].offset;
  const size_t count = buckets_[bucket].count;
  if (bf16_) {
    for (size_t i = 0; i < count; ++i) bf16_buffer_[i] = to_bf16(values[i]);
    comm_.all_reduce_bf16_sum(bf16_buffer_.data(), count);
    for (size_t i = 0; i < count; ++i) values[i] = from_bf16(bf16_buffer_[i]);
  } else {
    comm_.all_reduce(values, count, op_);
  }
  communication_seconds_ += seconds_since(start);
}

void GradientBuckets::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const size_t bucket = queue_.front();
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      reduce(bucket);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    ++reduced_;
    work_done_.notify_all();
  }
}

void GradientBuckets::mark_ready(size_t offset, size_t count) {
  const size_t end = offset + count;
  for (const GradientRange& earlier : marked_) {
    if (offset < earlier.offset + earlier.count && earlier.offset < end) {
      throw InvalidArgument("gradients [" + std::to_string(offset) + ", " + std::to_string(end) +
                            ") marked ready twice in one backward pass");
    }
  }
  marked_.push_back({offset, count});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const size_t lo = std::max(offset, buckets_[b].offset);
    const size_t hi = std::min(end, buckets_[b].offset + buckets_[b].count);
    if (lo >= hi) continue;
    remaining_[b] -= hi - lo;
    if (remaining_[b] > 0) continue;
    if (!worker_.joinable()) {
      reduce(b);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(b);
      ++launched_;
    }
    work_ready_.notify_one();
  }
}

void GradientBuckets::finish() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (remaining_[b] != 0) {
      throw InvalidArgument("gradient bucket [" + std::to_string(buckets_[b].offset) + ", " +
                            std::to_string(buckets_[b].offset + buckets_[b].count) +
                            ") was never marked ready");
    }
  }
  if (!worker_.joinable()) {
    exposed_seconds_ = communication_seconds_;  // reduced in the caller: nothing was hidden
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return reduced_ == launched_; });
  exposed_seconds_ = seconds_since(start);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace mvibr::dist
