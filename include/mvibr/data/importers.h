// Importers: what users have (NeRF-synthetic / instant-ngp transforms*.json, LLFF
// poses_bounds.npy, COLMAP binary and text models, D-NeRF-style .npz, DynIBaR's folders) turned
// into a validated Scene with OpenCV cameras, RGB pixels and per-view depth bounds. One function
// per format, a shared options struct (each format reads the fields that apply to it), and a
// dispatcher for `mvibr prep`. Conventions per format are documented at the top of each
// import_*.cpp.
//
// Pixel coordinates: mvibr puts integer coordinates at pixel centres (IBRNet's grids; the
// projector's align_corners=True), while all four formats give the principal point with
// integer coordinates at pixel corners (NeRF and instant-ngp shoot rays through u + 0.5, COLMAP
// puts the first pixel's centre at 0.5). So every importer stores cx = cx_file - 0.5, and
// cx = W/2 - 0.5 where a format implies a centred principal point.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

enum class Background { kWhite, kBlack };

struct ImportOptions {
  // Behind transparent pixels; also fills undistorted pixels that fall off the image.
  Background background = Background::kWhite;
  // Every format: frames downscaled `downsample` times, or to `target_width` pixels across with
  // the aspect kept (0: by downsample), by area averaging with the intrinsics scaled to match
  // (downscale.h). LLFF and COLMAP read images_<M>/ for the largest M <= the factor wanted that
  // exists (images/ when none does), or images_folder when it is set, and downscale the rest.
  int downsample = 1;
  int target_width = 0;
  std::string images_folder;
  // Where a format has no split (LLFF, COLMAP, a lone transforms.json, .npz without i_test):
  // views 0, N, 2N, ... are test views, the rest train; 0 makes every view a train view.
  int llffhold = 8;
  // Instead of llffhold: the test views, by index in the format's order or by image name (with
  // or without its extension); every other view trains.
  std::vector<std::string> test_ids;
  // Frames whose image file is missing are an error; otherwise they are skipped with a warning
  // that counts and names them.
  bool strict = false;
  // Replace the format's near/far rule for every view.
  std::optional<double> near_depth, far_depth;
  // Blender: which transforms_<split>.json files to read (those present).
  std::vector<std::string> splits{"train", "val", "test"};
  // Keep only the first N views of each split (0: all), for quick looks and fast tests.
  int max_views_per_split = 0;
  // Called as each image is read (images read, images to read), one call at a time.
  std::function<void(size_t, size_t)> on_image_read;
};

// The ids of --test_ids: a file of ids (whitespace or commas) when `list` names a file, else a
// comma-separated list.
std::vector<std::string> parse_test_ids(const std::string& list);

// NeRF-synthetic / instant-ngp / D-NeRF transforms: `path` is a directory holding
// transforms_<split>.json (or one transforms.json), or one such file.
Scene import_blender(const std::string& path, const ImportOptions& options);
// LLFF: `path` is the directory holding poses_bounds.npy and the images folders.
Scene import_llff(const std::string& path, const ImportOptions& options);
// COLMAP model, binary or text: `path` holds images/ and sparse/0/{cameras,images,points3D}.bin
// or .txt (or sparse/, or the files directly).
Scene import_colmap(const std::string& path, const ImportOptions& options);
// D-NeRF-style .npz: images, poses, focal, optional times / i_val / i_test.
Scene import_dnerf(const std::string& path, const ImportOptions& options);
// DynIBaR's preprocessed monocular video (dynibar_folder.h), flows, masks and disparities
// included: `path` is <scene> or <scene>/dense.
Scene import_dynibar(const std::string& path, const ImportOptions& options);

// "blender", "llff", "colmap", "dnerf" or "dynibar" from what `path` holds; throws InvalidArgument
// saying what was looked for when nothing matches.
std::string detect_format(const std::string& path);

// One of the above by name ("auto" detects); throws InvalidArgument for an unknown format.
Scene import_scene(const std::string& format, const std::string& path,
                   const ImportOptions& options);

}  // namespace mvibr::data
