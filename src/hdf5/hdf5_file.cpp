// HDF5 RAII and helpers (see hdf5_file.h).
#include "mvibr/hdf5/hdf5_file.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "mvibr/core/error.h"

namespace mvibr::h5 {

void silence_errors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::recursive_mutex& library_lock() {
  static std::recursive_mutex lock;
  return lock;
}

Handle& Handle::operator=(Handle&& other) noexcept {
  std::swap(id_, other.id_);
  std::swap(close_, other.close_);
  return *this;
}

Handle::~Handle() {
  if (id_ >= 0 && close_) close_(id_);
}

void File::fail(const std::string& what) const {
  throw InvalidArgument(path_ + ": " + what);
}

File File::create(const std::string& path) {
  silence_errors();
  // The 1.8+ file format checksums its metadata (superblock v2+, object headers v2), so a
  // corrupt header fails with an error instead of being parsed.
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  if (id < 0) throw InvalidArgument(path + ": cannot create HDF5 file");
  return File(path, Handle(id, H5Fclose));
}

File File::open_read_only(const std::string& path) {
  silence_errors();
  if (::access(path.c_str(), R_OK) != 0) throw InvalidArgument(path + ": cannot read the file");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw InvalidArgument(path + ": not an HDF5 file (truncated or corrupt?)");
  }
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw InvalidArgument(path + ": cannot open as HDF5");
  return File(path, Handle(id, H5Fclose));
}

void File::create_group(const std::string& name) {
  Handle group(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!group.valid()) fail("cannot create group " + name);
}

bool File::has(const std::string& name) const {
  return H5Lexists(id(), name.c_str(), H5P_DEFAULT) > 0;
}

