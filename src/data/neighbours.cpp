// Source-view neighbour lists (see neighbours.h).
#include "mvibr/data/neighbours.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "mvibr/core/error.h"

namespace mvibr::data {

namespace {

Vec3<double> viewing_direction(const PinholeCamera<double>& c) {
  return {c.c2w[2], c.c2w[6], c.c2w[10]};  // the camera's z axis in world coordinates
}

}  // namespace

void select_neighbours(Scene* scene, const NeighbourOptions& options) {
  if (options.max_neighbours < 1) {
    throw InvalidArgument("neighbours must be at least 1, got " +
                          std::to_string(options.max_neighbours));
  }
  const std::vector<View>& views = scene->views;
  std::vector<int> train;
  for (size_t j = 0; j < views.size(); ++j) {
    if (views[j].split == Split::kTrain) train.push_back(int(j));
  }
  if (train.size() < 2) {
    throw InvalidArgument("scene '" + scene->name + "' needs at least 2 training views, has " +
                          std::to_string(train.size()));
  }
  // The scale of the rig: the median distance between training camera centres.
  std::vector<double> distances;
  for (size_t a = 0; a < train.size(); ++a) {
    for (size_t b = a + 1; b < train.size(); ++b) {
      distances.push_back(norm(views[train[a]].camera.center() - views[train[b]].camera.center()));
    }
  }
  std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
  const double scale = std::max(distances[distances.size() / 2], 1e-12);

  scene->neighbours.assign(views.size(), {});
  for (size_t i = 0; i < views.size(); ++i) {
    const View& target = views[i];
    std::vector<std::pair<double, int>> scored;
    for (int j : train) {
      if (size_t(j) == i) continue;
      const View& source = views[j];
      const int dt = std::abs(source.time_index - target.time_index);
      if (scene->dynamic && dt > options.time_window) continue;
      const double cosine = std::clamp(
          dot(viewing_direction(target.camera), viewing_direction(source.camera)), -1.0, 1.0);
      const double score = norm(target.camera.center() - source.camera.center()) / scale +
                           std::acos(cosine) + double(dt);
      scored.emplace_back(score, j);
    }
    std::sort(scored.begin(), scored.end());
    const size_t keep = std::min(scored.size(), size_t(options.max_neighbours));
    for (size_t k = 0; k < keep; ++k) scene->neighbours[i].push_back(scored[k].second);
  }
}

}  // namespace mvibr::data
