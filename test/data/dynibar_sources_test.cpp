// DynIBaR's source selection (data/dynibar_sources.h) against the published loader's rules: the
// dynamic frames at t +- 1..3, the anchor and its frames, the static frames' stretches and reach,
// the fallback for short videos, and draws that depend on the key and the target only.
#include "mvibr/data/dynibar_sources.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <set>

#include "mvibr/core/error.h"

namespace mvibr::data {
namespace {

// A monocular video of `frames` frames (frame f at time f); the pool is every other frame, nearest
// in time first, as prep's neighbour ranking gives for a camera sweeping along a path.
std::vector<SourceCandidate> video_pool(int frames, int target) {
  std::vector<SourceCandidate> pool;
  for (int f = 0; f < frames; ++f) {
    if (f != target) pool.push_back({f, f});
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [&](const SourceCandidate& a, const SourceCandidate& b) {
                     return std::abs(a.time_index - target) < std::abs(b.time_index - target);
                   });
  return pool;
}

TEST(DynibarSources, DynamicFramesAreTheSixNeighboursInFlowOrder) {
  const DynibarSources s =
      select_dynibar_sources(video_pool(60, 30), 30, 30, DynibarSourceOptions{}, {7, 1}, 30);
  EXPECT_EQ(s.dynamic, (std::array<int, kFlowCount>{31, 32, 33, 29, 28, 27}));
  // At the video's start, the frames before it are missing.
  const DynibarSources first =
      select_dynibar_sources(video_pool(60, 1), 1, 1, DynibarSourceOptions{}, {7, 1}, 1);
  EXPECT_EQ(first.dynamic, (std::array<int, kFlowCount>{2, 3, 4, 0, -1, -1}));
}

// A held-out camera at time 30 (frame 100, not in its pool): evaluation adds the video's frame
// at time 30 (eval_nvidia.py's offset 0); training, whose targets are the video's frames, never.
TEST(DynibarSources, EvaluationAddsTheFrameAtTheTargetsOwnTime) {
  DynibarSourceOptions options;
  EXPECT_EQ(select_dynibar_sources(video_pool(60, -1), 100, 30, options, {7, 1}, 100).same_time,
            -1);
  options.same_time = true;
  const DynibarSources held_out =
      select_dynibar_sources(video_pool(60, -1), 100, 30, options, {7, 1}, 100);
  EXPECT_EQ(held_out.same_time, 30);
  EXPECT_EQ(held_out.dynamic, (std::array<int, kFlowCount>{31, 32, 33, 29, 28, 27}));
  // A video's own frame is its time's only frame: it has none.
  EXPECT_EQ(select_dynibar_sources(video_pool(60, 30), 30, 30, options, {7, 1}, 30).same_time, -1);
}

TEST(DynibarSources, AnchorsCoverTheirRangeAndBringTheirNeighbours) {
  for (int max_step : {1, 2, 3}) {
    DynibarSourceOptions options;
    options.anchor_max_step = max_step;
    std::map<int, int> offsets;
    int with_target = 0;
    for (uint64_t step = 0; step < 600; ++step) {
      const DynibarSources s =
          select_dynibar_sources(video_pool(60, 30), 30, 30, options, {3, step}, 30);
      const int offset = s.anchor_time - 30;
      ++offsets[offset];
      ASSERT_TRUE(offset != 0 && std::abs(offset) <= max_step) << offset;
      // Frames j - 3 .. j + 3, ascending; the target among them one time in 200.
      std::vector<int> expected, anchor = s.anchor;
      for (int f = s.anchor_time - 3; f <= s.anchor_time + 3; ++f) {
        if (f != 30) expected.push_back(f);
      }
      if (std::count(anchor.begin(), anchor.end(), 30) == 1) {
        ++with_target;
        anchor.erase(std::find(anchor.begin(), anchor.end(), 30));
      }
      EXPECT_EQ(anchor, expected) << "anchor " << s.anchor_time;
    }
    // Every allowed offset, each about equally often (600 / (2 max_step) expected).
    EXPECT_LE(with_target, 15);  // 3 expected
    ASSERT_EQ(offsets.size(), size_t(2 * max_step));
    for (const auto& [offset, count] : offsets) {
      EXPECT_NEAR(count, 600.0 / (2 * max_step), 0.3 * 600.0 / (2 * max_step)) << offset;
    }
  }
  // Near the start only the frames that exist serve as anchors.
  for (uint64_t step = 0; step < 100; ++step) {
    const DynibarSources s =
        select_dynibar_sources(video_pool(60, 0), 0, 0, DynibarSourceOptions{}, {3, step}, 0);
    EXPECT_GE(s.anchor_time, 1);
    EXPECT_LE(s.anchor_time, 3);
  }
}

TEST(DynibarSources, TheTargetJoinsTheAnchorsSourcesAsOftenAsAsked) {
  for (double p : {0.0, 1.0}) {
    DynibarSourceOptions options;
    options.target_in_anchor = p;
    for (uint64_t step = 0; step < 50; ++step) {
      const DynibarSources s =
          select_dynibar_sources(video_pool(60, 30), 30, 30, options, {3, step}, 30);
      const bool has_target = std::count(s.anchor.begin(), s.anchor.end(), 30) == 1;
      EXPECT_EQ(has_target, p == 1.0);
    }
  }
}

// The published loader: interval in [max(2, m - 2), m], m = max_range / 7, and one frame at
// t + interval i + U{1..interval} for i in [-7, 7): every static frame within -41..+42 of t, in a
// stretch of its own, 14 of them when the video reaches that far.
TEST(DynibarSources, StaticFramesAreStrewnOverTheRange) {
  std::set<int> intervals_seen, offsets_seen;
  for (uint64_t step = 0; step < 300; ++step) {
    const DynibarSources s = select_dynibar_sources(video_pool(200, 100), 100, 100,
                                                    DynibarSourceOptions{}, {5, step}, 100);
    ASSERT_EQ(s.static_views.size(), 14u);
    ASSERT_TRUE(std::is_sorted(s.static_views.begin(), s.static_views.end()));
    // Consecutive frames lie in consecutive stretches: their gaps are between 1 and 2 interval
    // - 1, and the whole spread at most 14 intervals.
    for (size_t i = 0; i < s.static_views.size(); ++i) {
      const int offset = s.static_views[i] - 100;
      EXPECT_GE(offset, -41);
      EXPECT_LE(offset, 42);
      EXPECT_NE(offset, 0);
      offsets_seen.insert(offset);
    }
    // The interval: the first frame is at -7 interval + U{1..interval}.
    const int first = s.static_views.front() - 100;
    for (int interval : {4, 5, 6}) {
      if (first >= -7 * interval + 1 && first <= -6 * interval) intervals_seen.insert(interval);
    }
  }
  EXPECT_EQ(intervals_seen, (std::set<int>{4, 5, 6}));
  EXPECT_GT(offsets_seen.size(), size_t(70));  // the jitter reaches nearly every offset
}

TEST(DynibarSources, ShortVideosFillTheStaticViewsFromThePool) {
  // 12 frames: the stretches reach few frames; the pool's every fifth best frame adds more.
  const DynibarSources s =
      select_dynibar_sources(video_pool(12, 6), 6, 6, DynibarSourceOptions{}, {9, 4}, 6);
  EXPECT_GE(s.static_views.size(), 3u);
  EXPECT_LE(s.static_views.size(), 11u);
  EXPECT_EQ(std::count(s.static_views.begin(), s.static_views.end(), 6), 0);
  const std::set<int> unique(s.static_views.begin(), s.static_views.end());
  EXPECT_EQ(unique.size(), s.static_views.size());
}

TEST(DynibarSources, DrawsDependOnTheKeyAndTheTargetOnly) {
  const auto pool = video_pool(100, 50);
  const DynibarSourceOptions options;
  const DynibarSources a = select_dynibar_sources(pool, 50, 50, options, {11, 5}, 50);
  const DynibarSources b = select_dynibar_sources(pool, 50, 50, options, {11, 5}, 50);
  EXPECT_EQ(a.anchor_time, b.anchor_time);
  EXPECT_EQ(a.static_views, b.static_views);
  int differ = 0;
  for (uint64_t step = 6; step < 16; ++step) {
    const DynibarSources c = select_dynibar_sources(pool, 50, 50, options, {11, step}, 50);
    differ += c.static_views != a.static_views;
  }
  EXPECT_GE(differ, 8);
}

// A rig's video as the cycling rig films it: frame t at time t from camera t % 4 (viewpoint t % 4),
// 24 frames; the target a held-out camera at time 5 (frame 100), whose own viewpoint is 2.
std::vector<SourceCandidate> rig_pool() {
  std::vector<SourceCandidate> pool;
  for (int t = 0; t < 24; ++t) pool.push_back({t, t, t % 4});
  std::stable_sort(pool.begin(), pool.end(),
                   [](const SourceCandidate& a, const SourceCandidate& b) {
                     return std::abs(a.time_index - 5) < std::abs(b.time_index - 5);
                   });
  return pool;
}

TEST(DynibarSources, EvaluationOnARigTakesEveryOtherViewpointsNearestFrame) {
  DynibarSourceOptions options;
  options.same_time = true;
  options.rig_static = true;
  options.static_views = 2;
  DynibarSources s = select_dynibar_sources(rig_pool(), 100, 5, options, {7, 1}, 100);
  EXPECT_EQ(s.same_time, 5);
  // Frame 5's viewpoint (1) is left out; viewpoint 0: time 4 (1 away, not 8); viewpoint 2: time 6
  // (not 2); viewpoint 3: times 3 and 7 are both 2 away, the earlier wins. One per viewpoint even
  // where static_views asks for fewer, as eval_nvidia.py.
  EXPECT_EQ(s.static_views, (std::vector<int>{3, 4, 6}));
  EXPECT_EQ(s.dynamic, (std::array<int, kFlowCount>{6, 7, 8, 4, 3, 2}));
  // More wanted than viewpoints: each one's next nearest, nearest first (7, then 2 and 8, 3 away,
  // the earlier first).
  options.static_views = 4;
  EXPECT_EQ(select_dynibar_sources(rig_pool(), 100, 5, options, {7, 1}, 100).static_views,
            (std::vector<int>{3, 4, 6, 7}));
  options.static_views = 5;
  EXPECT_EQ(select_dynibar_sources(rig_pool(), 100, 5, options, {7, 1}, 100).static_views,
            (std::vector<int>{2, 3, 4, 6, 7}));
  options.static_views = 6;
  s = select_dynibar_sources(rig_pool(), 100, 5, options, {7, 1}, 100);
  EXPECT_EQ(s.static_views, (std::vector<int>{2, 3, 4, 6, 7, 8}));

  // A monocular video repeats no viewpoint: the strewn rule, as in training.
  std::vector<SourceCandidate> video = video_pool(60, -1);
  for (SourceCandidate& c : video) c.viewpoint = c.frame;
  DynibarSourceOptions training = options;
  training.rig_static = false;
  EXPECT_EQ(select_dynibar_sources(video, 100, 30, options, {7, 1}, 100).static_views,
            select_dynibar_sources(video, 100, 30, training, {7, 1}, 100).static_views);
  // Without viewpoints (-1) the pool repeats none either.
  EXPECT_EQ(select_dynibar_sources(video_pool(60, -1), 100, 30, options, {7, 1}, 100).static_views,
            select_dynibar_sources(video, 100, 30, training, {7, 1}, 100).static_views);
}

TEST(DynibarSources, ViewpointsGroupCamerasWithOnePoseAndIntrinsics) {
  PinholeCamera<double> a = look_at_camera<double>({3, 0, 1}, {0, 0, 0}, {0, 0, 1}, 50, 64, 48);
  PinholeCamera<double> b = look_at_camera<double>({0, 3, 1}, {0, 0, 0}, {0, 0, 1}, 50, 64, 48);
  PinholeCamera<double> a_again = a, a_nudged = a, a_zoomed = a;
  a_again.c2w[3] += 1e-9;   // rounding
  a_nudged.c2w[3] += 1e-3;  // a millimetre in a scene of metres
  a_zoomed.fx *= 1.01;
  EXPECT_EQ(viewpoint_ids({&a, &b, &a_again, &a_nudged, &a_zoomed, &b}),
            (std::vector<int>{0, 1, 0, 2, 3, 1}));
}

TEST(DynibarSources, RejectsOptionsItCannotUse) {
  DynibarSourceOptions options;
  options.static_views = 1;
  EXPECT_THROW(select_dynibar_sources(video_pool(10, 5), 5, 5, options, {}, 5), InvalidArgument);
  options = {};
  options.max_range = 0;
  EXPECT_THROW(select_dynibar_sources(video_pool(10, 5), 5, 5, options, {}, 5), InvalidArgument);
  options = {};
  options.anchor_max_step = 0;
  EXPECT_THROW(select_dynibar_sources(video_pool(10, 5), 5, 5, options, {}, 5), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::data
