// Shapes on RGB images (image_drawing.h): each tests the pixel centres of its bounding box,
// clipped to the image, against its distance function.
#include "mvibr/data/image_drawing.h"

#include <algorithm>
#include <cmath>

#include "mvibr/core/error.h"

namespace mvibr::data {

namespace {

// Sets the pixels of the box [u_min, u_max] x [v_min, v_max] (clipped) whose centre is `inside`.
template <typename Inside>
void fill(Image* image, double u_min, double u_max, double v_min, double v_max, Rgb colour,
          Inside inside) {
  if (image->channels != 3) throw InvalidArgument("drawing needs an RGB image");
  if (!(std::isfinite(u_min) && std::isfinite(u_max) && std::isfinite(v_min) &&
        std::isfinite(v_max))) {
    return;
  }
  // Clamped before the conversion, so that far-off shapes stay within int.
  const int first_u = int(std::ceil(std::clamp(u_min, 0.0, double(image->width))));
  const int last_u = int(std::floor(std::clamp(u_max, -1.0, double(image->width - 1))));
  const int first_v = int(std::ceil(std::clamp(v_min, 0.0, double(image->height))));
  const int last_v = int(std::floor(std::clamp(v_max, -1.0, double(image->height - 1))));
  for (int v = first_v; v <= last_v; ++v) {
    for (int u = first_u; u <= last_u; ++u) {
      if (!inside(double(u), double(v))) continue;
      uint8_t* p = &image->pixels[(size_t(v) * size_t(image->width) + size_t(u)) * 3];
      p[0] = colour.r;
      p[1] = colour.g;
      p[2] = colour.b;
    }
  }
}

}  // namespace

void draw_line(Image* image, double u0, double v0, double u1, double v1, double width, Rgb colour) {
  const double half = width / 2, du = u1 - u0, dv = v1 - v0, length2 = du * du + dv * dv;
  fill(image, std::min(u0, u1) - half, std::max(u0, u1) + half, std::min(v0, v1) - half,
       std::max(v0, v1) + half, colour, [&](double u, double v) {
         // The distance to the nearest point of the segment.
         const double t =
             length2 > 0 ? std::clamp(((u - u0) * du + (v - v0) * dv) / length2, 0.0, 1.0) : 0.0;
         return std::hypot(u - (u0 + t * du), v - (v0 + t * dv)) <= half;
       });
}

void draw_disc(Image* image, double u, double v, double radius, Rgb colour) {
  fill(image, u - radius, u + radius, v - radius, v + radius, colour,
       [&](double x, double y) { return std::hypot(x - u, y - v) <= radius; });
}

void draw_ring(Image* image, double u, double v, double radius, double thickness, Rgb colour) {
  const double outer = radius + thickness / 2;
  fill(image, u - outer, u + outer, v - outer, v + outer, colour, [&](double x, double y) {
    return std::abs(std::hypot(x - u, y - v) - radius) <= thickness / 2;
  });
}

Image upscale_nearest(const Image& image, int factor) {
  if (factor < 1) throw InvalidArgument("upscale factor must be at least 1");
  Image out;
  out.width = image.width * factor;
  out.height = image.height * factor;
  out.channels = image.channels;
  out.pixels.resize(size_t(out.width) * size_t(out.height) * size_t(out.channels));
  const size_t c = size_t(image.channels);
  for (int v = 0; v < out.height; ++v) {
    for (int u = 0; u < out.width; ++u) {
      const uint8_t* from =
          &image.pixels[(size_t(v / factor) * size_t(image.width) + size_t(u / factor)) * c];
      std::copy(from, from + c, &out.pixels[(size_t(v) * size_t(out.width) + size_t(u)) * c]);
    }
  }
  return out;
}

}  // namespace mvibr::data
