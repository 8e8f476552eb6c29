// What every importer shares, so that all formats convert poses, load images, apply options and
// check their input in the same way and with the same words. Private to src/data/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mvibr/data/image_io.h"
#include "mvibr/data/importers.h"
#include "mvibr/data/undistort.h"

namespace mvibr::data {

// IBRNet's margins on LLFF's depth bounds (llff.py: near * 0.9, far * 1.6), which the COLMAP
// importer applies to the same percentiles.
constexpr double kBoundsNearMargin = 0.9, kBoundsFarMargin = 1.6;

uint8_t background_level(Background background);

// LLFF, COLMAP: the folder of images to read and the downscale it holds (0: unknown, a folder
// named by images_folder): images_folder, else images_<M> for the largest M no larger than the
// factor wanted (downsample, or full_width / target_width) that `scene_directory` holds, else
// images.
struct ImagesFolder {
  std::string name;
  int factor = 1;
};
ImagesFolder choose_images_folder(const std::string& scene_directory, const ImportOptions& options,
                                  int full_width);

// The size the frames of a view full_width x full_height are written at (downsample or
// target_width); InvalidArgument naming `where` when that would enlarge them.
struct FrameSize {
  int width, height;
};
FrameSize output_size(int full_width, int full_height, const ImportOptions& options,
                      const std::string& where);

// "640x480".
std::string size_text(int width, int height);

// Pose data sets: the size views of width x height are written at: wanted_width and/or
// wanted_height (0: the images'), the aspect kept where only one is given. InvalidArgument (it
// names --width and --height) when both change the aspect or the views would grow.
FrameSize pose_output_size(int width, int height, int wanted_width, int wanted_height);

// Pose data sets: a view's labels of world joints (metres, the skeleton's order): their pinhole
// projections, and visible where in front of the camera, inside the image and `confident`.
PoseLabels label_joints(const std::vector<Vec3<double>>& joints, const std::vector<bool>& confident,
                        const PinholeCamera<double>& camera);

// Pose data sets' body crops (--body_crop M, learnable triangulation's person crops): each view a
// square about its joints' projections, M of the joints' box added each side.
// - body_crop_size: the views' size, --width a side; InvalidArgument naming `format` without
//   --width or with --height.
// - crop_camera: the camera a view is cut from the photograph of `full` with (at the photograph's
//   scale): `full` cropped about its centre to width x height, or with M > 0 the square about the
//   projections of `joints` (metres) in front of it, reaching past the photograph where it must.
//   InvalidArgument naming `view` when no joint is in front or the square is over 4 photograph
//   sides (labels gone wrong).
// - crop_view_rgb: the view `camera` (crop, scaled to the views' size) from the photograph `rgb`
//   of `full` through its lens `d`. Shrinking, it is resampled into `crop` and then area-averaged
//   (no aliasing); growing, resampled straight into `camera`.
FrameSize body_crop_size(const std::string& format, int wanted_width, int wanted_height);
PinholeCamera<double> crop_camera(const PinholeCamera<double>& full, int width, int height,
                                  const std::vector<Vec3<double>>& joints, double body_crop,
                                  const std::string& view);
std::vector<uint8_t> crop_view_rgb(const std::vector<uint8_t>& rgb,
                                   const PinholeCamera<double>& full, const Distortion& d,
                                   const PinholeCamera<double>& crop,
                                   const PinholeCamera<double>& camera);

// Scene::read_rgb for importers that defer their pixels: `read` (view index -> its pixels),
// telling `progress` (when set) of each view read, one call at a time: (views read, total).
std::function<std::vector<uint8_t>(size_t)> reads_with_progress(
    std::function<std::vector<uint8_t>(size_t)> read, size_t total,
    std::function<void(size_t, size_t)> progress);

// Brings a view (camera and rgb at the size read) to `size`: area-downscaled, intrinsics scaled;
// InvalidArgument naming `where` when what was read is smaller.
void fit_view(View* view, FrameSize size, const std::string& where);

// The splits of views in a format without splits, by index and name: test_ids when given (every
// id must name a view), else every llffhold-th view.
std::vector<Split> holdout_splits(const std::vector<std::string>& names,
                                  const ImportOptions& options, const std::string& where);

// The indices of `paths` whose file exists. The missing ones are an InvalidArgument (strict) or
// a warning on `scene` that counts them and names them relative to `base`; all missing is
// always an error. `where`: what lists them.
std::vector<size_t> existing_images(const std::vector<std::string>& paths, const std::string& base,
                                    const ImportOptions& options, const std::string& where,
                                    Scene* scene);

// Depth bounds where the format has none: the camera-z depth d of the point every view looks at
// (camera_path.h), near d / 2 and far 1.5 d of the nearest and farthest view (NeRF's 2 and 6
// for cameras 4 from the object); scene->depth_bounds_from says so. False when the views look
// nearly the same way (no such point).
bool bounds_from_cameras(Scene* scene);

// OpenGL / Blender camera axes (x right, y up, z backward) to OpenCV (x right, y down, z
// forward): negates columns 1 and 2 of a row-major 3x4 camera-to-world pose.
void opengl_to_opencv(double c2w[12]);

// Sets camera->c2w and w2c from a row-major 3x4 OpenCV camera-to-world pose, refusing a
// non-finite or non-rigid one with InvalidArgument "<where>: <what is wrong>"; the rotation of
// an accepted pose is made orthonormal to double precision.
void set_pose(PinholeCamera<double>* camera, const double c2w[12], const std::string& where);

// The split of view `index` in a format without splits: every llffhold-th view is a test view.
Split holdout_split(size_t index, int llffhold);

// The indices of the views to keep: the first `max_per_split` of each split (all when 0).
std::vector<size_t> first_views_per_split(const std::vector<Split>& splits, int max_per_split);

template <typename T>
std::vector<T> select(const std::vector<T>& items, const std::vector<size_t>& indices) {
  std::vector<T> kept;
  kept.reserve(indices.size());
  for (size_t i : indices) kept.push_back(items[i]);
  return kept;
}

// Images read in parallel and composited to RGB (channels == 3). Every file is attempted; the
// first failure in file order is rethrown.
// options.on_image_read hears of each image read.
std::vector<Image> load_rgb_images(const std::vector<std::string>& paths, uint8_t background,
                                   const ImportOptions& options);

// Throws InvalidArgument naming `path` when `image` is not width x height.
void require_size(const Image& image, const std::string& path, int width, int height,
                  const std::string& expected_by);

// Depth percentile `fraction` (0..1) of unsorted values, interpolated as numpy.percentile does.
double percentile(std::vector<double> values, double fraction);

// The PNG and JPEG files (.png, .jpg, .jpeg in any case) directly in `folder`, by name.
std::vector<std::string> image_files_in(const std::string& folder);

// The last component of a directory path ("lego" for "data/lego/"), to name a scene.
std::string directory_name(const std::string& directory);

// A whole text file; InvalidArgument naming it when it cannot be read.
std::string read_text_file(const std::string& path);

// Applies the near/far overrides (naming them in depth_bounds_from), numbers the distinct times,
// validates.
void finish_scene(Scene* scene, const ImportOptions& options);

}  // namespace mvibr::data
