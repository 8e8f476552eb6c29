// .npy version 1.0 with a '<f8' payload; see npy.h.
#include "npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace mvibr::test {

void write_npy(const std::string& path, const NpyArray& array) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (";
  for (size_t d : array.shape) header += std::to_string(d) + ", ";
  header += "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, '\n' last.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  const uint16_t length = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.put(char(length & 0xff)).put(char(length >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(array.data.data()),
            std::streamsize(array.data.size() * sizeof(double)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  char prefix[10];
  if (!in.read(prefix, 10) || std::memcmp(prefix, "\x93NUMPY\x01", 7) != 0) {
    throw std::runtime_error(path + ": not an .npy version 1 file");
  }
  const size_t length = uint8_t(prefix[8]) | (size_t(uint8_t(prefix[9])) << 8);
  std::string header(length, '\0');
  if (!in.read(header.data(), std::streamsize(length))) {
    throw std::runtime_error(path + ": truncated header");
  }
  if (header.find("'<f8'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos) {
    throw std::runtime_error(path + ": expected little-endian float64 in C order");
  }
  NpyArray array;
  const size_t open = header.find('(', header.find("'shape'"));
  const size_t close = header.find(')', open);
  size_t count = 1;
  for (size_t pos = open + 1; pos < close;) {
    const size_t end = header.find_first_of(",)", pos);
    const std::string item = header.substr(pos, end - pos);
    if (item.find_first_not_of(' ') != std::string::npos) {
      array.shape.push_back(std::stoul(item));
      count *= array.shape.back();
    }
    pos = end + 1;
  }
  array.data.resize(count);
  if (!in.read(reinterpret_cast<char*>(array.data.data()), std::streamsize(count * 8))) {
    throw std::runtime_error(path + ": truncated data");
  }
  return array;
}

}  // namespace mvibr::test
