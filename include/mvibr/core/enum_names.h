// Enumerated options by name: each enum lists its {value, name} pairs once, in EnumNames<E>, and
// is parsed and printed from there.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace mvibr {

// Specialised next to each enum: static constexpr std::pair<E, const char*> values[] = {...}.
template <typename E>
struct EnumNames;

template <typename E>
const char* name_of(E value) {
  for (const auto& [candidate, name] : EnumNames<E>::values) {
    if (candidate == value) return name;
  }
  return "?";
}

template <typename E>
std::optional<E> parse_name(const std::string& text) {
  for (const auto& [value, name] : EnumNames<E>::values) {
    if (text == name) return value;
  }
  return std::nullopt;
}

// "a, b or c": the names, for help texts and error messages.
template <typename E>
std::string names_of() {
  std::string names;
  const size_t count = std::size(EnumNames<E>::values);
  for (size_t i = 0; i < count; ++i) {
    names += i == 0 ? "" : i + 1 == count ? " or " : ", ";
    names += EnumNames<E>::values[i].second;
  }
  return names;
}

}  // namespace mvibr
