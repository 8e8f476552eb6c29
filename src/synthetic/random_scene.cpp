// Random scenes for checks of the rendering core (see random_scene.h).
#include "mvibr/synthetic/random_scene.h"

#include <cmath>
#include <random>

namespace mvibr::synthetic {

std::vector<double> random_values(size_t count, double lo, double hi, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> values(count);
  for (double& v : values) v = uniform(generator);
  return values;
}

RandomScene make_random_scene(const RandomSceneSize& size, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double kPi = 3.14159265358979323846;
  RandomScene scene;
  scene.size = size;
  const Vec3<double> up{0, 0, 1};
  const auto ring_camera = [&](double angle, bool faces_away) {
    const double radius = 4.0 + 0.3 * uniform(generator);
    const Vec3<double> eye{radius * std::cos(angle), radius * std::sin(angle),
                           0.5 + uniform(generator)};
    const Vec3<double> jitter{0.3 * (uniform(generator) - 0.5), 0.3 * (uniform(generator) - 0.5),
                              0.3 * (uniform(generator) - 0.5)};
    const Vec3<double> look = faces_away ? eye + eye : jitter;
    const double focal = 0.9 * size.image_width * (0.9 + 0.2 * uniform(generator));
    return look_at_camera(eye, look, up, focal, size.image_width, size.image_height);
  };
  scene.target = ring_camera(0.0, false);
  for (int v = 0; v < size.n_views; ++v) {
    const double angle = 0.35 * (v + 1) * (v % 2 ? 1.0 : -1.0) + 0.1 * uniform(generator);
    scene.sources.push_back(
        ring_camera(angle * kPi / 3.0, size.last_view_faces_away && v == size.n_views - 1));
  }
  const size_t image_values = size_t(size.n_views) * size.image_height * size.image_width * 3;
  const size_t feature_values =
      size_t(size.n_views) * size.feature_height * size.feature_width * size.feature_channels;
  scene.images = random_values(image_values, 0.0, 1.0, seed + 1);
  scene.features = random_values(feature_values, -1.0, 1.0, seed + 2);
  scene.pixels.resize(size_t(size.n_rays) * 2);
  for (int r = 0; r < size.n_rays; ++r) {
    scene.pixels[2 * r] = uniform(generator) * (size.image_width - 1);
    scene.pixels[2 * r + 1] = uniform(generator) * (size.image_height - 1);
  }
  return scene;
}

}  // namespace mvibr::synthetic
