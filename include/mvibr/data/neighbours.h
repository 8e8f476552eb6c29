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

// The `count` best sources, best first, for a camera that is not one of the scene's views (a
// frame of a rendered camera path) at time step `time_index`: the training views ranked by
// select_neighbours' score, so a path frame on a view's own camera gets that view's sources.
std::vector<int> nearest_sources(const Scene& scene, const PinholeCamera<double>& camera,
                                 int time_index, int count, const NeighbourOptions& options);

}  // namespace mvibr::data
