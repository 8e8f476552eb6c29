// Pixel selection for a training step (see ray_batch.h).
#include "mvibr/train/ray_batch.h"

#include "mvibr/core/error.h"

namespace mvibr::train {

RayBatch select_rays(const data::View& target, int n_rays, SampleMode sample_mode,
                     double center_ratio, RandomKey key, uint32_t first_ray) {
  const int width = target.camera.width, height = target.camera.height;
  if (target.rgb.size() != size_t(width) * height * 3) {
    throw InvalidArgument("target view " + target.name + " has no pixels loaded");
  }
  int border_x = 0, border_y = 0;
  if (sample_mode == SampleMode::kCenter) {
    border_x = int(width * (1 - center_ratio) / 2);
    border_y = int(height * (1 - center_ratio) / 2);
  }
  const uint32_t span_x = uint32_t(width - 2 * border_x), span_y = uint32_t(height - 2 * border_y);
  RayBatch batch;
  batch.pixels.resize(size_t(n_rays) * 2);
  batch.target_rgb.resize(size_t(n_rays) * 3);
  for (int r = 0; r < n_rays; ++r) {
    const uint32_t ray = first_ray + uint32_t(r);
    // Two draws per ray (x, y) from the pixel-selection stream; 24-bit uniforms are plenty.
    const int u =
        border_x + int(philox_uniform(key, RandomStream::kPixelSelection, ray, 0) * span_x);
    const int v =
        border_y + int(philox_uniform(key, RandomStream::kPixelSelection, ray, 1) * span_y);
    batch.pixels[2 * size_t(r)] = float(u);
    batch.pixels[2 * size_t(r) + 1] = float(v);
    const uint8_t* rgb = &target.rgb[(size_t(v) * width + u) * 3];
    for (int c = 0; c < 3; ++c) batch.target_rgb[3 * size_t(r) + c] = float(rgb[c]) / 255.0f;
  }
  return batch;
}

}  // namespace mvibr::train
