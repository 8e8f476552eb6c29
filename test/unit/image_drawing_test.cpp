// The overlay drawing (data/image_drawing.h): a line sets exactly the pixels within half its width
// of the segment, discs and rings theirs, shapes off the image are clipped, and nearest upscaling
// repeats each pixel where upscaled_coordinate says it lands.
#include "mvibr/data/image_drawing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mvibr::data {
namespace {

constexpr Rgb kWhite{255, 255, 255};

Image black(int width, int height) {
  return {width, height, 3, std::vector<uint8_t>(size_t(width) * size_t(height) * 3, 0)};
}

bool is_set(const Image& image, int u, int v) {
  const uint8_t* p = &image.pixels[(size_t(v) * size_t(image.width) + size_t(u)) * 3];
  return p[0] == 255 && p[1] == 255 && p[2] == 255;
}

int count_set(const Image& image) {
  int n = 0;
  for (int v = 0; v < image.height; ++v) {
    for (int u = 0; u < image.width; ++u) n += is_set(image, u, v);
  }
  return n;
}

TEST(ImageDrawing, AHorizontalLineSetsItsRowBetweenItsEnds) {
  Image image = black(20, 10);
  draw_line(&image, 3, 4, 12, 4, 1, kWhite);
  for (int v = 0; v < 10; ++v) {
    for (int u = 0; u < 20; ++u) {
      EXPECT_EQ(is_set(image, u, v), v == 4 && u >= 3 && u <= 12) << u << "," << v;
    }
  }
}

TEST(ImageDrawing, AThickDiagonalLineSetsThePixelsWithinHalfItsWidth) {
  Image image = black(16, 16);
  draw_line(&image, 2, 2, 12, 12, 3, kWhite);
  for (int v = 0; v < 16; ++v) {
    for (int u = 0; u < 16; ++u) {
      // Distance to the segment: along the diagonal |u - v| / sqrt(2); past an end, to that end.
      const double t = std::clamp((u + v) / 2.0, 2.0, 12.0);
      const bool inside = std::hypot(u - t, v - t) <= 1.5;
      EXPECT_EQ(is_set(image, u, v), inside) << u << "," << v;
    }
  }
  EXPECT_TRUE(is_set(image, 7, 7));
  EXPECT_TRUE(is_set(image, 8, 7));    // 0.71 off the line
  EXPECT_TRUE(is_set(image, 9, 7));    // 1.41 off
  EXPECT_FALSE(is_set(image, 10, 7));  // 2.12 off: no
  EXPECT_FALSE(is_set(image, 0, 0));   // beyond the end by 2.8
}

TEST(ImageDrawing, ShapesOffTheImageAreClippedAndNonFiniteOnesDrawNothing) {
  Image image = black(8, 8);
  draw_line(&image, -1e6, 3, 1e6, 3, 1, kWhite);
  EXPECT_EQ(count_set(image), 8);
  draw_disc(&image, 100, 100, 5, kWhite);
  draw_line(&image, 0, 0, std::numeric_limits<double>::quiet_NaN(), 5, 3, kWhite);
  draw_line(&image, 0, 0, std::numeric_limits<double>::infinity(), 0, 3, kWhite);
  EXPECT_EQ(count_set(image), 8);
}

TEST(ImageDrawing, ADiscIsFilledAndARingIsHollow) {
  Image disc = black(11, 11), ring = black(11, 11);
  draw_disc(&disc, 5, 5, 3, kWhite);
  draw_ring(&ring, 5, 5, 3, 1, kWhite);
  EXPECT_EQ(count_set(disc), 29);  // the lattice points within radius 3
  EXPECT_TRUE(is_set(disc, 5, 5));
  EXPECT_TRUE(is_set(disc, 8, 5));
  EXPECT_FALSE(is_set(disc, 8, 6));
  EXPECT_FALSE(is_set(ring, 5, 5));
  EXPECT_TRUE(is_set(ring, 8, 5));
  EXPECT_TRUE(is_set(ring, 5, 2));
  EXPECT_FALSE(is_set(ring, 6, 6));
}

TEST(ImageDrawing, UpscalingRepeatsEachPixelWhereItsCoordinateLands) {
  Image image = black(2, 1);
  image.pixels[3] = 255;  // pixel (1, 0), red
  const Image big = upscale_nearest(image, 3);
  ASSERT_EQ(big.width, 6);
  ASSERT_EQ(big.height, 3);
  for (int v = 0; v < 3; ++v) {
    for (int u = 0; u < 6; ++u)
      EXPECT_EQ(big.pixels[(size_t(v) * 6 + size_t(u)) * 3], u >= 3 ? 255 : 0);
  }
  EXPECT_EQ(upscaled_coordinate(1, 3), 4);  // the centre of the 3x3 block of pixel 1
  EXPECT_THROW(upscale_nearest(image, 0), std::exception);
}

}  // namespace
}  // namespace mvibr::data
