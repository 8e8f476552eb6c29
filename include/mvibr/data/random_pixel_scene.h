// A scene of random pixels on the random test rig (synthetic/random_scene.h), for tests and
// benchmarks of the data layer that need real files but not real images.
#pragma once

#include <cstdint>

#include "mvibr/data/scene.h"

namespace mvibr::data {

struct RandomPixelSceneOptions {
  int n_views = 8, width = 16, height = 12;
  int test_every = 0;         // views test_every-1, 2*test_every-1, ... are test views (0: none)
  int n_time_steps = 1;       // more than 1: dynamic, view i at time step i % n_time_steps
  int max_pixel_value = 255;  // smaller values make frames compressible
  uint64_t seed = 1;
};

// Views with random pixels, rig cameras, near 1 / far 8, and neighbours (up to 8) selected.
Scene make_random_pixel_scene(const RandomPixelSceneOptions& options);

}  // namespace mvibr::data
