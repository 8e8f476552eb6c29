// The CUDA device seen from host code that is compiled without nvcc (tests, benchmarks, the
// CLI): whether the CUDA backend was built, whether a device is present, and plain device
// memory. In a build without CUDA every query says "no device" and allocation throws.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mvibr {

bool cuda_backend_built();
// Number of usable CUDA devices; 0 when the backend is not built or no driver/device exists.
int cuda_device_count();
// "NVIDIA H200 (sm_90, 141 GB, 132 SMs)" or "" when there is none.
std::string cuda_device_description(int device);

void* device_allocate(size_t bytes);
void device_free(void* pointer);  // never throws (destructors call it); reports on stderr
void copy_host_to_device(void* device_destination, const void* host_source, size_t bytes);
void copy_device_to_host(void* host_destination, const void* device_source, size_t bytes);
void copy_device_to_device(void* device_destination, const void* device_source, size_t bytes);
void device_memset_zero(void* device_destination, size_t bytes);
// Waits for all work on the device and throws RuntimeFailure on any asynchronous error.
void device_synchronize();

// An owning array in device memory, for tests, benchmarks and glue code.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count)
      : data_(static_cast<T*>(device_allocate(count * sizeof(T)))), count_(count) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    copy_host_to_device(data_, host.data(), host.size() * sizeof(T));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~DeviceArray() { device_free(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    copy_device_to_host(host.data(), data_, count_ * sizeof(T));
    return host;
  }
  void zero() { device_memset_zero(data_, count_ * sizeof(T)); }
  // At least `count` elements, for buffers reused across calls: growing waits for the device
  // (queued work may still read the old array), then replaces the array; contents are lost.
  T* reserve(size_t count) {
    if (count_ < count) {
      if (data_ != nullptr) device_synchronize();
      *this = DeviceArray(count);
    }
    return data_;
  }
  // `count` host values into the array's first elements, reserving them; returns the array.
  T* upload(const T* host, size_t count) {
    T* device = reserve(count);
    if (count) copy_host_to_device(device, host, count * sizeof(T));
    return device;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace mvibr
