// DynIBaR's source views for a training target of a video (google/dynibar's monocular loader).
// - Dynamic network: the frames at t + 1, 2, 3, t - 1, 2, 3 (kFlowOffsets' order); when asked,
//   the frame at t too (evaluation at a held-out camera).
// - Cross-time rendering: an anchor time j = t +- 1..anchor_max_step, and the frames at
//   j + 3 .. j - 3 other than t itself (now and then t too), ascending.
// - Static network: up to static_views frames strewn over t +- max_range: a random interval
//   between max(2, m - 2) and m = max_range / (static_views / 2), one frame at a random place in
//   each interval-long stretch, then the pool's best-ranked frames (every fifth, as the published
//   loader strides its distance ranking) until there are static_views; ascending.
// - Evaluating a rig's video (rig_static, where the pool repeats a viewpoint): as eval_nvidia.py,
//   every viewpoint but that of the frame at t gives its frame nearest in time (the earlier of
//   two); the held-out camera's own viewpoint at another time is among them. A rig of fewer
//   viewpoints than static_views then gives each one's next nearest, nearest first, until there
//   are static_views; ascending.
// - Drawn from Philox (RandomStream::kSourceSelection) with the target's own id, so the choice is
//   the same on any rank count and after a resume.
// - A pool is the target's candidates best first (prep's neighbour list); of several frames at
//   one time (a multi-camera rig), the best-ranked one serves that time.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/scene.h"

namespace mvibr::data {

struct DynibarSourceOptions {
  int max_range = 42;       // the static pool's reach in frames (configs/train_kid-running.txt)
  int static_views = 14;    // 2 x num_source_views
  int anchor_max_step = 3;  // min(3, epoch / init_decay_epoch + 1) in the published schedule
  double target_in_anchor = 0.005;  // how often the anchor's sources include the target itself
  // Also the frame at the target's own time (a held-out camera of a rig at a time the video
  // shows): the published evaluation's seventh dynamic source, eval_nvidia.py's offset 0.
  bool same_time = false;
  bool rig_static = false;  // evaluation: the rig rule for the static views (above)
};

struct SourceCandidate {
  int frame;           // the caller's index of the frame
  int time_index;      // its time step
  int viewpoint = -1;  // frames of one rig camera share it (viewpoint_ids); -1: unknown
};

// Ids that group frames of one viewpoint: cameras with the same intrinsics, size and pose
// (within 1e-6, relative to the camera centre's distance from the origin where that is over 1).
std::vector<int> viewpoint_ids(const std::vector<const PinholeCamera<double>*>& cameras);

struct DynibarSources {
  std::array<int, kFlowCount> dynamic;  // frame at t + kFlowOffsets[k], or -1 where there is none
  int same_time = -1;             // with DynibarSourceOptions::same_time: the frame at t, or -1
  int anchor_time = -1;           // j; -1 when no frame lies within anchor_max_step
  std::vector<int> anchor;        // ascending
  std::vector<int> static_views;  // ascending
};

// InvalidArgument unless max_range >= 1, static_views >= 2 and anchor_max_step >= 1.
DynibarSources select_dynibar_sources(const std::vector<SourceCandidate>& pool, int target_frame,
                                      int target_time, const DynibarSourceOptions& options,
                                      RandomKey key, uint32_t target_id);

}  // namespace mvibr::data
