// NumPy .npy arrays, as LLFF's poses_bounds.npy and the members of an .npz hold them. The
// header is validated in full and the data must be exactly what the shape says, so a damaged
// or hostile file is refused before anything is allocated from its header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mvibr::data {

enum class NpyType { kFloat64, kFloat32, kUInt8, kInt64, kInt32, kBool };

struct NpyArray {
  std::vector<size_t> shape;  // () for a scalar
  NpyType type = NpyType::kFloat64;
  std::vector<uint8_t> bytes;  // C order, little-endian

  size_t count() const;           // number of elements
  double at(size_t index) const;  // element `index` (flat, C order) as a double
};

// Parses an .npy image in memory; `source` names it in errors ("poses_bounds.npy",
// "data.npz:images.npy"). Accepts little-endian f8/f4/i8/i4, u1 and b1, C order, versions 1-3.
NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& source);

// Throws InvalidArgument naming the file when it is missing, malformed or truncated.
NpyArray read_npy(const std::string& path);

// The .npy image numpy.save writes (version 1.0, the header padded to 64 bytes).
std::string encode_npy(const NpyArray& array);

}  // namespace mvibr::data
