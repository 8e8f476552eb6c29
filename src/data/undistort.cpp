// Undistortion by inverse mapping (see undistort.h): no iterative inversion of the lens model
// is needed, since only the forward model (ideal -> distorted) is evaluated, once per pixel.
// Pixel coordinates follow mvibr's convention: integer coordinates at pixel centres.
#include "mvibr/data/undistort.h"

#include <algorithm>
#include <cmath>

namespace mvibr::data {

void distort_normalized(const Distortion& d, double x, double y, double* x_distorted,
                        double* y_distorted) {
  const double r2 = x * x + y * y;
  const double radial = 1 + r2 * (d.k1 + r2 * (d.k2 + r2 * d.k3));
  *x_distorted = x * radial + 2 * d.p1 * x * y + d.p2 * (r2 + 2 * x * x);
  *y_distorted = y * radial + d.p1 * (r2 + 2 * y * y) + 2 * d.p2 * x * y;
}

std::vector<uint8_t> undistort_rgb(const std::vector<uint8_t>& rgb,
                                   const PinholeCamera<double>& camera, const Distortion& d,
                                   uint8_t background) {
  return resample_rgb(rgb, camera, d, camera, background);
}

std::vector<uint8_t> resample_rgb(const std::vector<uint8_t>& rgb,
                                  const PinholeCamera<double>& photographed, const Distortion& d,
                                  const PinholeCamera<double>& wanted, uint8_t background) {
  const PinholeCamera<double>& in = photographed;
  const int width = in.width, height = in.height;
  std::vector<uint8_t> out(size_t(wanted.width) * size_t(wanted.height) * 3, background);
#pragma omp parallel for schedule(static)
  for (int v = 0; v < wanted.height; ++v) {
    for (int u = 0; u < wanted.width; ++u) {
      double xd, yd;
      distort_normalized(d, (u - wanted.cx) / wanted.fx, (v - wanted.cy) / wanted.fy, &xd, &yd);
      double su = in.fx * xd + in.cx, sv = in.fy * yd + in.cy;
      // Within the outer half pixel the edge pixel is read; beyond it lies no image.
      if (!(su >= -0.5 && su <= width - 0.5 && sv >= -0.5 && sv <= height - 0.5)) continue;
      su = std::clamp(su, 0.0, double(width - 1));
      sv = std::clamp(sv, 0.0, double(height - 1));
      const int u0 = int(su), v0 = int(sv);
      const int u1 = std::min(u0 + 1, width - 1), v1 = std::min(v0 + 1, height - 1);
      const double a = su - u0, b = sv - v0;
      for (int c = 0; c < 3; ++c) {
        const auto at = [&](int x, int y) { return double(rgb[(size_t(y) * width + x) * 3 + c]); };
        const double value = (1 - b) * ((1 - a) * at(u0, v0) + a * at(u1, v0)) +
                             b * ((1 - a) * at(u0, v1) + a * at(u1, v1));
        out[(size_t(v) * size_t(wanted.width) + size_t(u)) * 3 + c] = uint8_t(std::lround(value));
      }
    }
  }
  return out;
}

}  // namespace mvibr::data
