// What the built-in generators (synthetic_scene.cpp, pose_scene.cpp) share: reproducible draws
// from a seed, and saturated colours by hue.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mvibr/geom/camera.h"

namespace mvibr::data {

inline double fraction(double x) {
  return x - std::floor(x);
}

// Reproducible draws from a seed (splitmix64).
class SeedStream {
 public:
  explicit SeedStream(uint64_t seed) : state_(seed) {}
  double uniform(double lo, double hi) {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * double(z >> 11) * 0x1.0p-53;
  }
  // A standard normal draw (Box-Muller, two uniforms).
  double normal() {
    const double u = uniform(1e-12, 1), v = uniform(0, 1);
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t state_;
};

// A saturated colour of hue h (in turns), linear RGB.
inline Vec3<double> hue_colour(double h, double saturation, double value) {
  const auto channel = [&](double offset) {
    const double k = fraction(h + offset) * 6.0;
    const double ramp = std::clamp(std::min(k, 4.0 - k), 0.0, 1.0);
    return value * (1.0 - saturation * ramp);
  };
  return {channel(5.0 / 6.0), channel(3.0 / 6.0), channel(1.0 / 6.0)};
}

}  // namespace mvibr::data
