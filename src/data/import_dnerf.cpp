// D-NeRF-style .npz scenes (the layout of NeRF's tiny_nerf_data.npz, plus times).
//
// Arrays: images (N, H, W, 3 or 4), float in [0, 1] (in [0, 255] when the largest value is
//   over 1.5) or uint8; poses (N, 4, 4) or (N, 3, 4); focal (a scalar); optional times (N,),
//   which make the scene dynamic; optional i_val / i_test index arrays.
// Poses: OpenGL camera-to-world, as NeRF's; columns 1 and 2 are negated for OpenCV axes.
// Intrinsics: fx = fy = focal, cx = W/2 - 0.5 (importers.h).
// Pixels: RGBA composited over the chosen background (white by default).
// Near/far: from the cameras (import_common.h: about 2 and 6 for D-NeRF's and NeRF's cameras 4
//   from the object), or D-NeRF's 2 and 6 when the views look nearly the same way.
// Splits: i_val / i_test when the archive has them (the rest train), else every llffhold-th
//   view is a test view.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/npz.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

constexpr double kNearDepth = 2.0, kFarDepth = 6.0;

const NpyArray& member(const std::map<std::string, NpyArray>& arrays, const std::string& key,
                       const std::string& path) {
  const auto found = arrays.find(key);
  if (found == arrays.end()) throw InvalidArgument(path + ": has no '" + key + "' array");
  return found->second;
}

std::string shape_text(const NpyArray& array) {
  std::string text = "(";
  for (size_t d : array.shape) text += std::to_string(d) + ",";
  return text + ")";
}

// 255 for [0, 1] floats, 1 for [0, 255] floats and uint8; refuses non-finite pixels.
double pixel_scale(const NpyArray& images, const std::string& path) {
  if (images.type == NpyType::kUInt8) return 1.0;
  if (images.type != NpyType::kFloat32 && images.type != NpyType::kFloat64) {
    throw InvalidArgument(path + ": 'images' must be float or uint8");
  }
  double largest = 0;
  for (size_t i = 0; i < images.count(); ++i) {
    const double value = images.at(i);
    if (!std::isfinite(value)) throw InvalidArgument(path + ": 'images' has non-finite values");
    largest = std::max(largest, value);
  }
  return largest > 1.5 ? 1.0 : 255.0;
}

}  // namespace

Scene import_dnerf(const std::string& path, const ImportOptions& options) {
  const std::map<std::string, NpyArray> arrays = read_npz(path);
  const NpyArray& images = member(arrays, "images", path);
  const NpyArray& poses = member(arrays, "poses", path);
  const NpyArray& focal = member(arrays, "focal", path);
  const size_t count = images.shape.empty() ? 0 : images.shape[0];
  if (images.shape.size() != 4 || count == 0 || images.shape[1] > 65536 ||
      images.shape[2] > 65536 || (images.shape[3] != 3 && images.shape[3] != 4)) {
    throw InvalidArgument(path + ": 'images' has shape " + shape_text(images) +
                          ", expected (N, H, W, 3 or 4) with H, W <= 65536");
  }
  if (poses.shape.size() != 3 || poses.shape[0] != count ||
      (poses.shape[1] != 3 && poses.shape[1] != 4) || poses.shape[2] != 4) {
    throw InvalidArgument(path + ": 'poses' has shape " + shape_text(poses) + ", expected (" +
                          std::to_string(count) + ", 4, 4)");
  }
  if (focal.count() != 1 || !(focal.at(0) > 0) || !std::isfinite(focal.at(0))) {
    throw InvalidArgument(path + ": 'focal' must be one positive number");
  }
  const auto times = arrays.find("times");
  if (times != arrays.end() && times->second.count() != count) {
    throw InvalidArgument(path + ": 'times' has " + std::to_string(times->second.count()) +
                          " values for " + std::to_string(count) + " images");
  }

  const bool listed = arrays.count("i_val") || arrays.count("i_test");
  if (listed && !options.test_ids.empty()) {
    throw InvalidArgument(path +
                          ": lists its own i_val / i_test; --test_ids is for scenes that "
                          "do not");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(std::to_string(i));
  std::vector<Split> splits =
      listed ? std::vector<Split>(count, Split::kTrain) : holdout_splits(names, options, path);
  const std::pair<const char*, Split> listings[] = {{"i_val", Split::kValidation},
                                                    {"i_test", Split::kTest}};
  for (const auto& [key, split] : listings) {
    const auto indices = arrays.find(key);
    if (indices == arrays.end()) continue;
    for (size_t j = 0; j < indices->second.count(); ++j) {
      const double index = indices->second.at(j);
      if (!(index >= 0 && index < double(count)) || index != std::floor(index)) {
        throw InvalidArgument(path + ": '" + std::string(key) + "' holds " + std::to_string(index) +
                              ", not an image index");
      }
      splits[size_t(index)] = split;
    }
  }

  const int height = int(images.shape[1]), width = int(images.shape[2]);
  const int channels = int(images.shape[3]);
  const size_t image_values = size_t(height) * width * channels;
  const double scale = pixel_scale(images, path);
  const uint8_t background = background_level(options.background);
  const size_t pose_rows = poses.shape[1];
  Scene scene;
  scene.name = fs::path(path).stem().string();
  scene.source_format = "dnerf";
  scene.dynamic = times != arrays.end();
  for (size_t i : first_views_per_split(splits, options.max_views_per_split)) {
    const std::string where = path + " view " + std::to_string(i);
    View view;
    view.name = fs::path(path).filename().string() + ":images[" + std::to_string(i) + "]";
    PinholeCamera<double>& camera = view.camera;
    camera.width = width;
    camera.height = height;
    camera.fx = camera.fy = focal.at(0);
    camera.cx = 0.5 * width - 0.5;
    camera.cy = 0.5 * height - 0.5;
    double c2w[12];
    for (int k = 0; k < 12; ++k) c2w[k] = poses.at(i * pose_rows * 4 + size_t(k));
    opengl_to_opencv(c2w);
    set_pose(&camera, c2w, where);
    view.time = scene.dynamic ? times->second.at(i) : 0.0;
    view.split = splits[i];
    Image image;
    image.width = width;
    image.height = height;
    image.channels = channels;
    image.pixels.resize(image_values);
    for (size_t k = 0; k < image_values; ++k) {
      const double value = std::round(images.at(i * image_values + k) * scale);
      image.pixels[k] = uint8_t(std::clamp(value, 0.0, 255.0));
    }
    view.rgb = composite_to_rgb(image, background);
    if (options.downsample > 1 || options.target_width > 0) {
      fit_view(&view, output_size(width, height, options, path), where);
    }
    scene.views.push_back(std::move(view));
  }
  if (!bounds_from_cameras(&scene)) {
    for (View& view : scene.views) {
      view.near_depth = kNearDepth;
      view.far_depth = kFarDepth;
    }
    scene.depth_bounds_from = "D-NeRF's 2 and 6 (the views look nearly the same way)";
  }
  finish_scene(&scene, options);
  return scene;
}

}  // namespace mvibr::data
