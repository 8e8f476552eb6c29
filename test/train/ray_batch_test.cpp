// Pixel selection: inside the image (or its centre), colours read at the pixel, deterministic,
// and the same pixels whether one rank draws the whole batch or two ranks draw halves.
#include "mvibr/train/ray_batch.h"

#include <gtest/gtest.h>

#include <set>

namespace mvibr::train {
namespace {

data::View test_view(int width, int height) {
  data::View view;
  view.camera.width = width;
  view.camera.height = height;
  view.rgb.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < view.rgb.size(); ++i) view.rgb[i] = uint8_t(i * 7);
  return view;
}

TEST(RayBatch, PixelsAreInsideWithTheirColours) {
  const data::View view = test_view(40, 30);
  const RayBatch batch = select_rays(view, 2000, SampleMode::kUniform, 0.8, {3, 4}, 0);
  std::set<std::pair<int, int>> distinct;
  for (int r = 0; r < 2000; ++r) {
    const int u = int(batch.pixels[2 * r]), v = int(batch.pixels[2 * r + 1]);
    ASSERT_GE(u, 0);
    ASSERT_LT(u, 40);
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 30);
    distinct.insert({u, v});
    EXPECT_EQ(batch.target_rgb[3 * r + 1], float(view.rgb[(size_t(v) * 40 + u) * 3 + 1]) / 255.0f);
  }
  EXPECT_GT(distinct.size(), 700u);  // spread over the image's 1200 pixels
}

TEST(RayBatch, CenterSamplingKeepsAwayFromTheBorder) {
  const data::View view = test_view(40, 30);
  const RayBatch batch = select_rays(view, 500, SampleMode::kCenter, 0.5, {3, 4}, 0);
  for (int r = 0; r < 500; ++r) {
    EXPECT_GE(batch.pixels[2 * r], 10);
    EXPECT_LT(batch.pixels[2 * r], 30);
    EXPECT_GE(batch.pixels[2 * r + 1], 7);
    EXPECT_LT(batch.pixels[2 * r + 1], 23);
  }
}

TEST(RayBatch, TwoRanksDrawTheSamePixelsAsOne) {
  const data::View view = test_view(64, 48);
  const RayBatch whole = select_rays(view, 64, SampleMode::kUniform, 0.8, {1, 9}, 0);
  const RayBatch first = select_rays(view, 32, SampleMode::kUniform, 0.8, {1, 9}, 0);
  const RayBatch second = select_rays(view, 32, SampleMode::kUniform, 0.8, {1, 9}, 32);
  std::vector<float> joined = first.pixels;
  joined.insert(joined.end(), second.pixels.begin(), second.pixels.end());
  EXPECT_EQ(joined, whole.pixels);
  EXPECT_NE(select_rays(view, 64, SampleMode::kUniform, 0.8, {1, 10}, 0).pixels, whole.pixels);
}

}  // namespace
}  // namespace mvibr::train
