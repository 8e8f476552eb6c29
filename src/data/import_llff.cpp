// LLFF scenes: poses_bounds.npy plus images/ (full size) or images_N/ (downscaled by N).
//
// poses_bounds.npy: one row of 17 float64 per image (sorted by file name): a 3x5 matrix
//   flattened row-major, [R | t | (H, W, focal)] with H, W, focal of the full-size images, then
//   the view's near and far bounds (0.1 and 99.9 percentiles of its COLMAP point depths).
// Poses: LLFF's rotation columns are the camera axes [down, right, backward] in world
//   coordinates (imgs2poses.py reorders COLMAP's). OpenCV's [right, down, forward] is then
//   [col 1, col 0, -col 2]: the same camera as NeRF's [col 1, -col 0, col 2] (OpenGL) with
//   IBRNet's negation of columns 1 and 2. No recentring or rescaling (NeRF's recenter_poses,
//   bd_factor): IBRNet only sees relative geometry and depths scale with the bounds.
// Intrinsics: focal scales with the image actually read, fx = focal * W_img / W and
//   fy = focal * H_img / H (focal / N for LLFF's exact 1/N downscales); cx = W_img/2 - 0.5
//   (importers.h). W_img / W and H_img / H must agree within a pixel.
// Near/far: each view's own bounds with IBRNet's margins, near * 0.9 and far * 1.6 (IBRNet
//   applies them to the scene's smallest and largest bound).
// Splits: image i is a test image when i % llffhold == 0 (NeRF, IBRNet), else train.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/npy.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> sorted_image_files(const std::string& scene_directory,
                                            const std::string& folder,
                                            const ImportOptions& options) {
  const fs::path directory = fs::path(scene_directory) / folder;
  if (!fs::is_directory(directory)) {
    std::string present;
    for (const fs::directory_entry& entry : fs::directory_iterator(scene_directory)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && name.compare(0, 6, "images") == 0) present += " " + name;
    }
    const bool chosen = !options.images_folder.empty() || options.downsample == 1;
    throw InvalidArgument(
        (chosen ? directory.string() + ": no such image folder"
                : (fs::path(scene_directory) / ("images_" + std::to_string(options.downsample)))
                          .string() +
                      ": no such image folder, nor a larger images_<M> or images to downscale") +
        " (present:" + (present.empty() ? " none" : present) + ")");
  }
  return image_files_in(directory.string());
}

}  // namespace

Scene import_llff(const std::string& scene_path, const ImportOptions& options) {
  // detect_format also accepts the poses_bounds.npy file itself.
  const std::string path =
      fs::is_regular_file(scene_path) ? fs::path(scene_path).parent_path().string() : scene_path;
  const std::string bounds_file = (fs::path(path) / "poses_bounds.npy").string();
  const NpyArray table = read_npy(bounds_file);
  if (table.shape.size() != 2 || table.shape[1] != 17 || table.shape[0] == 0) {
    throw InvalidArgument(bounds_file + ": expected shape (N, 17)");
  }
  const size_t count = table.shape[0];
  const double full_width = table.at(9), full_height = table.at(4);
  if (!(full_width >= 1 && full_width <= 65536 && full_height >= 1 && full_height <= 65536)) {
    throw InvalidArgument(bounds_file + " row 0: H and W must be sizes in pixels");
  }
  const ImagesFolder folder = choose_images_folder(path, options, int(full_width));
  const std::vector<std::string> files = sorted_image_files(path, folder.name, options);
  if (files.size() != count) {
    throw InvalidArgument(bounds_file + ": has " + std::to_string(count) + " poses but " +
                          fs::path(files.empty() ? path : files[0]).parent_path().string() +
                          " has " + std::to_string(files.size()) + " images");
  }

  const std::vector<Split> splits = holdout_splits(files, options, path);
  const std::vector<size_t> kept = first_views_per_split(splits, options.max_views_per_split);

  // Poses and bounds first, so that a bad row is reported before any image is decoded.
  Scene scene;
  scene.name = directory_name(path);
  scene.source_format = "llff";
  scene.depth_bounds_from =
      "LLFF's poses_bounds.npy (each view's COLMAP point depths), near x0.9, far x1.6";
  scene.views.resize(kept.size());
  std::vector<std::string> wheres;
  for (size_t k = 0; k < kept.size(); ++k) {
    const size_t i = kept[k];
    wheres.push_back(bounds_file + " row " + std::to_string(i));
    const auto m = [&](int r, int c) { return table.at(i * 17 + size_t(r) * 5 + size_t(c)); };
    const double near = table.at(i * 17 + 15), far = table.at(i * 17 + 16);
    if (!(near > 0 && near < far && std::isfinite(far))) {
      throw InvalidArgument(wheres[k] + ": bounds must satisfy 0 < near < far");
    }
    for (const double hwf : {m(0, 4), m(1, 4), m(2, 4)}) {
      if (!(hwf > 0 && std::isfinite(hwf))) {
        throw InvalidArgument(wheres[k] + ": H, W and focal must be positive numbers");
      }
    }
    View& view = scene.views[k];
    const double c2w[12] = {m(0, 1), m(0, 0), -m(0, 2), m(0, 3),  //
                            m(1, 1), m(1, 0), -m(1, 2), m(1, 3),  //
                            m(2, 1), m(2, 0), -m(2, 2), m(2, 3)};
    set_pose(&view.camera, c2w, wheres[k]);
    view.near_depth = kBoundsNearMargin * near;
    view.far_depth = kBoundsFarMargin * far;
    view.split = splits[i];
  }

  const std::vector<std::string> kept_files = select(files, kept);
  std::vector<Image> images =
      load_rgb_images(kept_files, background_level(options.background), options);
  for (size_t k = 0; k < kept.size(); ++k) {
    const size_t i = kept[k];
    const double focal = table.at(i * 17 + 14);
    const double row_height = table.at(i * 17 + 4), row_width = table.at(i * 17 + 9);
    const Image& image = images[k];
    require_size(image, kept_files[k], images[0].width, images[0].height, "the first image's size");
    const double scale_x = image.width / row_width, scale_y = image.height / row_height;
    if (std::abs(row_height * scale_x - image.height) > 1.0) {
      throw InvalidArgument(kept_files[k] + ": image is " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + ", not a downscale of the " +
                            std::to_string(row_width) + "x" + std::to_string(row_height) + " of " +
                            wheres[k]);
    }
    View& view = scene.views[k];
    const fs::path file(kept_files[k]);
    view.name = (file.parent_path().filename() / file.filename()).string();
    PinholeCamera<double>& camera = view.camera;
    camera.width = image.width;
    camera.height = image.height;
    camera.fx = focal * scale_x;
    camera.fy = focal * scale_y;
    camera.cx = 0.5 * image.width - 0.5;
    camera.cy = 0.5 * image.height - 0.5;
    view.rgb = std::move(images[k].pixels);
    if (options.target_width > 0 ||
        (options.downsample > 1 && folder.factor != options.downsample)) {
      fit_view(&view, output_size(int(row_width), int(row_height), options, wheres[k]),
               kept_files[k]);
    }
  }
  finish_scene(&scene, options);
  return scene;
}

}  // namespace mvibr::data
