// The typed and string helpers over any Communicator (see communicator.h).
#include "mvibr/dist/communicator.h"

#include <algorithm>
#include <cstring>

namespace mvibr::dist {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "none"; }
  void all_reduce(float*, size_t, ReduceOp) override {}
  void all_reduce(double*, size_t, ReduceOp) override {}
  void all_reduce_bf16_sum(uint16_t*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void all_gather(const void* send, size_t bytes, void* receive) override {
    if (bytes > 0) std::memcpy(receive, send, bytes);
  }
  void barrier() override {}
};

}  // namespace

uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return uint16_t(bits >> 16);
}

float from_bf16(uint16_t value) {
  const uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

std::unique_ptr<Communicator> single_process_communicator() {
  return std::make_unique<SingleProcess>();
}

std::string broadcast_string(Communicator& comm, const std::string& text, int root) {
  uint64_t length = text.size();
  comm.broadcast(&length, sizeof(length), root);
  std::string result = comm.rank() == root ? text : std::string(length, '\0');
  if (length > 0) comm.broadcast(result.data(), length, root);
  return result;
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& text) {
  const std::vector<uint64_t> lengths = all_gather_value<uint64_t>(comm, text.size());
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::string padded = text;
  padded.resize(longest, '\0');
  std::string gathered(longest * lengths.size(), '\0');
  if (longest > 0) comm.all_gather(padded.data(), longest, gathered.data());
  std::vector<std::string> result;
  for (size_t r = 0; r < lengths.size(); ++r)
    result.push_back(gathered.substr(r * longest, lengths[r]));
  return result;
}

}  // namespace mvibr::dist
