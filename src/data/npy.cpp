// The .npy format (numpy/lib/format.py): magic, version, header length, a Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces, then the data.
// The dict is parsed strictly for the three keys rather than as general Python.
#include "mvibr/data/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "mvibr/core/error.h"

namespace mvibr::data {
namespace {

size_t item_size(NpyType type) {
  switch (type) {
    case NpyType::kFloat64:
    case NpyType::kInt64:
      return 8;
    case NpyType::kFloat32:
    case NpyType::kInt32:
      return 4;
    case NpyType::kUInt8:
    case NpyType::kBool:
      return 1;
  }
  return 0;
}

const char* descr(NpyType type) {
  switch (type) {
    case NpyType::kFloat64:
      return "<f8";
    case NpyType::kFloat32:
      return "<f4";
    case NpyType::kInt64:
      return "<i8";
    case NpyType::kInt32:
      return "<i4";
    case NpyType::kUInt8:
      return "|u1";
    case NpyType::kBool:
      return "|b1";
  }
  return "";
}

// The text after "'key':" in the header dict, leading spaces skipped.
size_t value_start(const std::string& header, const std::string& key, const std::string& source) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) throw InvalidArgument(source + ": npy header has no '" + key + "'");
  return header.find_first_not_of(' ', at + key.size() + 3);
}

NpyType parse_type(const std::string& header, const std::string& source) {
  const size_t start = value_start(header, "descr", source);
  const size_t end = start == std::string::npos ? start : header.find('\'', start + 1);
  if (end == std::string::npos || header[start] != '\'') {
    throw InvalidArgument(source + ": npy header 'descr' is not a quoted string");
  }
  const std::string descr = header.substr(start + 1, end - start - 1);
  if (descr == "<f8") return NpyType::kFloat64;
  if (descr == "<f4") return NpyType::kFloat32;
  if (descr == "<i8") return NpyType::kInt64;
  if (descr == "<i4") return NpyType::kInt32;
  if (descr == "|u1" || descr == "<u1") return NpyType::kUInt8;
  if (descr == "|b1") return NpyType::kBool;
  throw InvalidArgument(source + ": npy dtype '" + descr +
                        "' is not supported (little-endian f8, f4, i8, i4, u1 or b1)");
}

// Each dimension is checked against the data actually present while the product is formed,
// so an absurd shape is refused without overflow and before any allocation.
std::vector<size_t> parse_shape(const std::string& header, size_t max_count,
                                const std::string& source) {
  const size_t open = value_start(header, "shape", source);
  const size_t close = open == std::string::npos ? open : header.find(')', open);
  if (close == std::string::npos || header[open] != '(') {
    throw InvalidArgument(source + ": npy header 'shape' is not a tuple");
  }
  std::vector<size_t> shape;
  size_t count = 1;
  size_t pos = open + 1;
  while (pos < close) {
    pos = header.find_first_not_of(' ', pos);
    if (pos >= close) break;
    size_t value = 0;
    size_t digits = 0;
    for (; pos < close && header[pos] >= '0' && header[pos] <= '9'; ++pos, ++digits) {
      if (digits >= 18) throw InvalidArgument(source + ": npy shape has an absurd dimension");
      value = value * 10 + size_t(header[pos] - '0');
    }
    pos = header.find_first_not_of(' ', pos);
    if (digits == 0 || pos > close || (header[pos] != ',' && header[pos] != ')')) {
      throw InvalidArgument(source + ": npy header 'shape' is malformed");
    }
    if (header[pos] == ',') ++pos;
    shape.push_back(value);
    if (value != 0 && count > max_count / value) {
      throw InvalidArgument(source + ": npy shape needs more data than present (truncated?)");
    }
    count *= value;
  }
  return shape;
}

}  // namespace

size_t NpyArray::count() const {
  return bytes.size() / item_size(type);
}

double NpyArray::at(size_t index) const {
  const uint8_t* p = bytes.data() + index * item_size(type);
  switch (type) {
    case NpyType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case NpyType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return double(v);
    }
    case NpyType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return double(v);
    }
    case NpyType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return double(v);
    }
    case NpyType::kUInt8:
      return double(*p);
    case NpyType::kBool:
      return *p ? 1.0 : 0.0;
  }
  return 0;
}

NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) {
    throw InvalidArgument(source + ": not an .npy file (bad magic or truncated)");
  }
  const int major = data[6];
  size_t header_length = 0, header_start = 0;
  if (major == 1) {
    header_length = data[8] | size_t(data[9]) << 8;
    header_start = 10;
  } else if ((major == 2 || major == 3) && size >= 12) {
    header_length =
        data[8] | size_t(data[9]) << 8 | size_t(data[10]) << 16 | size_t(data[11]) << 24;
    header_start = 12;
  } else {
    throw InvalidArgument(source + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_length > size - header_start) {
    throw InvalidArgument(source + ": truncated .npy header");
  }
  const std::string header(reinterpret_cast<const char*>(data + header_start), header_length);
  const size_t fortran = value_start(header, "fortran_order", source);
  if (fortran == std::string::npos || header.compare(fortran, 5, "False") != 0) {
    throw InvalidArgument(source + ": Fortran-order .npy arrays are not supported");
  }
  NpyArray array;
  array.type = parse_type(header, source);
  const size_t data_start = header_start + header_length;
  const size_t present = size - data_start;
  array.shape = parse_shape(header, present / item_size(array.type), source);
  size_t count = 1;
  for (size_t d : array.shape) count *= d;
  if (count * item_size(array.type) != present) {
    throw InvalidArgument(source + ": .npy data is " + std::to_string(present) +
                          " bytes, its shape needs " +
                          std::to_string(count * item_size(array.type)) + " (truncated?)");
  }
  array.bytes.assign(data + data_start, data + size);
  return array;
}

std::string encode_npy(const NpyArray& array) {
  size_t count = 1;
  for (const size_t d : array.shape) count *= d;
  if (count * item_size(array.type) != array.bytes.size()) {
    throw InvalidArgument("encode_npy: " + std::to_string(array.bytes.size()) +
                          " bytes do not fill the shape");
  }
  // numpy's spelling: (), (3,), (3, 4).
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(array.shape[i]);
  }
  shape += array.shape.size() == 1 ? ",)" : ")";
  std::string header = std::string("{'descr': '") + descr(array.type) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads with spaces and a newline so that the data starts on a 64-byte boundary.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(array.bytes.data()), array.bytes.size());
  return out;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot open");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) throw InvalidArgument(path + ": cannot read");
  return parse_npy(bytes.data(), bytes.size(), path);
}

}  // namespace mvibr::data