void File::set_attribute(const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(
      H5Acreate2(id(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const std::string stored = value.empty() ? std::string(1, '\0') : value;
  if (!attribute.valid() || H5Awrite(attribute.get(), type.get(), stored.data()) < 0) {
    fail("cannot write attribute " + name);
  }
}

namespace {

void write_scalar_attribute(const File& file, const std::string& name, hid_t file_type,
                            hid_t memory_type, const void* value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(
      H5Acreate2(file.id(), name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, value) < 0) {
    file.fail("cannot write attribute " + name);
  }
}

// Opens a one-element numeric attribute of the given class, or fails naming it.
Handle open_number_attribute(const File& file, const std::string& name, H5T_class_t type_class,
                             const char* what) {
  if (H5Aexists(file.id(), name.c_str()) <= 0) file.fail("missing attribute '" + name + "'");
  Handle attribute(H5Aopen(file.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  if (H5Tget_class(type.get()) != type_class || H5Sget_simple_extent_npoints(space.get()) != 1) {
    file.fail("attribute '" + name + "' is not one " + what);
  }
  return attribute;
}

}  // namespace

void File::set_attribute(const std::string& name, long long value) {
  write_scalar_attribute(*this, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &value);
}
void File::set_attribute(const std::string& name, uint64_t value) {
  write_scalar_attribute(*this, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}
void File::set_attribute(const std::string& name, double value) {
  write_scalar_attribute(*this, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

bool File::has_attribute(const std::string& name) const {
  return H5Aexists(id(), name.c_str()) > 0;
}

std::string File::string_attribute(const std::string& name) const {
  if (H5Aexists(id(), name.c_str()) <= 0) fail("missing attribute '" + name + "'");
  Handle attribute(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) {
    fail("attribute '" + name + "' is not a fixed-length string");
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1u << 20)) fail("attribute '" + name + "' has an absurd size");
  std::string value(size, '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) {
    fail("cannot read attribute '" + name + "'");
  }
  value.resize(value.find('\0') == std::string::npos ? size : value.find('\0'));
  return value;
}

long long File::integer_attribute(const std::string& name) const {
  const Handle attribute = open_number_attribute(*this, name, H5T_INTEGER, "integer");
  long long value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_LLONG, &value) < 0) {
    fail("cannot read attribute '" + name + "'");
  }
  return value;
}

uint64_t File::unsigned_attribute(const std::string& name) const {
  const Handle attribute = open_number_attribute(*this, name, H5T_INTEGER, "integer");
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_sign(type.get()) != H5T_SGN_NONE) {
    // HDF5 would clamp a negative value to 0 on conversion; read it signed and refuse it.
    const long long value = integer_attribute(name);
    if (value < 0) fail("attribute '" + name + "' is negative: " + std::to_string(value));
    return uint64_t(value);
  }
  uint64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value) < 0) {
    fail("cannot read attribute '" + name + "'");
  }
  return value;
}

double File::double_attribute(const std::string& name) const {
  const Handle attribute = open_number_attribute(*this, name, H5T_FLOAT, "number");
  double value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    fail("cannot read attribute '" + name + "'");
  }
  return value;
}

namespace {

void write_dataset(const File& file, const std::string& name, const std::vector<hsize_t>& shape,
                   hid_t file_type, hid_t memory_type, const void* data, bool checksummed = false) {
  Handle space(H5Screate_simple(int(shape.size()), shape.data(), nullptr), H5Sclose);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  hsize_t count = 1;
  for (hsize_t d : shape) count *= d;
  // Filters need a chunked layout: the whole dataset as one chunk (an empty one has no data).
  if (checksummed && count > 0 && !shape.empty()) {
    H5Pset_chunk(properties.get(), int(shape.size()), shape.data());
    H5Pset_fletcher32(properties.get());
  }
  Handle dataset(H5Dcreate2(file.id(), name.c_str(), file_type, space.get(), H5P_DEFAULT,
                            properties.get(), H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.valid() ||
      H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    file.fail("cannot write dataset " + name);
  }
}

std::string describe_shape(const std::vector<hsize_t>& shape) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ")";
  return out.str();
}

}  // namespace

void File::write(const std::string& name, const std::vector<hsize_t>& shape, const double* data) {
  write_dataset(*this, name, shape, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data);
}
void File::write(const std::string& name, const std::vector<hsize_t>& shape, const int* data) {
  write_dataset(*this, name, shape, H5T_STD_I32LE, H5T_NATIVE_INT, data);
}
void File::write(const std::string& name, const std::vector<hsize_t>& shape,
                 const signed char* data) {
  write_dataset(*this, name, shape, H5T_STD_I8LE, H5T_NATIVE_SCHAR, data);
}

void File::write(const std::string& name, const std::vector<hsize_t>& shape, const float* data) {
  write_dataset(*this, name, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, true);
}
void File::write(const std::string& name, const std::vector<hsize_t>& shape, const uint64_t* data) {
  write_dataset(*this, name, shape, H5T_STD_U64LE, H5T_NATIVE_UINT64, data, true);
}

// Fixed-length strings: variable-length ones live in HDF5's global heap, which the file format
// does not checksum, and a damaged heap makes the library itself read out of bounds.
void File::write_strings(const std::string& name, const std::vector<std::string>& values) {
  size_t longest = 1;
  for (const std::string& v : values) longest = std::max(longest, v.size());
  std::string packed(values.size() * longest, '\0');
  for (size_t i = 0; i < values.size(); ++i) values[i].copy(&packed[i * longest], longest);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), longest);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  write_dataset(*this, name, {hsize_t(values.size())}, type.get(), type.get(), packed.data());
}

