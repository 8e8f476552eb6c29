// The error measure every check of mvibr states its bounds in: max |a - b| / max |b|, a relative
// error that zeros in b cannot blow up. Infinite when the sizes differ or any value is NaN
// (std::max would silently drop a NaN), so a broken result fails every bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace mvibr {

template <typename A, typename B>
double normwise_relative_error(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return INFINITY;
  double difference = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(double(a[i])) || std::isnan(double(b[i]))) return INFINITY;
    difference = std::max(difference, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return difference / std::max(scale, 1e-300);
}

}  // namespace mvibr
