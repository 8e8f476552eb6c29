// Lens distortion removed once, at import: the rest of mvibr (rays, projection into source
// views) assumes ideal pinhole cameras, so a distorted photograph is resampled into the
// pinhole image that the same intrinsics would have taken.
#pragma once

#include <cstdint>
#include <vector>

#include "mvibr/geom/camera.h"

namespace mvibr::data {

// OpenCV's radial-tangential model (COLMAP's OPENCV, RADIAL, SIMPLE_RADIAL; instant-ngp's
// k1 k2 k3 p1 p2) on normalized coordinates x = (u - cx) / fx, y = (v - cy) / fy.
struct Distortion {
  double k1 = 0, k2 = 0, k3 = 0;  // radial
  double p1 = 0, p2 = 0;          // tangential

  bool is_identity() const { return k1 == 0 && k2 == 0 && k3 == 0 && p1 == 0 && p2 == 0; }
};

// Where the lens sends the ideal normalized point (x, y).
void distort_normalized(const Distortion& d, double x, double y, double* x_distorted,
                        double* y_distorted);

// The ideal pinhole image, for `camera`'s intrinsics and size, of an RGB image taken through a
// lens with distortion `d`. Inverse mapping: each output pixel is distorted to find where it
// lies in the input, which is read bilinearly; pixels that land outside the input take
// `background`.
std::vector<uint8_t> undistort_rgb(const std::vector<uint8_t>& rgb,
                                   const PinholeCamera<double>& camera, const Distortion& d,
                                   uint8_t background);

// The same for another pinhole camera at the same place: the image `wanted` (its intrinsics and
// size) would take, read bilinearly from the photograph of `photographed` (its intrinsics and
// size) through its lens `d`. A crop is `wanted` with the principal point shifted; pixels of no
// photograph take `background`.
std::vector<uint8_t> resample_rgb(const std::vector<uint8_t>& rgb,
                                  const PinholeCamera<double>& photographed, const Distortion& d,
                                  const PinholeCamera<double>& wanted, uint8_t background);

}  // namespace mvibr::data
