// Random inputs for the rendering core: cameras on a ring looking at the origin, random source
// images and feature maps, a batch of target pixels. Used by tests, benchmarks and
// `mvibr selfcheck`, so every check of the core starts from the same kind of data.
#pragma once

#include <cstdint>
#include <vector>

#include "mvibr/geom/camera.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr::synthetic {

struct RandomSceneSize {
  int n_views = 4;
  int image_width = 32, image_height = 24;
  int feature_width = 8, feature_height = 6;
  int feature_channels = 8;
  int n_rays = 16;
  // Turns the last source camera away from the scene so that every sample is behind it.
  bool last_view_faces_away = false;
};

struct RandomScene {
  RandomSceneSize size;
  PinholeCamera<double> target;
  std::vector<PinholeCamera<double>> sources;
  std::vector<double> images;    // [V,H,W,3] in [0,1]
  std::vector<double> features;  // [V,Hf,Wf,C] in [-1,1]
  std::vector<double> pixels;    // [R,2] inside the target image
  double near_depth = 2.0, far_depth = 6.0;
};

RandomScene make_random_scene(const RandomSceneSize& size, uint64_t seed);

// Uniform values in [lo, hi) from a seeded generator: reproducible test inputs.
std::vector<double> random_values(size_t count, double lo, double hi, uint64_t seed);

// The scene's source views over arrays the caller owns (host or device memory).
template <typename T>
SourceViews<T> scene_views(const RandomScene& scene, const PinholeCamera<T>* cameras,
                           const T* images, const T* features) {
  SourceViews<T> views;
  views.n_views = scene.size.n_views;
  views.cameras = cameras;
  views.image_height = scene.size.image_height;
  views.image_width = scene.size.image_width;
  views.images = images;
  views.feature_height = scene.size.feature_height;
  views.feature_width = scene.size.feature_width;
  views.feature_channels = scene.size.feature_channels;
  views.features = features;
  return views;
}

template <typename To>
std::vector<To> cast_values(const std::vector<double>& values) {
  return std::vector<To>(values.begin(), values.end());
}

template <typename To>
std::vector<PinholeCamera<To>> cast_cameras(const std::vector<PinholeCamera<double>>& cameras) {
  std::vector<PinholeCamera<To>> out;
  for (const auto& c : cameras) out.push_back(camera_cast<To>(c));
  return out;
}

}  // namespace mvibr::synthetic
