// How the fuzz tests damage a file: reproducible from the round and the generator.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

namespace mvibr::testing {

// Damages the file at `path` in place: every fourth round (round % 4 == 3) cuts it to a random
// length; the others put 1 to 8 random bytes at random offsets, on even rounds within its first
// 256 bytes, where headers and counts are.
inline void damage_file(const std::filesystem::path& path, int round, std::mt19937_64& rng) {
  const size_t size = std::filesystem::file_size(path);
  if (round % 4 == 3) {
    std::filesystem::resize_file(path, rng() % size);
    return;
  }
  std::fstream stream(path, std::ios::in | std::ios::out | std::ios::binary);
  const size_t span = round % 2 ? size : std::min<size_t>(size, 256);
  for (int i = 0; i < 1 + int(rng() % 8); ++i) {
    stream.seekp(std::streamoff(rng() % span));
    stream.put(char(rng()));
  }
}

}  // namespace mvibr::testing
