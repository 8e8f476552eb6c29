// Minimal .npy reading and writing (little-endian float64, C order): the exchange format with
// the PyTorch reference, readable by numpy.load for debugging a failing case by hand.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mvibr::test {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<double> data;
};

void write_npy(const std::string& path, const NpyArray& array);
// Throws std::runtime_error naming the file when it is missing, not '<f8', or truncated.
NpyArray read_npy(const std::string& path);

}  // namespace mvibr::test
