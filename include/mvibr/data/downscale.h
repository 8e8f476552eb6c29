// Frames made smaller at import (`mvibr prep --factor N`, `--width W`), in any format: pixels by
// area averaging, intrinsics scaled to the same image.
// - Area averaging: each output pixel is the mean of the input area it covers, fractional pixels
//   weighted by the part they cover; an exact factor k averages k x k blocks (LLFF's images_k).
// - Intrinsics keep mvibr's pixel-centre convention (importers.h): in corner coordinates a
//   point scales by the size ratio, so fx' = fx sx and cx' = (cx + 0.5) sx - 0.5.
#pragma once

#include <cstdint>
#include <vector>

#include "mvibr/geom/camera.h"

namespace mvibr::data {

// RGB (or any `channels`) image `width` x `height` to `new_width` x `new_height`, each no
// larger than before and at least 1; rounded to the nearest level.
std::vector<uint8_t> downscale_area(const std::vector<uint8_t>& pixels, int width, int height,
                                    int channels, int new_width, int new_height);

// The camera of the same view in an image of new_width x new_height.
void scale_intrinsics(PinholeCamera<double>* camera, int new_width, int new_height);

}  // namespace mvibr::data
