// A scene as every importer and the synthetic generator deliver it, before `mvibr prep` writes
// it to HDF5: views (image + camera + depth bounds + time + split) and, computed at prep, each
// view's source-view neighbours. Cameras follow the OpenCV convention of geom/camera.h
// whatever the input's convention was; importers convert.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mvibr/geom/camera.h"

namespace mvibr::data {

enum class Split : int8_t { kTrain = 0, kValidation = 1, kTest = 2 };

const char* split_name(Split split);

// The frames a video frame's optical flows lead to, as time-index offsets within its video, in
// DynIBaR's order (its nearest_pose_ids): flow k goes from this frame to frame t + offset k.
constexpr int kFlowOffsets[6] = {1, 2, 3, -1, -2, -3};
constexpr int kFlowCount = 6;

// What DynIBaR's losses read of a frame of a dynamic scene, per pixel, row-major [height][width]:
// empty in static scenes (and every vector empty or every vector full, in a scene all or none).
struct FrameMotion {
  std::vector<float> disparity;  // 1 / camera-z depth; 0 where nothing is hit (infinitely far)
  // 1 where the content moves: DynIBaR's dynamic_masks (tight: within the moving objects).
  std::vector<uint8_t> motion_mask;
  // 1 where content may move: its static_masks (loose: covers every moving pixel); the pixels
  // with 0 are certainly static, the static model's own loss.
  std::vector<uint8_t> static_mask;
  // [kFlowCount][height][width][2]: where each pixel's point is in frame t + kFlowOffsets[k], in
  // pixels (du, dv); flow_valid [kFlowCount][height][width] is 1 where that point is seen there
  // (0 where it is occluded, leaves the image, or the frame is past the video's ends).
  std::vector<float> flow;
  std::vector<uint8_t> flow_valid;

  bool empty() const { return disparity.empty(); }
};

// A pose data set's labels of one view (Scene::skeleton's J joints): the joints in world
// coordinates [J][3] (metres; the same in every view of an instant), their projections into this
// view [J][2] (pixels, geom/camera.h's convention), and visibility [J]: 1 where the joint is in
// the image and not hidden. Empty outside pose data sets.
struct PoseLabels {
  std::vector<double> joints_world;
  std::vector<float> joints_image;
  std::vector<uint8_t> visible;

  bool empty() const { return joints_world.empty(); }
};

// One image of a scene. Pixels are RGB uint8, row-major [height][width][3]; camera.width and
// camera.height are the image size. Every view of a scene has the same size.
struct View {
  std::string name;  // where it came from: an image file, or "synthetic/t003/v012"
  PinholeCamera<double> camera;
  double near_depth = 0, far_depth = 0;  // camera-z range of what this view sees
  double time = 0;                       // the frame's time stamp (0 in static scenes)
  int time_index = 0;                    // index of `time` among the scene's distinct times
  Split split = Split::kTrain;
  std::vector<uint8_t> rgb;
  FrameMotion motion;  // dynamic scenes with flows and masks (DynIBaR's data); else empty
  PoseLabels pose;     // pose data sets; else empty
  // Whether the view is a sample's target. False: only ever a source (pose data sets: an
  // instant's cameras but the first, which are its target's neighbours).
  bool target = true;
};

struct Scene {
  std::string name;           // "lego", "fern", "synthetic", ...
  std::string source_format;  // synthetic | blender | llff | colmap | dnerf
  bool dynamic = false;
  std::vector<View> views;
  // Where the views' depth bounds came from ("LLFF's poses_bounds.npy", "--near/--far", ...).
  std::string depth_bounds_from;
  // What an importer skipped or assumed, one line each, for `mvibr prep` to print.
  std::vector<std::string> warnings;
  // neighbours[i]: the views that serve as sources when view i is the target, best first
  // (filled by select_neighbours at prep; never contains i itself).
  std::vector<std::vector<int>> neighbours;
  // Pose data sets: each joint's parent (-1 for the root, else a lower index) and name; every
  // view has PoseLabels of these joints. Empty elsewhere.
  std::vector<int> skeleton;
  std::vector<std::string> joint_names;
  // Scenes too large to hold (Human3.6M): view i's pixels for the views whose rgb is empty, read
  // when the shards are written (a block of frames at a time, in parallel) rather than held.
  // Empty: every view holds its rgb.
  std::function<std::vector<uint8_t>(size_t)> read_rgb;
};

// Throws InvalidArgument naming the scene, the view and what is wrong: no views, sizes that
// differ or do not match the pixel count (views left to Scene::read_rgb are checked as it reads
// them), motion arrays of the wrong size (or on some views
// only), non-finite flows or disparities, non-finite or non-rigid poses, non-positive focal
// lengths, near >= far or near <= 0, neighbour indices out of range, pose labels that disagree
// with the skeleton (missing joints, non-finite values), a view that is no target and no
// target's source.
void validate_scene(const Scene& scene);

// Checks one camera-to-world pose (3x4, row-major): finite, rotation orthonormal within
// 1e-4 and right-handed. Returns an empty string when fine, else what is wrong.
std::string check_rigid_pose(const double c2w[12]);

}  // namespace mvibr::data
