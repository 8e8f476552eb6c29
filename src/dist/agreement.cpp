// Config and parameter agreement across ranks (see agreement.h).
#include "mvibr/dist/agreement.h"

#include <map>
#include <sstream>
#include <vector>

#include "mvibr/core/error.h"

namespace mvibr::dist {

namespace {

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t hash = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

// "key = value" lines as (key, value) pairs, in order.
std::vector<std::pair<std::string, std::string>> config_entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t equals = line.find(" = ");
    if (equals == std::string::npos) continue;
    entries.emplace_back(line.substr(0, equals), line.substr(equals + 3));
  }
  return entries;
}

// This rank's first disagreement with rank 0's config, or "".
std::string first_difference(const std::string& mine, const std::string& root, int rank) {
  std::map<std::string, std::string> my_values;
  for (const auto& [key, value] : config_entries(mine)) my_values[key] = value;
  for (const auto& [key, value] : config_entries(root)) {
    const auto found = my_values.find(key);
    const std::string my_value = found == my_values.end() ? "no value" : found->second;
    if (my_value != value) {
      return "config key '" + key + "' differs between ranks: rank 0 has " + value + ", rank " +
             std::to_string(rank) + " has " + my_value;
    }
    if (found != my_values.end()) my_values.erase(found);
  }
  if (!my_values.empty()) {
    const auto& [key, value] = *my_values.begin();
    return "config key '" + key + "' differs between ranks: rank 0 has no value, rank " +
           std::to_string(rank) + " has " + value;
  }
  return "the config text differs between rank 0 and rank " + std::to_string(rank);
}

}  // namespace

void check_same_config(Communicator& comm, const std::string& config_text) {
  const std::vector<uint64_t> hashes =
      all_gather_value<uint64_t>(comm, fnv1a(config_text.data(), config_text.size()));
  bool all_equal = true;
  for (uint64_t h : hashes) all_equal = all_equal && h == hashes[0];
  if (all_equal) return;
  const std::string root = broadcast_string(comm, config_text, 0);
  const std::string mine = hashes[size_t(comm.rank())] == hashes[0]
                               ? ""
                               : first_difference(config_text, root, comm.rank());
  const std::vector<std::string> differences = all_gather_strings(comm, mine);
  for (const std::string& difference : differences) {
    if (!difference.empty()) throw InvalidArgument(difference);
  }
}

uint64_t checksum(const float* values, size_t count) {
  return fnv1a(values, count * sizeof(float));
}

void check_same_parameters(Communicator& comm, const float* values, size_t count,
                           const std::string& when) {
  const std::vector<uint64_t> sums = all_gather_value<uint64_t>(comm, checksum(values, count));
  for (size_t r = 1; r < sums.size(); ++r) {
    if (sums[r] != sums[0]) {
      throw RuntimeFailure("parameters diverged across ranks at " + when + ": rank " +
                           std::to_string(r) + "'s differ from rank 0's");
    }
  }
}

}  // namespace mvibr::dist
