// Shared importer steps (see import_common.h).
#include "import_common.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>

#include "mvibr/core/error.h"
#include "mvibr/data/camera_path.h"
#include "mvibr/data/downscale.h"

namespace mvibr::data {

namespace fs = std::filesystem;

uint8_t background_level(Background background) {
  return background == Background::kWhite ? 255 : 0;
}

ImagesFolder choose_images_folder(const std::string& scene_directory, const ImportOptions& options,
                                  int full_width) {
  if (!options.images_folder.empty()) return {options.images_folder, 0};
  const double wanted = options.target_width > 0 ? double(full_width) / options.target_width
                                                 : double(options.downsample);
  ImagesFolder best{"images", 1};
  std::error_code error;
  for (fs::directory_iterator it(scene_directory, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("images_", 0) != 0 || !it->is_directory(error)) continue;
    const std::string digits = name.substr(7);
    if (digits.empty() || digits.size() > 4 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const int factor = std::stoi(digits);
    if (factor > best.factor && factor <= wanted) best = {name, factor};
  }
  return best;
}

FrameSize output_size(int full_width, int full_height, const ImportOptions& options,
                      const std::string& where) {
  FrameSize size{full_width, full_height};
  if (options.target_width > 0) {
    size.width = options.target_width;
    size.height = int(std::lround(double(full_height) * options.target_width / full_width));
  } else if (options.downsample > 1) {
    size.width = int(std::lround(double(full_width) / options.downsample));
    size.height = int(std::lround(double(full_height) / options.downsample));
  }
  if (size.width > full_width || size.height > full_height || size.width < 1 || size.height < 1) {
    throw InvalidArgument(where + ": the frames are " + std::to_string(full_width) + "x" +
                          std::to_string(full_height) + "; cannot make them " +
                          std::to_string(size.width) + "x" + std::to_string(size.height) +
                          " (--width enlarges nothing)");
  }
  return size;
}

std::string size_text(int width, int height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

FrameSize pose_output_size(int width, int height, int wanted_width, int wanted_height) {
  FrameSize size{width, height};
  if (wanted_width > 0) size.width = wanted_width;
  if (wanted_height > 0) size.height = wanted_height;
  const int kept_height = int(std::lround(double(size.width) * height / width));
  const int kept_width = int(std::lround(double(size.height) * width / height));
  if (wanted_width > 0 && wanted_height == 0) size.height = kept_height;
  if (wanted_height > 0 && wanted_width == 0) size.width = kept_width;
  const std::string asked =
      "--width " + std::to_string(size.width) + " --height " + std::to_string(size.height) + ": ";
  if (wanted_width > 0 && wanted_height > 0 && size.height != kept_height &&
      size.width != kept_width) {
    throw InvalidArgument(asked + "not the aspect of the " + size_text(width, height) +
                          " images (" + size_text(size.width, kept_height) + " keeps it)");
  }
  if (size.width > width || size.height > height || size.width < 2 || size.height < 2) {
    throw InvalidArgument(asked + "the " + size_text(width, height) +
                          " images can only be made smaller, to at least 2x2");
  }
  return size;
}

PoseLabels label_joints(const std::vector<Vec3<double>>& joints, const std::vector<bool>& confident,
                        const PinholeCamera<double>& camera) {
  PoseLabels labels;
  for (size_t j = 0; j < joints.size(); ++j) {
    const Vec3<double>& x = joints[j];
    labels.joints_world.insert(labels.joints_world.end(), {x.x, x.y, x.z});
    const Vec3<double> in_camera = transform_point(camera.w2c, x);
    // A joint behind the camera keeps a finite (meaningless) label and is hidden.
    const double z = std::max(in_camera.z, 1e-6);
    const double u = camera.fx * in_camera.x / z + camera.cx;
    const double v = camera.fy * in_camera.y / z + camera.cy;
    labels.joints_image.insert(labels.joints_image.end(), {float(u), float(v)});
    const bool seen = in_camera.z > 0 && u > -0.5 && u < camera.width - 0.5 && v > -0.5 &&
                      v < camera.height - 0.5 && confident[j];
    labels.visible.push_back(seen ? 1 : 0);
  }
  return labels;
}

namespace {

constexpr int kLargestBox = 4;  // a body crop's side, in photograph sides

// Where the joints (metres) in front of `full` project in its image: their bounds; false when
// none is in front.
bool joint_bounds(const PinholeCamera<double>& full, const std::vector<Vec3<double>>& joints,
                  double* low_u, double* high_u, double* low_v, double* high_v) {
  *low_u = *low_v = HUGE_VAL, *high_u = *high_v = -HUGE_VAL;
  for (const Vec3<double>& x : joints) {
    const Vec3<double> p = transform_point(full.w2c, x);
    if (!(p.z > 0)) continue;
    const double u = full.fx * p.x / p.z + full.cx, v = full.fy * p.y / p.z + full.cy;
    *low_u = std::min(*low_u, u), *high_u = std::max(*high_u, u);
    *low_v = std::min(*low_v, v), *high_v = std::max(*high_v, v);
  }
  return *low_u <= *high_u;
}

}  // namespace

FrameSize body_crop_size(const std::string& format, int wanted_width, int wanted_height) {
  if (wanted_width < 1 || wanted_height != 0) {
    throw InvalidArgument(format +
                          ": --body_crop needs --width (the side of the square views) and no "
                          "--height");
  }
  return {wanted_width, wanted_width};
}

PinholeCamera<double> crop_camera(const PinholeCamera<double>& full, int width, int height,
                                  const std::vector<Vec3<double>>& joints, double body_crop,
                                  const std::string& view) {
  PinholeCamera<double> crop = full;
  double left = (full.width - width) / 2, top = (full.height - height) / 2;
  if (body_crop > 0) {
    double low_u, high_u, low_v, high_v;
    if (!joint_bounds(full, joints, &low_u, &high_u, &low_v, &high_v)) {
      throw InvalidArgument(view + ": no joint in front of the camera (--body_crop)");
    }
    const double side = std::max(high_u - low_u, high_v - low_v) * (1 + 2 * body_crop);
    const int largest = kLargestBox * std::max(full.width, full.height);
    if (!(side <= largest)) {
      char text[64];
      std::snprintf(text, sizeof text, "%.0f", side);
      throw InvalidArgument(view + ": the joints' box is " + text + " pixels a side, over " +
                            std::to_string(kLargestBox) + " times the photograph's (--body_crop)");
    }
    width = height = std::max(8, int(std::lround(side)));
    left = std::round((low_u + high_u) / 2 - (width - 1) / 2.0);
    top = std::round((low_v + high_v) / 2 - (height - 1) / 2.0);
  }
  crop.cx -= left, crop.cy -= top;
  crop.width = width, crop.height = height;
  return crop;
}

std::vector<uint8_t> crop_view_rgb(const std::vector<uint8_t>& rgb,
                                   const PinholeCamera<double>& full, const Distortion& d,
                                   const PinholeCamera<double>& crop,
                                   const PinholeCamera<double>& camera) {
  if (camera.width > crop.width) return resample_rgb(rgb, full, d, camera, 0);
  const std::vector<uint8_t> cropped = resample_rgb(rgb, full, d, crop, 0);
  if (camera.width == crop.width && camera.height == crop.height) return cropped;
  return downscale_area(cropped, crop.width, crop.height, 3, camera.width, camera.height);
}

std::function<std::vector<uint8_t>(size_t)> reads_with_progress(
    std::function<std::vector<uint8_t>(size_t)> read, size_t total,
    std::function<void(size_t, size_t)> progress) {
  if (!progress) return read;
  const auto done = std::make_shared<size_t>(0);
  return [read = std::move(read), total, progress = std::move(progress), done](size_t view) {
    std::vector<uint8_t> rgb = read(view);
#pragma omp critical(import_progress)
    progress(++*done, total);
    return rgb;
  };
}

void fit_view(View* view, FrameSize size, const std::string& where) {
  PinholeCamera<double>& camera = view->camera;
  if (camera.width == size.width && camera.height == size.height) return;
  if (camera.width < size.width || camera.height < size.height) {
    throw InvalidArgument(where + ": image is " + std::to_string(camera.width) + "x" +
                          std::to_string(camera.height) + ", smaller than the " +
                          std::to_string(size.width) + "x" + std::to_string(size.height) +
                          " asked for (read a larger images folder)");
  }
  view->rgb = downscale_area(view->rgb, camera.width, camera.height, 3, size.width, size.height);
  scale_intrinsics(&camera, size.width, size.height);
}

std::vector<Split> holdout_splits(const std::vector<std::string>& names,
                                  const ImportOptions& options, const std::string& where) {
  std::vector<Split> splits(names.size());
  if (options.test_ids.empty()) {
    for (size_t i = 0; i < names.size(); ++i) splits[i] = holdout_split(i, options.llffhold);
    return splits;
  }
  std::vector<std::string> unmatched;
  for (const std::string& id : options.test_ids) {
    bool matched = false;
    const bool is_index = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
    for (size_t i = 0; i < names.size(); ++i) {
      const fs::path name(names[i]);
      if ((is_index && id.size() < 10 && size_t(std::stoul(id)) == i) ||
          name.filename().string() == id || name.stem().string() == id) {
        splits[i] = Split::kTest;
        matched = true;
      }
    }
    if (!matched) unmatched.push_back(id);
  }
  if (!unmatched.empty()) {
    std::string list;
    for (size_t i = 0; i < unmatched.size() && i < 5; ++i) list += (i ? ", " : "") + unmatched[i];
    if (unmatched.size() > 5) list += ", ... (" + std::to_string(unmatched.size()) + " in all)";
    throw InvalidArgument(where + ": --test_ids names no view of " + std::to_string(names.size()) +
                          " (ids are indices from 0 or image names): " + list);
  }
  return splits;
}

std::vector<size_t> existing_images(const std::vector<std::string>& paths, const std::string& base,
                                    const ImportOptions& options, const std::string& where,
                                    Scene* scene) {
  std::vector<size_t> present;
  std::vector<std::string> missing;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::error_code error;
    if (fs::is_regular_file(paths[i], error)) {
      present.push_back(i);
    } else {
      missing.push_back(fs::path(paths[i]).lexically_relative(base).string());
    }
  }
  if (missing.empty()) return present;
  std::string names;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) names += (i ? ", " : "") + missing[i];
  if (missing.size() > 8) names += ", ...";
  const std::string what = std::to_string(missing.size()) + " of " + std::to_string(paths.size()) +
                           " frames of " + where + " have no image file in " + base + " (" + names +
                           ")";
  if (present.empty() || options.strict) {
    throw InvalidArgument(what + (present.empty() ? "" : " (--strict)"));
  }
  scene->warnings.push_back(what + "; they are skipped (--strict makes this an error)");
  return present;
}

bool bounds_from_cameras(Scene* scene) {
  const std::optional<Vec3<double>> point = point_views_look_at(scene->views);
  if (!point) return false;
  double closest = INFINITY, farthest = 0;
  for (const View& view : scene->views) {
    const double depth = transform_point(view.camera.w2c, *point).z;
    if (!(depth > 0)) return false;  // behind a camera: not what the views look at
    closest = std::min(closest, depth);
    farthest = std::max(farthest, depth);
  }
  for (View& view : scene->views) {
    view.near_depth = 0.5 * closest;
    view.far_depth = 1.5 * farthest;
  }
  char text[200];
  std::snprintf(text, sizeof(text),
                "the cameras: the point every view looks at is %.3g to %.3g ahead; near half the "
                "nearer, far 1.5x the farther",
                closest, farthest);
  scene->depth_bounds_from = text;
  return true;
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

std::vector<Image> load_rgb_images(const std::vector<std::string>& paths, uint8_t background,
                                   const ImportOptions& options) {
  size_t read = 0;
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
      if (options.on_image_read) {
#pragma omp critical(mvibr_image_progress)
        options.on_image_read(++read, paths.size());
      }
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
    throw InvalidArgument(path + ": image is " + size_text(image.width, image.height) +
                          ", expected " + size_text(width, height) + " (" + expected_by + ")");
  }
}

double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const double position = fraction * double(values.size() - 1);
  const size_t below = size_t(position);
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - double(below)) * (values[above] - values[below]);
}

std::vector<std::string> image_files_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    std::string extension = entry.path().extension().string();
    std::transform(extension.begin(), extension.end(), extension.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (entry.is_regular_file() &&
        (extension == ".png" || extension == ".jpg" || extension == ".jpeg")) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
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
  if (options.near_depth && options.far_depth) {
    scene->depth_bounds_from = "--near and --far";
  } else if (options.near_depth || options.far_depth) {
    scene->depth_bounds_from += std::string("; ") + (options.near_depth ? "near" : "far") +
                                " from --" + (options.near_depth ? "near" : "far");
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
