// Shared importer steps (see import_common.h).
#include "import_common.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "mvibr/core/error.h"

namespace mvibr::data {

uint8_t background_level(Background background) {
  return background == Background::kWhite ? 255 : 0;
}

std::string images_folder(const ImportOptions& options) {
  if (!options.images_folder.empty()) return options.images_folder;
  return options.downsample > 1 ? "images_" + std::to_string(options.downsample) : "images";
}

void opengl_to_opencv(double c2w[12]) {
  for (int row = 0; row < 3; ++row) {
    c2w[row * 4 + 1] = -c2w[row * 4 + 1];
    c2w[row * 4 + 2] = -c2w[row * 4 + 2];
  }
}

void set_pose(PinholeCamera<double>* camera, const double c2w[12], const std::string& where) {
  const std::string problem = check_rigid_pose(c2w);
  if (!problem.empty()) throw InvalidArgument(where + ": " + problem);
  std::copy(c2w, c2w + 12, camera->c2w);
  // Poses stored as float32 are orthonormal to ~1e-7 only, and w2c is taken as the transpose:
  // Newton-Schulz steps R <- R (3I - R^T R) / 2 make the rotation orthonormal to double
  // precision, so that rays (c2w) and projections (w2c) agree exactly.
  double* m = camera->c2w;
  for (int step = 0; step < 4; ++step) {
    double gram[3][3], next[3][3];
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        gram[a][b] = 0;
        for (int k = 0; k < 3; ++k) gram[a][b] += m[k * 4 + a] * m[k * 4 + b];
      }
    }
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) {
        next[r][c] = 0;
        for (int k = 0; k < 3; ++k)
          next[r][c] += m[r * 4 + k] * ((k == c ? 3.0 : 0.0) - gram[k][c]);
      }
    }
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) m[r * 4 + c] = 0.5 * next[r][c];
    }
  }
  set_world_to_camera(camera);
}

Split holdout_split(size_t index, int llffhold) {
  return llffhold > 0 && index % size_t(llffhold) == 0 ? Split::kTest : Split::kTrain;
}

std::vector<size_t> first_views_per_split(const std::vector<Split>& splits, int max_per_split) {
  std::map<Split, int> taken;
  std::vector<size_t> kept;
  for (size_t i = 0; i < splits.size(); ++i) {
    if (max_per_split > 0 && taken[splits[i]] >= max_per_split) continue;
    ++taken[splits[i]];
    kept.push_back(i);
  }
  return kept;
}

std::vector<Image> load_rgb_images(const std::vector<std::string>& paths, uint8_t background) {
  std::vector<Image> images(paths.size());
  std::vector<std::exception_ptr> failures(paths.size());
  // Exceptions must not leave an OpenMP region: each is kept and rethrown after it.
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < long(paths.size()); ++i) {
    try {
      Image image = load_image(paths[i]);
      images[i].pixels = composite_to_rgb(image, background);
      images[i].width = image.width;
      images[i].height = image.height;
      images[i].channels = 3;
    } catch (...) {
      failures[i] = std::current_exception();
    }
  }
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
  return images;
}

void require_size(const Image& image, const std::string& path, int width, int height,
                  const std::string& expected_by) {
  if (image.width != width || image.height != height) {
    throw InvalidArgument(path + ": image is " + std::to_string(image.width) + "x" +
                          std::to_string(image.height) + ", expected " + std::to_string(width) +
                          "x" + std::to_string(height) + " (" + expected_by + ")");
  }
}

double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const double position = fraction * double(values.size() - 1);
  const size_t below = size_t(position);
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - double(below)) * (values[above] - values[below]);
}

std::string directory_name(const std::string& directory) {
  std::filesystem::path normal = std::filesystem::absolute(directory).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();  // a trailing '/'
  return normal.filename().string();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InvalidArgument(path + ": cannot read");
  return text;
}

void finish_scene(Scene* scene, const ImportOptions& options) {
  for (View& view : scene->views) {
    if (options.near_depth) view.near_depth = *options.near_depth;
    if (options.far_depth) view.far_depth = *options.far_depth;
  }
  validate_scene(*scene);  // before sorting times, which must not be NaN
  std::vector<double> times;
  for (const View& view : scene->views) times.push_back(view.time);
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  for (View& view : scene->views) {
    view.time_index = int(std::lower_bound(times.begin(), times.end(), view.time) - times.begin());
  }
}

}  // namespace mvibr::data
