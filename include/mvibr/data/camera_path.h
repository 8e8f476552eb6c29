// Camera paths to render a trained scene along, as IBRNet and NeRF make their videos: LLFF's
// forward-facing spiral around the scene's average camera, NeRF's orbit around an inward-looking
// capture, or a path through chosen views (rotations interpolated on the shortest arc, centres,
// intrinsics and depth bounds linearly).
// Each frame is a camera the scene never saw; its sources are the nearest training views
// (data/neighbours.h).
#pragma once

#include <optional>
#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

struct PathFrame {
  PinholeCamera<double> camera;
  double near_depth = 0, far_depth = 0;
  int time_index = 0;
};

struct SpiralOptions {
  int frames = 120;      // LLFF's N_views
  double rotations = 2;  // turns around the average camera (N_rots)
  double z_rate = 0.5;   // turns of the forward-backward motion per turn (zrate)
  int time_index = 0;    // the time step of a dynamic scene the path shows
};

// LLFF's render_path_spiral in OpenCV axes, from every view of the scene (as LLFF uses every
// pose): the average camera (mean centre, summed forward and up axes); radii the 90th
// percentile of the views' |offsets| from it along each of its axes; frame k at angle
// t = 2 pi rotations k / frames sits at centre + R (rx cos t, ry sin t, rz sin(z_rate t)) and
// looks at the focus point, focus_depth() ahead of the average camera, with the average up.
// Intrinsics and size are view 0's; depth bounds the smallest near and largest far of all views.
// Throws InvalidArgument for frames < 1, or cameras that face every way (a 360-degree capture,
// where the average camera looks nowhere: use interpolated_path).
std::vector<PathFrame> spiral_path(const Scene& scene, const SpiralOptions& options);

// LLFF's focus depth, disparity-weighted between close and far: 1 / (0.25 / close + 0.75 / far)
// with close = the smallest near_depth and far = 5 / 1.6 x the largest far_depth (LLFF's 0.9x the
// smallest bound and 5x the largest, given the margins 0.9 and 1.6 the importers put on bounds).
double focus_depth(const Scene& scene);

// The point nearest every view's optical axis (least squares): what an inward-looking capture
// looks at. None when the axes are nearly parallel (forward-facing captures, mean sin^2 of their
// angle to the mean axis under 0.03) or there are fewer than 2 views.
std::optional<Vec3<double>> point_views_look_at(const std::vector<View>& views);

struct OrbitOptions {
  int frames = 40;     // NeRF's 360-degree videos: 40 frames around
  int time_index = 0;  // the time step of a dynamic scene the path shows
};

// NeRF's 360-degree path (pose_spherical around the object) for captures that look inwards:
// a circle about the point nearest every view's optical axis (least squares), at the views'
// mean distance from it and mean elevation above it, turning about the views' mean up axis,
// starting at view 0's azimuth, every frame looking at that point. Intrinsics and size are view
// 0's; depth bounds the smallest near and largest far of all views. Throws InvalidArgument for
// frames < 1, or views whose axes are nearly parallel (forward-facing: use spiral_path).
std::vector<PathFrame> orbit_path(const Scene& scene, const OrbitOptions& options);

// `frames` frames through the views `keys` in order, frame f at t = f (K - 1) / (frames - 1)
// along the K keys: between keys a and a + 1 the rotation turns on the shortest arc from a's to
// a + 1's, and centre, intrinsics and depth bounds move linearly; a frame at a whole t is that
// key's camera exactly. Time steps are the nearer key's. Throws InvalidArgument for fewer than
// 2 keys or frames, or a key out of range.
std::vector<PathFrame> interpolated_path(const Scene& scene, const std::vector<int>& keys,
                                         int frames);

// `frames` frames through view `view`'s camera and depth bounds, at its time step: a fixed
// camera, to be given time by set_path_time. Throws InvalidArgument for frames < 1 or a view out
// of range.
std::vector<PathFrame> fixed_path(const Scene& scene, int view, int frames);

// The scene's time steps: its largest time_index + 1.
int time_steps(const Scene& scene);

// Time along a path (a dynamic scene's videos): every frame at step `step` (bullet time: time
// frozen while the camera moves), or with kSweepTime frame f at round(f (T - 1) / (frames - 1))
// of the scene's T steps (a fixed camera over time, or a camera and time path). Throws
// InvalidArgument for a step outside [0, T).
constexpr int kSweepTime = -1;
void set_path_time(const Scene& scene, int step, std::vector<PathFrame>* path);

}  // namespace mvibr::data
