// The flat parameter store and the seeded initialisers (see parameters.h).
#include "mvibr/nn/parameters.h"

#include <algorithm>
#include <cmath>

#include "mvibr/core/error.h"

namespace mvibr::nn {

Parameter ParameterSet::add(const std::string& name, std::vector<int> shape, ParameterGroup group) {
  for (const ParameterInfo& info : infos_) {
    if (info.name == name) throw InvalidArgument("parameter '" + name + "' is defined twice");
  }
  size_t count = 1;
  for (int d : shape) {
    if (d < 1) throw InvalidArgument("parameter '" + name + "' has a non-positive dimension");
    count *= size_t(d);
  }
  ParameterInfo info{name, std::move(shape), values_.size(), count, group};
  infos_.push_back(info);
  values_.resize(values_.size() + count, 0.0f);
  grads_.resize(grads_.size() + count, 0.0f);
  return Parameter{infos_.size() - 1};
}

Parameter ParameterSet::find(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (infos_[i].name == name) return Parameter{i};
  }
  throw InvalidArgument("no parameter named '" + name + "'");
}

void ParameterSet::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

double Initializer::next_unit() {
  // splitmix64: tiny, fast, and the same stream on every platform.
  state_ += 0x9E3779B97F4A7C15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

void Initializer::kaiming_normal(float* values, size_t count, int fan_in) {
  const double std_dev = std::sqrt(2.0 / double(fan_in));
  const double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < count; ++i) {  // Box-Muller, one normal per pair of uniforms
    const double u1 = 1.0 - next_unit(), u2 = next_unit();
    values[i] = float(std_dev * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

void Initializer::uniform(float* values, size_t count, float bound) {
  for (size_t i = 0; i < count; ++i) values[i] = float((2.0 * next_unit() - 1.0) * bound);
}

void Initializer::constant(float* values, size_t count, float value) {
  std::fill(values, values + count, value);
}

}  // namespace mvibr::nn
