// CMU Panoptic Studio captures (`mvibr prep --input panoptic --source DIR`) as a pose data set:
// the hd cameras of one or more sequence folders, each frame that has a 3D body, one body a frame.
// - A sequence folder SEQ holds calibration_SEQ.json (cameras: name, type, resolution, K,
//   distCoef [k1 k2 p1 p2 k3], R, t in centimetres, x_camera = R x_world + t),
//   hdPose3d_stage1_coco19/body3DScene_NNNNNNNN.json (bodies: id, joints19 = 19 x [x y z
//   confidence], centimetres) and hdImgs/<camera>/<camera>_NNNNNNNN.jpg (or .png).
// - Only hd cameras are imported. Lengths become metres. The calibration's K is OpenCV's, whose
//   integer pixel coordinates are pixel centres as in mvibr, so cx and cy are taken as they are.
// - Lens distortion is removed: each image is resampled into the pinhole image of the same K
//   (undistort.h), so a label is the exact pinhole projection of its 3D joint.
// - With body_crop, each view is a square about the body's confident joints' projections,
//   body_crop of their box added each side, at `width` a side (learnable triangulation's person
//   crops; import_common.h's crop rule, as Human3.6M's).
// - Visibility: a joint is visible where it projects in front of the camera, into the image, and
//   its confidence exceeds min_confidence (the toolbox's 0.1). Panoptic has no occlusion labels,
//   so a joint hidden behind the body or another person still counts as visible.
// - Joints: coco19 in Panoptic's order, but BodyCenter first (the root is joint 0 in mvibr's
//   skeletons): mvibr joint j is Panoptic joint kPanopticJointOrder[j].
// - Views are sequence-major, then frame, then camera: "171204_pose1/00000160/00_03"; each
//   instant's first camera is a sample's target, the others its neighbours. The last
//   test_sequences sequences (by folder name) are the test split.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

constexpr int kPanopticJoints = 19;
extern const char* const kPanopticJointNames[kPanopticJoints];  // mvibr's order
extern const int kPanopticParents[kPanopticJoints];
extern const int kPanopticJointOrder[kPanopticJoints];

struct PanopticOptions {
  std::vector<std::string> cameras;  // hd camera names; empty: every hd camera with images
  int frame_step = 1;                // every k-th frame that has a 3D body file
  int max_frames = 0;                // per sequence, after skipping; 0: all
  int test_sequences = -1;           // the last K sequences; -1: 1 when there are 2 or more
  int width = 0, height = 0;         // output size (0: full, or kept aspect from the other)
  int body = -1;                     // the body id to import; -1: each frame's first body
  double min_confidence = 0.1;       // a joint at or below it is not visible
  double body_crop = 0;  // > 0: square views about the joints, this part of the box added a side
  std::function<void(size_t, size_t)> on_image_read;  // (read, total) after each image
};

// A folder of sequence folders, or one sequence folder, as a validated Scene with neighbours.
// Throws InvalidArgument, one line naming the file and what is wrong, on any bad input.
Scene import_panoptic(const std::string& source, const PanopticOptions& options);

}  // namespace mvibr::data
