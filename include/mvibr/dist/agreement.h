// Ranks must train the same model on the same settings. These checks turn a silent divergence
// (one rank given another config, or parameters drifting apart) into an error at once, naming
// what differs. Each is a collective: every rank calls it, and every rank throws when it fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mvibr/dist/communicator.h"

namespace mvibr::dist {

// `config_text` is `key = value` lines (TrainConfig::to_text). Hashes are compared first; when
// they differ, the first key whose value differs from rank 0's is named with both values:
// "config key 'N_rand' differs between ranks: rank 0 has 512, rank 1 has 256".
void check_same_config(Communicator& comm, const std::string& config_text);

// FNV-1a over the bytes of `values`: equal parameters give equal checksums.
uint64_t checksum(const float* values, size_t count);

// Compares the parameters' checksums; throws RuntimeFailure naming `when` (e.g. "step 100") and
// the first rank whose parameters differ from rank 0's.
void check_same_parameters(Communicator& comm, const float* values, size_t count,
                           const std::string& when);

}  // namespace mvibr::dist
