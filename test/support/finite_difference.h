// Central differences of a scalar function along one direction: the oracle that checks a
// hand-written backward pass in double.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace mvibr::testing {

struct DirectionalDerivative {
  double numeric;   // (f(x + h d) - f(x - h d)) / 2h
  double analytic;  // sum_i gradient[i] d_i
};

// The derivative of f at x along `direction`, which moves x[begin, begin + direction.size()),
// against `gradient` (dL/dx of that range, direction.size() values).
inline DirectionalDerivative directional_derivative(
    const std::function<double(const std::vector<double>&)>& f, const std::vector<double>& x,
    size_t begin, const std::vector<double>& direction, const double* gradient, double h) {
  std::vector<double> plus = x, minus = x;
  double analytic = 0;
  for (size_t i = 0; i < direction.size(); ++i) {
    plus[begin + i] += h * direction[i];
    minus[begin + i] -= h * direction[i];
    analytic += gradient[i] * direction[i];
  }
  return {(f(plus) - f(minus)) / (2 * h), analytic};
}

}  // namespace mvibr::testing
