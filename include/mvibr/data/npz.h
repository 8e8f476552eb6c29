// NumPy .npz archives (a zip of .npy members, stored or deflated), as D-NeRF-style scenes and
// DynIBaR's flows ship.
// The zip is parsed here, with every offset and size checked against the file, rather than
// through a zip library: only the few structures numpy writes are needed.
#pragma once

#include <map>
#include <string>

#include "mvibr/data/npy.h"

namespace mvibr::data {

// Every member, keyed by its name without ".npy". Throws InvalidArgument naming the file (and
// member) when it is missing, not a zip, truncated, fails its CRC or holds a bad .npy.
std::map<std::string, NpyArray> read_npz(const std::string& path);

// What numpy.savez writes: every array as "<key>.npy", stored (not compressed), the file
// replaced atomically. Members over 4 GiB (zip64) are refused.
void write_npz(const std::string& path, const std::map<std::string, NpyArray>& arrays);

}  // namespace mvibr::data
