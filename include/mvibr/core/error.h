// Errors that reach the user: one line saying what was wrong and where.
#pragma once

#include <stdexcept>
#include <string>

namespace mvibr {

// Bad input from the caller (a config value, a file, an argument): reported, never a crash.
class InvalidArgument : public std::runtime_error {
 public:
  explicit InvalidArgument(const std::string& what) : std::runtime_error(what) {}
};

// A failure of the machine or a library (CUDA, NCCL, MPI, HDF5).
class RuntimeFailure : public std::runtime_error {
 public:
  explicit RuntimeFailure(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace mvibr
