// The built-in multi-view pose data set of `mvibr prep --input synthetic_pose`: a procedural
// 17-joint skeleton in motion, seen by a calibrated camera ring, ray traced on the CPU so that the
// 3D joints, their 2D projections and their visibility are exact and need no files (no public
// multi-view pose set can be downloaded here; ../shared/POSE.md).
// - The skeleton is Human3.6M's 17 joints (kPoseJointNames, kPoseParents). Each sequence draws
//   its bone lengths (a body scale and a per-bone jitter, left and right alike), its heading and
//   path, and walks every joint angle (an Ornstein-Uhlenbeck walk per angle, within limits).
// - Images: limbs as shaded capsules, one colour per limb (left and right differ), the head a
//   sphere, over a textured floor and a textured wall around the stage, with pillars that hide
//   parts of the body from some cameras. Colours, textures and pillars change per sequence.
// - A joint is visible in a view when it projects into the image and nothing (a pillar, another
//   body part) lies in front of its own limbs' surface along the camera ray.
// - Views are sequence-major, then frame, then camera: "synthetic_pose/s02/f013/c3". Each
//   instant's camera 0 is a sample's target, its neighbours the instant's other cameras in order,
//   so a training sample is one instant seen by every camera. The last test_sequences sequences
//   are the test split (held out by sequence).
// - World frame: z up, metres, the floor at z = 0, the stage centred on the origin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

constexpr int kPoseJoints = 17;
// pelvis, right leg (hip, knee, ankle), left leg, spine, thorax, neck, head, left arm (shoulder,
// elbow, wrist), right arm: Human3.6M's order as learnable triangulation uses it.
extern const char* const kPoseJointNames[kPoseJoints];
extern const int kPoseParents[kPoseJoints];

struct PoseSceneOptions {
  int width = 128, height = 128;  // image size in pixels
  int n_cameras = 4;              // in a ring around the stage, at least 2
  int n_sequences = 8;
  int n_frames = 40;          // per sequence
  int n_test_sequences = 2;   // the last ones; 0: none
  double frame_rate = 25;     // frames per second: the walks' time step
  double fov_x_degrees = 34;  // horizontal field of view; square pixels
  double ring_radius = 4.5;   // camera distance from the stage's vertical axis
  int n_pillars = 2;          // occluders per sequence, between the cameras and the stage
  int samples_per_side = 2;   // anti-aliasing: 2 is 2x2 samples per pixel
  uint64_t seed = 0;          // bodies, motion, colours, pillars and camera jitter
};

// Throws InvalidArgument naming the first option out of range.
void validate_pose_scene_options(const PoseSceneOptions& options);

// The whole data set: every view with its PoseLabels, the skeleton, the targets and their
// neighbours (Scene::neighbours is filled: prep keeps it).
Scene make_pose_scene(const PoseSceneOptions& options);

}  // namespace mvibr::data
