// Source-view selection, computed once at prep: for every view, the training views that serve
// as its sources, best first. Close camera centres and similar viewing directions make good
// sources (IBRNet's get_nearest_pose_ids); in dynamic scenes sources also come from nearby time
// steps only, so moving content is seen at nearly the same moment.
#pragma once

#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

struct NeighbourOptions {
  int max_neighbours = 20;  // IBRNet keeps a pool of up to 20 and samples its sources from it
  int time_window = 1;      // dynamic scenes: sources within this many time steps of the target
};

// Fills scene->neighbours. Score of source j for target i: |c_i - c_j| / (median distance
// between training cameras) + angle between the viewing directions (radians) + |dt| steps;
// ties broken by index, so the lists are deterministic.
void select_neighbours(Scene* scene, const NeighbourOptions& options);

// Ranks a scene's training views as sources by select_neighbours' score, for any camera: a
// frame of a rendered camera path on a view's own camera gets that view's sources. Built once
// per scene (it finds the training views and the rig's scale), then asked per camera; it keeps
// a reference to the scene, which must outlive it.
class SourceRanking {
 public:
  // Throws InvalidArgument for max_neighbours < 1 or fewer than 2 training views.
  SourceRanking(const Scene& scene, const NeighbourOptions& options);
  // The `count` best training views other than `exclude` for `camera` at `time_index`, best
  // first. Throws InvalidArgument for count < 1.
  std::vector<int> nearest(const PinholeCamera<double>& camera, int time_index, int count,
                           int exclude = -1) const;

 private:
  const Scene& scene_;
  NeighbourOptions options_;
  std::vector<int> train_;
  double scale_ = 1;
};

}  // namespace mvibr::data
