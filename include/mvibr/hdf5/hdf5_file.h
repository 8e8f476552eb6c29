// Thin RAII over the HDF5 C API for the scene and shard files: handles that close themselves,
// typed attribute and dataset helpers, and errors that name the file and the object instead of
// HDF5's error-stack dump. HDF5 is not thread-safe: one thread per process makes these calls.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mvibr::h5 {

// Turns HDF5's automatic error printing off (we report our own one-line errors).
void silence_errors();

// Debian's parallel HDF5 is not thread-safe, and a training process calls it from its reader's
// I/O thread and from the thread that writes checkpoints: every entry point of the data layer
// that touches HDF5 holds this process-wide lock.
std::recursive_mutex& library_lock();
using LibraryGuard = std::lock_guard<std::recursive_mutex>;

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  ~Handle();
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// A file opened or created by path; every error message starts with the path.
class File {
 public:
  static File create(const std::string& path);
  static File open_read_only(const std::string& path);

  const std::string& path() const { return path_; }
  hid_t id() const { return file_.get(); }
  [[noreturn]] void fail(const std::string& what) const;

  void create_group(const std::string& name);
  bool has(const std::string& name) const;

  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, long long value);
  void set_attribute(const std::string& name, uint64_t value);
  void set_attribute(const std::string& name, double value);
  std::string string_attribute(const std::string& name) const;
  bool has_attribute(const std::string& name) const;
  long long integer_attribute(const std::string& name) const;
  // A non-negative integer attribute of any integer type (a negative one is an error).
  uint64_t unsigned_attribute(const std::string& name) const;
  double double_attribute(const std::string& name) const;

  // Whole datasets of doubles, 32-bit ints or 8-bit ints, with their shape.
  void write(const std::string& name, const std::vector<hsize_t>& shape, const double* data);
  void write(const std::string& name, const std::vector<hsize_t>& shape, const int* data);
  void write(const std::string& name, const std::vector<hsize_t>& shape, const signed char* data);
  // Float32 and uint64 datasets (checkpoints) are one Fletcher32-checksummed chunk each, so a
  // flipped bit in their data fails the read instead of loading a wrong weight.
  void write(const std::string& name, const std::vector<hsize_t>& shape, const float* data);
  void write(const std::string& name, const std::vector<hsize_t>& shape, const uint64_t* data);
  void write_strings(const std::string& name, const std::vector<std::string>& values);
  // The names of a group's members, in name order.
  std::vector<std::string> members(const std::string& group) const;
  // The number of dimensions of a dataset (at most 8, else a failure).
  int rank(const std::string& name) const;
  // The shape of a dataset, checked against `expected` (-1 matches any extent) before anything
  // is read or allocated.
  std::vector<hsize_t> shape(const std::string& name, const std::vector<long long>& expected) const;
  std::vector<double> read_doubles(const std::string& name,
                                   const std::vector<long long>& expected) const;
  std::vector<float> read_floats(const std::string& name,
                                 const std::vector<long long>& expected) const;
  // A dataset of any integer or floating-point type as doubles (files that others wrote: numpy's
  // int64 indices, MATLAB's doubles), its shape checked as above.
  std::vector<double> read_numbers_as_doubles(const std::string& name,
                                              const std::vector<long long>& expected) const;
  std::vector<int> read_ints(const std::string& name, const std::vector<long long>& expected) const;
  std::vector<uint64_t> read_uint64s(const std::string& name,
                                     const std::vector<long long>& expected) const;
  std::vector<signed char> read_bytes(const std::string& name,
                                      const std::vector<long long>& expected) const;
  std::vector<std::string> read_strings(const std::string& name, long long expected_count) const;

  void flush() const;

 private:
  File(std::string path, Handle file) : path_(std::move(path)), file_(std::move(file)) {}
  template <typename T>
  std::vector<T> read_numbers(const std::string& name, const std::vector<long long>& expected,
                              hid_t memory_type, bool any_number_type = false) const;

  std::string path_;
  Handle file_;
};

enum class RecordType { kUInt8, kFloat32 };

// A dataset of `count` equal records, [count, record...] (a shard's frames [H, W, 3] uint8, its
// flows [6, H, W, 2] float32): one record per chunk, each chunk Fletcher32-checksummed (a flipped
// bit fails the read) and optionally gzip-compressed, read and written a record at a time.
class RecordDataset {
 public:
  static RecordDataset create(const File& file, const std::string& name, hsize_t count,
                              const std::vector<hsize_t>& record, RecordType type, int gzip_level);
  // Opens and checks the shape and element type against the expected ones before reading.
  static RecordDataset open(const File& file, const std::string& name, hsize_t count,
                            const std::vector<hsize_t>& record, RecordType type);

  // The pointer's type must be the dataset's.
  void write(hsize_t index, const uint8_t* data) const {
    transfer(index, RecordType::kUInt8, const_cast<uint8_t*>(data), true);
  }
  void write(hsize_t index, const float* data) const {
    transfer(index, RecordType::kFloat32, const_cast<float*>(data), true);
  }
  void read(hsize_t index, uint8_t* data) const {
    transfer(index, RecordType::kUInt8, data, false);
  }
  void read(hsize_t index, float* data) const {
    transfer(index, RecordType::kFloat32, data, false);
  }

 private:
  RecordDataset(const File& file, std::string name, Handle dataset, hsize_t count,
                std::vector<hsize_t> record, RecordType type)
      : file_(&file),
        name_(std::move(name)),
        dataset_(std::move(dataset)),
        count_(count),
        record_(std::move(record)),
        type_(type) {}
  void transfer(hsize_t index, RecordType type, void* data, bool write) const;

  const File* file_;
  std::string name_;
  Handle dataset_;
  hsize_t count_;
  std::vector<hsize_t> record_;
  RecordType type_;
};

}  // namespace mvibr::h5
