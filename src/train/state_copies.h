// Which copy of a model's training state (parameters, gradients, Adam's moments) is current when
// its step keeps one on a device: the host's after an edit there, the device's after a step, or
// both. Internal to the train library.
// - fetch before reading the host's copy (it stores the device's when that is newer); edit
//   before writing it; send before the device computes from its copy; stepped after it changed.
// - Without a device (null store and load) every call is free and the host's is the only copy.
#pragma once

#include <functional>
#include <utility>

namespace mvibr::train {

class StateCopies {
 public:
  StateCopies() = default;
  // store: the device's copy into the host's; load: the host's into the device's.
  StateCopies(std::function<void()> store, std::function<void()> load)
      : store_(std::move(store)), load_(std::move(load)) {}

  void fetch() {
    if (current_ != Current::kDevice) return;
    store_();
    current_ = Current::kBoth;
  }
  void edit() {
    fetch();
    current_ = Current::kHost;
  }
  void send() {
    if (!load_ || current_ != Current::kHost) return;
    load_();
    current_ = Current::kBoth;
  }
  void stepped() {
    if (load_) current_ = Current::kDevice;
  }

 private:
  enum class Current { kBoth, kHost, kDevice };
  std::function<void()> store_, load_;
  Current current_ = Current::kHost;
};

}  // namespace mvibr::train
