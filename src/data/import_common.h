// What every importer shares, so that all formats convert poses, load images, apply options and
// check their input in the same way and with the same words. Private to src/data/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/data/image_io.h"
#include "mvibr/data/importers.h"

namespace mvibr::data {

// IBRNet's margins on LLFF's depth bounds (llff.py: near * 0.9, far * 1.6), which the COLMAP
// importer applies to the same percentiles.
constexpr double kBoundsNearMargin = 0.9, kBoundsFarMargin = 1.6;

uint8_t background_level(Background background);

// LLFF, COLMAP: the folder of images to read (ImportOptions::downsample, images_folder).
std::string images_folder(const ImportOptions& options);

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
std::vector<Image> load_rgb_images(const std::vector<std::string>& paths, uint8_t background);

// Throws InvalidArgument naming `path` when `image` is not width x height.
void require_size(const Image& image, const std::string& path, int width, int height,
                  const std::string& expected_by);

// Depth percentile `fraction` (0..1) of unsorted values, interpolated as numpy.percentile does.
double percentile(std::vector<double> values, double fraction);

// The last component of a directory path ("lego" for "data/lego/"), to name a scene.
std::string directory_name(const std::string& directory);

// A whole text file; InvalidArgument naming it when it cannot be read.
std::string read_text_file(const std::string& path);

// Applies the near/far overrides, numbers the distinct times, validates.
void finish_scene(Scene* scene, const ImportOptions& options);

}  // namespace mvibr::data