std::vector<std::string> File::members(const std::string& group) const {
  if (!has(group)) fail("missing group '" + group + "'");
  Handle handle(H5Gopen2(id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  H5G_info_t info;
  if (!handle.valid() || H5Gget_info(handle.get(), &info) < 0) {
    fail("'" + group + "' is not a readable group");
  }
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(handle.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i,
                                            nullptr, 0, H5P_DEFAULT);
    if (size < 0) fail("cannot list group '" + group + "'");
    std::string name(size_t(size) + 1, '\0');
    H5Lget_name_by_idx(handle.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(size_t(size));
    names.push_back(name);
  }
  return names;
}

int File::rank(const std::string& name) const {
  if (!has(name)) fail("missing dataset '" + name + "'");
  Handle dataset(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) fail("'" + name + "' is not a dataset");
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 8) fail("dataset '" + name + "' has rank " + std::to_string(rank));
  return rank;
}

std::vector<hsize_t> File::shape(const std::string& name,
                                 const std::vector<long long>& expected) const {
  if (!has(name)) fail("missing dataset '" + name + "'");
  Handle dataset(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank != int(expected.size())) {
    fail("dataset '" + name + "' has rank " + std::to_string(rank) + ", expected " +
         std::to_string(expected.size()));
  }
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (int i = 0; i < rank; ++i) {
    if (expected[i] >= 0 && dims[i] != hsize_t(expected[i])) {
      std::vector<hsize_t> want;
      for (long long e : expected) want.push_back(e < 0 ? 0 : hsize_t(e));
      fail("dataset '" + name + "' has shape " + describe_shape(dims) + ", expected " +
           describe_shape(want) + " (0 = any)");
    }
  }
  return dims;
}

template <typename T>
std::vector<T> File::read_numbers(const std::string& name, const std::vector<long long>& expected,
                                  hid_t memory_type, bool any_number_type) const {
  for (long long e : expected) {
    if (e < 0) fail("internal: reading '" + name + "' needs a fully known shape");
  }
  shape(name, expected);
  size_t count = 1;
  for (long long e : expected) count *= size_t(e);
  Handle dataset(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  const bool floating = H5Tget_class(memory_type) == H5T_FLOAT;
  const bool number = type_class == H5T_FLOAT || type_class == H5T_INTEGER;
  if (any_number_type
          ? !number
          : (floating && type_class != H5T_FLOAT) || (!floating && type_class != H5T_INTEGER)) {
    fail("dataset '" + name + "' has the wrong element type");
  }
  // HDF5 would clamp negative values to 0 when reading signed data as unsigned.
  if (!floating && H5Tget_sign(memory_type) == H5T_SGN_NONE &&
      H5Tget_sign(type.get()) != H5T_SGN_NONE) {
    fail("dataset '" + name + "' is signed, expected unsigned integers");
  }
  std::vector<T> values(count);
  if (count &&
      H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    fail("cannot read dataset '" + name + "' (corrupt or truncated)");
  }
  return values;
}

std::vector<double> File::read_doubles(const std::string& name,
                                       const std::vector<long long>& expected) const {
  return read_numbers<double>(name, expected, H5T_NATIVE_DOUBLE);
}
std::vector<double> File::read_numbers_as_doubles(const std::string& name,
                                                  const std::vector<long long>& expected) const {
  return read_numbers<double>(name, expected, H5T_NATIVE_DOUBLE, true);
}
std::vector<float> File::read_floats(const std::string& name,
                                     const std::vector<long long>& expected) const {
  return read_numbers<float>(name, expected, H5T_NATIVE_FLOAT);
}
std::vector<int> File::read_ints(const std::string& name,
                                 const std::vector<long long>& expected) const {
  return read_numbers<int>(name, expected, H5T_NATIVE_INT);
}
std::vector<uint64_t> File::read_uint64s(const std::string& name,
                                         const std::vector<long long>& expected) const {
  return read_numbers<uint64_t>(name, expected, H5T_NATIVE_UINT64);
}
std::vector<signed char> File::read_bytes(const std::string& name,
                                          const std::vector<long long>& expected) const {
  return read_numbers<signed char>(name, expected, H5T_NATIVE_SCHAR);
}

std::vector<std::string> File::read_strings(const std::string& name,
                                            long long expected_count) const {
  shape(name, {expected_count});
  Handle dataset(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0) {
    fail("dataset '" + name + "' is not fixed-length strings");
  }
  const size_t length = H5Tget_size(type.get());
  if (length == 0 || length > 4096) fail("dataset '" + name + "' has strings of absurd length");
  std::string packed(size_t(expected_count) * length, '\0');
  if (expected_count &&
      H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()) < 0) {
    fail("cannot read dataset '" + name + "' (corrupt or truncated)");
  }
  std::vector<std::string> values;
  for (long long i = 0; i < expected_count; ++i) {
    const std::string padded = packed.substr(size_t(i) * length, length);
    values.push_back(padded.substr(0, padded.find('\0')));
  }
  return values;
}

void File::flush() const {
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail("cannot flush");
}

namespace {

hid_t file_type(RecordType type) {
  return type == RecordType::kUInt8 ? H5T_STD_U8LE : H5T_IEEE_F32LE;
}
hid_t memory_type(RecordType type) {
  return type == RecordType::kUInt8 ? H5T_NATIVE_UCHAR : H5T_NATIVE_FLOAT;
}

}  // namespace

RecordDataset RecordDataset::create(const File& file, const std::string& name, hsize_t count,
                                    const std::vector<hsize_t>& record, RecordType type,
                                    int gzip_level) {
  std::vector<hsize_t> dims{count}, chunk{1};
  dims.insert(dims.end(), record.begin(), record.end());
  chunk.insert(chunk.end(), record.begin(), record.end());
  Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (count > 0) {
    H5Pset_chunk(properties.get(), int(chunk.size()), chunk.data());
    H5Pset_fletcher32(properties.get());
    if (gzip_level > 0) H5Pset_deflate(properties.get(), unsigned(gzip_level));
  }
  Handle dataset(H5Dcreate2(file.id(), name.c_str(), file_type(type), space.get(), H5P_DEFAULT,
                            properties.get(), H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.valid()) file.fail("cannot create dataset " + name);
  return RecordDataset(file, name, std::move(dataset), count, record, type);
}

RecordDataset RecordDataset::open(const File& file, const std::string& name, hsize_t count,
                                  const std::vector<hsize_t>& record, RecordType type) {
  std::vector<long long> expected{(long long)count};
  for (const hsize_t extent : record) expected.push_back((long long)extent);
  file.shape(name, expected);
  Handle dataset(H5Dopen2(file.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  Handle stored(H5Dget_type(dataset.get()), H5Tclose);
  const bool matches =
      type == RecordType::kUInt8
          ? H5Tget_class(stored.get()) == H5T_INTEGER && H5Tget_size(stored.get()) == 1
          : H5Tget_class(stored.get()) == H5T_FLOAT && H5Tget_size(stored.get()) == 4;
  if (!matches) {
    file.fail("dataset '" + name + "' is not " +
              (type == RecordType::kUInt8 ? "uint8" : "float32"));
  }
  return RecordDataset(file, name, std::move(dataset), count, record, type);
}

void RecordDataset::transfer(hsize_t index, RecordType type, void* data, bool write) const {
  if (type != type_) file_->fail("dataset '" + name_ + "' holds another element type");
  if (index >= count_)
    file_->fail("record " + std::to_string(index) + " of " + name_ + " is out of range");
  std::vector<hsize_t> start(record_.size() + 1, 0), size{1};
  start[0] = index;
  size.insert(size.end(), record_.begin(), record_.end());
  Handle file_space(H5Dget_space(dataset_.get()), H5Sclose);
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, size.data(),
                      nullptr);
  Handle memory(H5Screate_simple(int(size.size()), size.data(), nullptr), H5Sclose);
  const herr_t status = write ? H5Dwrite(dataset_.get(), memory_type(type), memory.get(),
                                         file_space.get(), H5P_DEFAULT, data)
                              : H5Dread(dataset_.get(), memory_type(type), memory.get(),
                                        file_space.get(), H5P_DEFAULT, data);
  if (status < 0) {
    file_->fail(write ? "cannot write record " + std::to_string(index) + " of " + name_
                      : "record " + std::to_string(index) + " of " + name_ +
                            " failed to read: checksum mismatch or corrupt chunk");
  }
}

}  // namespace mvibr::h5
