// Pictures of the pose model's held-out predictions, what `mvibr render` draws for a pose run:
// every camera view of each instant with the true skeleton and the predicted one over it.
// - The true skeleton (the view's labels): green bones between each joint and its parent
//   (Scene::skeleton), visible joints as filled discs, hidden ones as hollow rings; each skeleton
//   outlined in a dark line, so that it stands out on any background.
// - The predicted skeleton on top: the predicted 3D joints projected with the view's camera
//   (geom/projection.h), red bones and discs; joints that did not triangulate or lie behind the
//   camera are left out with their bones.
// - Each view is upscaled (nearest) by pose_overlay_scale before drawing, so that lines a few
//   pixels wide stay readable on small images.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mvibr/data/image_drawing.h"
#include "mvibr/data/scene.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/train/config.h"

namespace mvibr::train {

constexpr data::Rgb kTrueSkeletonColour{40, 220, 60};
constexpr data::Rgb kPredictedSkeletonColour{235, 40, 40};
constexpr data::Rgb kOutlineColour{20, 20, 20};  // around each skeleton, against any background
// Widths and radii in pixels of the upscaled picture; the outline is kOutline wide.
constexpr double kBoneWidth = 3, kJointRadius = 3.5, kHiddenJointRing = 1.5, kOutline = 1;

// The upscale factor of a view width x height: the least that makes its longer side at least 384
// pixels, at most 4 (1 for views that large).
int pose_overlay_scale(int width, int height);

// The view's image upscaled by pose_overlay_scale with the true skeleton (view.pose, `skeleton`
// the parent of each joint) and the predicted joints `joints_world` [J,3] (metres;
// `triangulated` [J]: which are valid) drawn over it.
data::Image draw_pose_overlay(const data::View& view, const std::vector<int>& skeleton,
                              const std::vector<double>& joints_world,
                              const std::vector<uint8_t>& triangulated);

struct PoseInstantRender {
  int instant = 0;                      // index among the split's instants (evaluate order)
  double mpjpe_mm = 0;                  // evaluate_pose's on this instant alone (NaN: none)
  std::vector<std::string> view_names;  // the instant's cameras, the target first
  std::vector<std::string> png_files;   // their pictures' file names, in the report's dir
};

struct PoseRenderReport {
  uint64_t step = 0;  // the checkpoint's
  std::string dir;    // <png_root>/<step>
  std::string json;   // the list of instants: <dir>/pose_<split>.json
  std::vector<PoseInstantRender> instants;
};

// Loads `checkpoint` into a pose model of `config` and draws `count` instants of `split` from
// instant `first` on (count <= 0: to the last), every camera of each, into
// <png_root>/<step>/<file-safe view name>.png; then <png_root>/<step>/pose_<split>.json lists per
// instant its MPJPE and files. `on_instant` is called after each instant this process drew. With
// `comm`, its ranks share the instants (the i-th drawn on rank i % size), every rank gets the
// whole report and rank 0 writes the list. An instant out of range, no instants, data without a
// skeleton or a checkpoint of another model are InvalidArguments.
PoseRenderReport render_pose_run(
    const TrainConfig& config, const std::string& checkpoint, data::Split split, int first,
    int count, const std::string& png_root,
    const std::function<void(const PoseInstantRender&)>& on_instant = {},
    dist::Communicator* comm = nullptr);

}  // namespace mvibr::train
