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

SourceRanking::SourceRanking(const Scene& scene, const NeighbourOptions& options)
    : scene_(scene), options_(options) {
  if (options.max_neighbours < 1) {
    throw InvalidArgument("neighbours must be at least 1, got " +
                          std::to_string(options.max_neighbours));
  }
  for (size_t j = 0; j < scene.views.size(); ++j) {
    if (scene.views[j].split == Split::kTrain) train_.push_back(int(j));
  }
  if (train_.size() < 2) {
    throw InvalidArgument("scene '" + scene.name + "' needs at least 2 training views, has " +
                          std::to_string(train_.size()));
  }
  // The scale of the rig: the median distance between training camera centres.
  std::vector<double> distances;
  for (size_t a = 0; a < train_.size(); ++a) {
    for (size_t b = a + 1; b < train_.size(); ++b) {
      distances.push_back(norm(scene.views[size_t(train_[a])].camera.center() -
                               scene.views[size_t(train_[b])].camera.center()));
    }
  }
  std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
  scale_ = std::max(distances[distances.size() / 2], 1e-12);
}

std::vector<int> SourceRanking::nearest(const PinholeCamera<double>& camera, int time_index,
                                        int count, int exclude) const {
  if (count < 1) {
    throw InvalidArgument("source count must be at least 1, got " + std::to_string(count));
  }
  std::vector<std::pair<double, int>> scored;
  for (int j : train_) {
    if (j == exclude) continue;
    const View& source = scene_.views[size_t(j)];
    const int dt = std::abs(source.time_index - time_index);
    if (scene_.dynamic && dt > options_.time_window) continue;
    const double cosine =
        std::clamp(dot(viewing_direction(camera), viewing_direction(source.camera)), -1.0, 1.0);
    const double score =
        norm(camera.center() - source.camera.center()) / scale_ + std::acos(cosine) + double(dt);
    scored.emplace_back(score, j);
  }
  std::sort(scored.begin(), scored.end());  // ties broken by index
  std::vector<int> best;
  for (size_t k = 0; k < std::min(scored.size(), size_t(count)); ++k) {
    best.push_back(scored[k].second);
  }
  return best;
}

void select_neighbours(Scene* scene, const NeighbourOptions& options) {
  const SourceRanking ranking(*scene, options);
  std::vector<std::vector<int>> neighbours(scene->views.size());
  for (size_t i = 0; i < scene->views.size(); ++i) {
    const View& target = scene->views[i];
    neighbours[i] =
        ranking.nearest(target.camera, target.time_index, options.max_neighbours, int(i));
  }
  scene->neighbours = std::move(neighbours);
}

}  // namespace mvibr::data
