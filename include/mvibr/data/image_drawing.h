// Drawing on 8-bit RGB images: thick line segments, discs and rings, for overlays (the pose
// model's skeletons over its camera views).
// - Pixel coordinates as everywhere in mvibr: integer (u, v) at pixel centres, u right, v down.
// - A shape sets every pixel whose centre lies inside it (no anti-aliasing), so what is drawn is
//   exact and testable; shapes partly or wholly outside the image are clipped.
#pragma once

#include <cstdint>

#include "mvibr/data/image_io.h"

namespace mvibr::data {

struct Rgb {
  uint8_t r, g, b;
};

// The pixels within width / 2 of the segment from (u0, v0) to (u1, v1): a line with round caps.
// Non-finite end points draw nothing. `image` has 3 channels.
void draw_line(Image* image, double u0, double v0, double u1, double v1, double width, Rgb colour);

// The pixels within `radius` of (u, v).
void draw_disc(Image* image, double u, double v, double radius, Rgb colour);

// The pixels within `thickness` / 2 of the circle of `radius` around (u, v): a hollow disc.
void draw_ring(Image* image, double u, double v, double radius, double thickness, Rgb colour);

// Each pixel repeated `factor` x `factor` times. Pixel (u, v) of the image maps to
// ((u + 0.5) factor - 0.5, (v + 0.5) factor - 0.5) of the result (upscaled_coordinate).
Image upscale_nearest(const Image& image, int factor);
inline double upscaled_coordinate(double u, int factor) {
  return (u + 0.5) * factor - 0.5;
}

}  // namespace mvibr::data
