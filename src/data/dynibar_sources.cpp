// DynIBaR's source selection (dynibar_sources.h).
#include "mvibr/data/dynibar_sources.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::data {
namespace {

// Draws in [0, count) from the target's stream; `index` says which draw.
struct Draws {
  RandomKey key;
  uint32_t target_id;
  int below(int count, uint32_t index) const {
    const float u = philox_uniform(key, RandomStream::kSourceSelection, target_id, index);
    return std::min(count - 1, int(u * float(count)));
  }
};

constexpr uint32_t kAnchorDraw = 0, kIntervalDraw = 1, kTargetInAnchorDraw = 2, kFirstSlotDraw = 3;

bool same_viewpoint(const PinholeCamera<double>& a, const PinholeCamera<double>& b) {
  const double scale = std::max(1.0, norm(a.center()));
  bool same = a.width == b.width && a.height == b.height;
  for (int i = 0; i < 12 && same; ++i) same = std::abs(a.c2w[i] - b.c2w[i]) <= 1e-6 * scale;
  const double ka[4] = {a.fx, a.fy, a.cx, a.cy}, kb[4] = {b.fx, b.fy, b.cx, b.cy};
  for (int i = 0; i < 4 && same; ++i) same = std::abs(ka[i] - kb[i]) <= 1e-6 * std::abs(ka[i]);
  return same;
}

// eval_nvidia.py's static views: each viewpoint but the one at t, its frame nearest in time;
// then, while there are fewer than `wanted`, each one's next nearest, nearest first.
std::vector<int> rig_static_views(const std::vector<SourceCandidate>& pool, int target_frame,
                                  int target_time, int same_time_frame, int wanted) {
  int excluded = -1;
  for (const SourceCandidate& c : pool) {
    if (c.frame == same_time_frame) excluded = c.viewpoint;
  }
  // Per viewpoint its frames by distance in time, the earlier of two first.
  std::map<int, std::vector<const SourceCandidate*>> by_viewpoint;
  for (const SourceCandidate& c : pool) {
    if (c.frame == target_frame || c.viewpoint < 0 || c.viewpoint == excluded) continue;
    by_viewpoint[c.viewpoint].push_back(&c);
  }
  const auto nearer = [&](const SourceCandidate* a, const SourceCandidate* b) {
    const int gap_a = std::abs(a->time_index - target_time);
    const int gap_b = std::abs(b->time_index - target_time);
    return gap_a != gap_b ? gap_a < gap_b : a->time_index < b->time_index;
  };
  for (auto& [viewpoint, frames] : by_viewpoint) std::sort(frames.begin(), frames.end(), nearer);
  std::set<int> chosen;
  for (size_t round = 0;; ++round) {
    std::vector<const SourceCandidate*> next;
    for (const auto& [viewpoint, frames] : by_viewpoint) {
      if (round < frames.size()) next.push_back(frames[round]);
    }
    if (next.empty()) break;
    std::sort(next.begin(), next.end(), nearer);
    for (const SourceCandidate* c : next) {
      if (round > 0 && int(chosen.size()) >= wanted) break;
      chosen.insert(c->frame);
    }
    if (int(chosen.size()) >= wanted) break;
  }
  return std::vector<int>(chosen.begin(), chosen.end());
}

bool repeats_a_viewpoint(const std::vector<SourceCandidate>& pool) {
  std::set<int> seen;
  for (const SourceCandidate& c : pool) {
    if (c.viewpoint >= 0 && !seen.insert(c.viewpoint).second) return true;
  }
  return false;
}

}  // namespace

std::vector<int> viewpoint_ids(const std::vector<const PinholeCamera<double>*>& cameras) {
  std::vector<int> ids(cameras.size());
  std::vector<const PinholeCamera<double>*> firsts;  // the first camera of each viewpoint
  for (size_t i = 0; i < cameras.size(); ++i) {
    size_t id = 0;
    while (id < firsts.size() && !same_viewpoint(*firsts[id], *cameras[i])) ++id;
    if (id == firsts.size()) firsts.push_back(cameras[i]);
    ids[i] = int(id);
  }
  return ids;
}

DynibarSources select_dynibar_sources(const std::vector<SourceCandidate>& pool, int target_frame,
                                      int target_time, const DynibarSourceOptions& options,
                                      RandomKey key, uint32_t target_id) {
  if (options.max_range < 1 || options.static_views < 2 || options.anchor_max_step < 1) {
    throw InvalidArgument(
        "DynIBaR source selection: need max_range >= 1, static_views >= 2 and "
        "anchor_max_step >= 1");
  }
  const Draws draws{key, target_id};
  std::map<int, int> at_time;  // time step -> the best-ranked frame at that time
  for (const SourceCandidate& c : pool) {
    if (c.frame != target_frame) at_time.emplace(c.time_index, c.frame);
  }
  const auto frame_at = [&](int time) {
    const auto it = at_time.find(time);
    return it == at_time.end() ? -1 : it->second;
  };

  DynibarSources s;
  for (int k = 0; k < kFlowCount; ++k)
    s.dynamic[size_t(k)] = frame_at(target_time + kFlowOffsets[k]);
  if (options.same_time) s.same_time = frame_at(target_time);

  // The anchor: among +1..+step, -1..-step (the published order), those with a frame.
  std::vector<int> anchor_offsets;
  for (int sign : {1, -1}) {
    for (int o = 1; o <= options.anchor_max_step; ++o) {
      if (frame_at(target_time + sign * o) >= 0) anchor_offsets.push_back(sign * o);
    }
  }
  if (!anchor_offsets.empty()) {
    s.anchor_time =
        target_time + anchor_offsets[size_t(draws.below(int(anchor_offsets.size()), kAnchorDraw))];
    std::set<int> anchor;
    for (int o = 3; o >= -3; --o) {
      const int frame = frame_at(s.anchor_time + o);
      if (frame >= 0) anchor.insert(frame);
    }
    const float u =
        philox_uniform(key, RandomStream::kSourceSelection, target_id, kTargetInAnchorDraw);
    if (double(u) < options.target_in_anchor) anchor.insert(target_frame);
    s.anchor.assign(anchor.begin(), anchor.end());
  }

  if (options.rig_static && repeats_a_viewpoint(pool)) {
    s.static_views = rig_static_views(pool, target_frame, target_time, frame_at(target_time),
                                      options.static_views);
    return s;
  }
  // Static views: one per interval-long stretch over t - n interval .. t + n interval.
  const int half = options.static_views / 2;
  const int longest = std::max(1, options.max_range / half);
  const int shortest = std::min(longest, std::max(2, longest - 2));
  const int interval = shortest + draws.below(longest - shortest + 1, kIntervalDraw);
  std::set<int> chosen;
  for (int slot = -half; slot < half; ++slot) {
    const int jitter = 1 + draws.below(interval, kFirstSlotDraw + uint32_t(slot + half));
    const int frame = frame_at(target_time + interval * slot + jitter);
    if (frame >= 0) chosen.insert(frame);
  }
  // Then the pool's best-ranked frames, every fifth, while there are too few.
  for (size_t i = 0; i < pool.size() && int(chosen.size()) < options.static_views; i += 5) {
    if (pool[i].frame != target_frame) chosen.insert(pool[i].frame);
  }
  s.static_views.assign(chosen.begin(), chosen.end());
  return s;
}

}  // namespace mvibr::data
