// The texts the emulated libraries give their status codes, from one table each.
#pragma once

#include <cstddef>
#include <utility>

namespace mvibr::emulated {

// The text `table` gives `code`, else `unknown`.
template <typename Code, size_t N>
const char* status_text(Code code, const std::pair<Code, const char*> (&table)[N],
                        const char* unknown) {
  for (const auto& [known, text] : table) {
    if (known == code) return text;
  }
  return unknown;
}

}  // namespace mvibr::emulated

// A table row whose text is the code's own name.
#define MVIBR_STATUS_NAME(code) \
  { code, #code }
