// Source-view selection, computed once at prep: for every view, the training views that serve
// as its sources, best first. Close camera centres and similar viewing directions make good
// sources (IBRNet's get_nearest_pose_ids); in dynamic scenes sources also come from nearby time
// steps only, so moving content is seen at nearly the same moment.
#pragma once

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

}  // namespace mvibr::data
