// Human3.6M (`mvibr prep --input human36m --source DIR --calibration FILE`) as a pose data set:
// the layout learnable triangulation trains on, h36m-fetch's processed folder, and the cameras of
// H36M's metadata.xml (which h36m-fetch ships) or of una-dinosauria's cameras.h5.
// - DIR holds subject folders S<n>, each action folders <Action>-<sub> with annot.h5 and
//   imageSequence/<camera>/img_NNNNNN.jpg (NNNNNN: annot's frame, from 1); a folder without
//   annot.h5 (MySegmentsMat) is not an action. DIR may also be one subject folder.
// - annot.h5: per row one camera's frame: camera (N), frame (N) and pose/3d (N x 32 x 3, H36M's
//   32 joints in millimetres in that camera's frame: D3_Positions_mono); pose/2d (N x 32 x 2,
//   pixels), where present, is only compared with the calibration's projection.
// - metadata.xml: <w0>'s 300 numbers, decoded as 3d-pose-baseline's cameras.py does; or
//   cameras.h5: subject<n>/camera<k>/{R, T, f, c, k, p, Name}; x_camera = R^T (x_world - T) in
//   millimetres; f, c in pixels; k = [k1 k2 k3], p = [p1 p2] in OpenCV's model (as learnable
//   triangulation undistorts). Name is the camera's id, the image folder's name.
// - World joints: each camera's pose/3d taken to the world by its calibration; the cameras must
//   agree within kHuman36mAgreementMm, and their mean is the label. Millimetres become metres.
// - Joints: H36M's usual 17 (kHuman36mJointIndex), in the order of the built-in pose data set's
//   skeleton (pose_scene.h), pelvis first.
// - Images: undistorted into the pinhole image of (f, c), centre-cropped to the smallest
//   camera's size (1000x1002 and 1000x1000 give 1000x1000), then downscaled to --width/--height.
//   With body_crop, each view is instead a square about its joints' projections, body_crop of its
//   side added each side (learnable triangulation's person boxes), at --width a side.
//   Labels are the pinhole projections of the world joints. H36M has no occlusion labels: a joint
//   is visible where it projects in front of the camera and into the image.
// - Instants: the frames every chosen camera has, every frame_step-th, at most max_frames an
//   action. An action without one of the chosen cameras is skipped with a warning (learnable
//   triangulation's S11/Directions-2 has no 54138969).
// - S9's Greeting-2, SittingDown-2 and Waiting-1 have damaged 3D labels. Learnable
//   triangulation's published configs keep them (with_damaged_actions: true), and so does the
//   import; skip_damaged_actions leaves them out, a warning line each (its dataset's default).
// - Split by subject: test_subjects are the test split. By default protocol 1's S9 and S11, where
//   other subjects remain to train on (else nothing is held out).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/data/pose_scene.h"
#include "mvibr/data/scene.h"

namespace mvibr::data {

constexpr int kHuman36mSourceJoints = 32;
extern const int kHuman36mJointIndex[kPoseJoints];  // H36M's index of the skeleton's joint j
constexpr double kHuman36mAgreementMm = 10;
constexpr double kHuman36mFrameRate = 50;
extern const std::vector<std::string> kProtocolTestSubjects;  // S9, S11
extern const std::vector<std::string> kDamagedActions;        // "S9/Greeting-2", ...

struct Human36mOptions {
  std::string calibration;                                // metadata.xml or cameras.h5
  std::vector<std::string> cameras;                       // camera ids; empty: the calibration's
  std::optional<std::vector<std::string>> test_subjects;  // unset: kProtocolTestSubjects
  int frame_step = 1;                                     // every k-th frame of an action
  int max_frames = 0;                                     // per action, after skipping; 0: all
  int width = 0, height = 0;                              // output size (0: as cropped)
  bool skip_damaged_actions = false;                      // leave kDamagedActions out
  double body_crop = 0;  // > 0: square views about the joints, this part of the box added a side
  std::function<void(size_t, size_t)> on_image_read;  // (read, total) after each image
};

// A processed folder (or one subject's) as a validated Scene with neighbours. Throws
// InvalidArgument, one line naming the file and what is wrong, on any bad input.
Scene import_human36m(const std::string& source, const Human36mOptions& options);

}  // namespace mvibr::data
