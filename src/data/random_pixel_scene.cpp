// Random-pixel scenes for data-layer tests and benchmarks (see random_pixel_scene.h).
#include "mvibr/data/random_pixel_scene.h"

#include <random>

#include "mvibr/data/neighbours.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr::data {

Scene make_random_pixel_scene(const RandomPixelSceneOptions& options) {
  synthetic::RandomSceneSize size;
  size.n_views = options.n_views;
  size.image_width = options.width;
  size.image_height = options.height;
  const synthetic::RandomScene rig = synthetic::make_random_scene(size, options.seed);
  Scene scene;
  scene.name = "random";
  scene.source_format = "synthetic";
  scene.dynamic = options.n_time_steps > 1;
  std::mt19937 bytes(uint32_t(options.seed) + 1);
  for (int i = 0; i < options.n_views; ++i) {
    View v;
    v.name = "random/" + std::to_string(i);
    v.camera = rig.sources[size_t(i)];
    v.near_depth = 1;
    v.far_depth = 8;
    v.time_index = i % options.n_time_steps;
    v.time = options.n_time_steps > 1 ? v.time_index / double(options.n_time_steps - 1) : 0.0;
    v.split = options.test_every > 0 && i % options.test_every == options.test_every - 1
                  ? Split::kTest
                  : Split::kTrain;
    v.rgb.resize(size_t(options.width) * options.height * 3);
    for (auto& b : v.rgb) b = uint8_t(bytes() % uint32_t(options.max_pixel_value + 1));
    scene.views.push_back(std::move(v));
  }
  select_neighbours(&scene, NeighbourOptions{8, 1});
  return scene;
}

}  // namespace mvibr::data
