// NeRF-synthetic, instant-ngp and D-NeRF scenes: transforms*.json plus images.
//
// Poses: transform_matrix is an OpenGL / Blender camera-to-world (x right, y up, z backward);
//   columns 1 and 2 are negated to get OpenCV axes (IBRNet's nerf_synthetic.py does the same).
// Intrinsics: fl_x / fl_y when given, else f = 0.5 W / tan(0.5 camera_angle_x) (and _y), with
//   fy = fx when only x is given. cx / cy when given are corner-convention (instant-ngp shoots
//   rays through pixel + 0.5), so cx - 0.5 is stored; otherwise cx = W/2 - 0.5 (importers.h).
//   Keys may sit on a frame (instant-ngp with several cameras) or at the top level; w / h, when
//   given, must match the image. k1 k2 k3 p1 p2 are undistorted away at import; fisheye models
//   are refused.
// Pixels: RGBA composited over the chosen background (white by default, as IBRNet and NeRF do).
// Near/far: from instant-ngp's aabb_scale when given (bounds_from_aabb), else from the cameras
//   (import_common.h: about NeRF's 2 and 6 for cameras 4 from the object), else NeRF's 2 and 6
//   with a warning; --near / --far override.
// Splits: from the file name (transforms_val.json holds val views); a lone transforms.json
//   (instant-ngp) has no split, so every llffhold-th frame is a test frame, or --test_ids.
// Missing images: file_path resolves as NeRF's and instant-ngp's loaders do (image_path); frames
//   whose image is absent are skipped with a warning, or refused with --strict.
// Time: a frame's "time" (D-NeRF) makes the scene dynamic; then every frame needs one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/undistort.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kNearDepth = 2.0, kFarDepth = 6.0;

struct Intrinsics {
  std::optional<double> fl_x, fl_y, cx, cy, angle_x, angle_y, w, h;
  Distortion distortion;
};

struct Frame {
  std::string where, image_path, name;
  PinholeCamera<double> camera{};  // pose set while reading, intrinsics once the image is read
  Split split;
  std::optional<double> time;
  Intrinsics intrinsics;
};

std::optional<double> number(const json& frame, const json& top, const char* key,
                             const std::string& where) {
  const json* value = frame.contains(key) ? &frame[key] : top.contains(key) ? &top[key] : nullptr;
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) throw InvalidArgument(where + ": '" + key + "' is not a number");
  return value->get<double>();
}

Intrinsics read_intrinsics(const json& frame, const json& top, const std::string& where) {
  const json& model = frame.contains("camera_model") ? frame["camera_model"]
                                                     : top.value("camera_model", json("OPENCV"));
  const bool fisheye =
      frame.value("is_fisheye", top.value("is_fisheye", false)) ||
      (model.is_string() && model.get<std::string>().find("FISHEYE") != std::string::npos) ||
      number(frame, top, "k4", where).value_or(0) != 0;
  if (fisheye) throw InvalidArgument(where + ": fisheye cameras are not supported");
  Intrinsics in;
  in.fl_x = number(frame, top, "fl_x", where);
  in.fl_y = number(frame, top, "fl_y", where);
  in.cx = number(frame, top, "cx", where);
  in.cy = number(frame, top, "cy", where);
  in.angle_x = number(frame, top, "camera_angle_x", where);
  in.angle_y = number(frame, top, "camera_angle_y", where);
  in.w = number(frame, top, "w", where);
  in.h = number(frame, top, "h", where);
  Distortion& d = in.distortion;
  d.k1 = number(frame, top, "k1", where).value_or(0);
  d.k2 = number(frame, top, "k2", where).value_or(0);
  d.k3 = number(frame, top, "k3", where).value_or(0);
  d.p1 = number(frame, top, "p1", where).value_or(0);
  d.p2 = number(frame, top, "p2", where).value_or(0);
  return in;
}

void read_pose(const json& matrix, const std::string& where, PinholeCamera<double>* camera) {
  const auto is_row = [](const json& row) {
    if (!row.is_array() || row.size() != 4) return false;
    for (const json& x : row) {
      if (!x.is_number()) return false;
    }
    return true;
  };
  bool ok = matrix.is_array() && (matrix.size() == 3 || matrix.size() == 4);
  for (size_t r = 0; ok && r < matrix.size(); ++r) ok = is_row(matrix[r]);
  if (!ok) throw InvalidArgument(where + ": transform_matrix is not a 4x4 array of numbers");
  double c2w[12];
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) c2w[r * 4 + c] = matrix[size_t(r)][size_t(c)].get<double>();
  }
  opengl_to_opencv(c2w);
  set_pose(camera, c2w, where);
}

// As NeRF's and instant-ngp's loaders resolve it: relative to the JSON's folder, as written when
// it names a file or has an extension (instant-ngp's "images/0005.jpg"), else with ".png"
// appended (NeRF-synthetic's "./train/r_0").
std::string image_path(const fs::path& directory, const std::string& file_path) {
  const fs::path given = directory / file_path;
  if (fs::is_regular_file(given) || fs::path(file_path).has_extension()) {
    return given.lexically_normal().string();
  }
  return (directory / (file_path + ".png")).lexically_normal().string();
}

// instant-ngp's region of interest: its unit cube (where p * scale + offset lands in [0, 1]^3,
// after its axis order y, z, x) grown aabb_scale times about its centre. Per view: far is the
// depth of the box's farthest corner; near its nearest corner's, or 0.1 / scale (a tenth of its
// unit cube) for a camera inside the box.
bool bounds_from_aabb(const json& top, const std::string& file, Scene* scene) {
  if (!top.contains("aabb_scale")) return false;
  const double aabb_scale = number(top, json::object(), "aabb_scale", file).value_or(1);
  const double scale = number(top, json::object(), "scale", file).value_or(0.33);
  double offset[3] = {0.5, 0.5, 0.5};  // in instant-ngp's axis order
  if (top.contains("offset")) {
    const json& given = top["offset"];
    if (!given.is_array() || given.size() != 3 || !given[0].is_number() || !given[1].is_number() ||
        !given[2].is_number()) {
      throw InvalidArgument(file + ": 'offset' is not 3 numbers");
    }
    for (int i = 0; i < 3; ++i) offset[i] = given[size_t(i)].get<double>();
  }
  if (!(aabb_scale > 0 && scale > 0 && std::isfinite(aabb_scale) && std::isfinite(scale))) {
    throw InvalidArgument(file + ": 'aabb_scale' and 'scale' must be positive numbers");
  }
  // Ours x, y, z are instant-ngp's z, x, y.
  const Vec3<double> centre{(0.5 - offset[2]) / scale, (0.5 - offset[0]) / scale,
                            (0.5 - offset[1]) / scale};
  const double half = 0.5 * aabb_scale / scale;
  for (View& view : scene->views) {
    double nearest = INFINITY, farthest = -INFINITY;
    for (int corner = 0; corner < 8; ++corner) {
      const Vec3<double> p{centre.x + ((corner & 1) ? half : -half),
                           centre.y + ((corner & 2) ? half : -half),
                           centre.z + ((corner & 4) ? half : -half)};
      const double depth = transform_point(view.camera.w2c, p).z;
      nearest = std::min(nearest, depth);
      farthest = std::max(farthest, depth);
    }
    if (!(farthest > 0)) throw InvalidArgument(view.name + ": looks away from the aabb_scale box");
    view.far_depth = farthest;
    view.near_depth = nearest > 0 ? nearest : std::min(0.1 / scale, 0.5 * farthest);
  }
  char text[160];
  std::snprintf(text, sizeof(text),
                "instant-ngp's aabb_scale %g (a box %.3g across): the depths of its corners",
                aabb_scale, 2 * half);
  scene->depth_bounds_from = text;
  return true;
}

std::vector<Frame> read_transforms(const std::string& file, std::optional<Split> split,
                                   const ImportOptions& options, json* top_out = nullptr) {
  json top;
  try {
    top = json::parse(read_text_file(file));
  } catch (const json::exception& e) {
    throw InvalidArgument(file + ": bad JSON (" + e.what() + ")");
  }
  if (!top.is_object() || !top.contains("frames") || !top["frames"].is_array()) {
    throw InvalidArgument(file + ": has no 'frames' array");
  }
  const fs::path directory = fs::path(file).parent_path().lexically_normal();
  std::vector<Frame> frames;
  for (size_t i = 0; i < top["frames"].size(); ++i) {
    const json& entry = top["frames"][i];
    Frame frame;
    frame.where = file + " frame " + std::to_string(i);
    // The checks below name what is wrong; this catches a wrongly typed optional key.
    try {
      if (!entry.is_object() || !entry.contains("file_path") || !entry["file_path"].is_string()) {
        throw InvalidArgument(frame.where + ": needs a 'file_path' string");
      }
      if (!entry.contains("transform_matrix")) {
        throw InvalidArgument(frame.where + ": needs a 'transform_matrix'");
      }
      read_pose(entry["transform_matrix"], frame.where, &frame.camera);
      frame.image_path = image_path(directory, entry["file_path"].get<std::string>());
      frame.name = fs::path(frame.image_path).lexically_relative(directory).string();
      frame.split = split.value_or(Split::kTrain);  // without one: set by holdout_splits
      frame.time = number(entry, json::object(), "time", frame.where);
      frame.intrinsics = read_intrinsics(entry, top, frame.where);
    } catch (const json::exception& e) {
      throw InvalidArgument(frame.where + ": " + e.what());
    }
    frames.push_back(frame);
  }
  if (!split) {
    std::vector<std::string> names;
    for (const Frame& frame : frames) names.push_back(frame.name);
    const std::vector<Split> splits = holdout_splits(names, options, file);
    for (size_t i = 0; i < frames.size(); ++i) frames[i].split = splits[i];
  } else if (!options.test_ids.empty()) {
    throw InvalidArgument(file +
                          ": its name gives its split; --test_ids is for a lone "
                          "transforms.json");
  }
  if (top_out) *top_out = std::move(top);
  return frames;
}

Split split_named(const std::string& name, const std::string& where) {
  if (name == "train") return Split::kTrain;
  if (name == "val") return Split::kValidation;
  if (name == "test") return Split::kTest;
  throw InvalidArgument(where + ": unknown split '" + name + "' (train, val or test)");
}

// The frame's camera with intrinsics for its loaded image (see the top). Without w / h every
// image must have the size of the first.
PinholeCamera<double> camera_for(const Frame& frame, const Image& image, const Image& first) {
  const Intrinsics& in = frame.intrinsics;
  const auto pixels = [&](std::optional<double> given, int otherwise) {
    if (given && !(*given >= 1 && *given <= 65536 && *given == std::floor(*given))) {
      throw InvalidArgument(frame.where + ": w and h must be whole numbers of pixels");
    }
    return given ? int(*given) : otherwise;
  };
  const int width = pixels(in.w, first.width), height = pixels(in.h, first.height);
  require_size(image, frame.image_path, width, height,
               in.w || in.h ? frame.where + " w/h" : "the first image's size");
  PinholeCamera<double> camera = frame.camera;
  camera.width = width;
  camera.height = height;
  if (in.fl_x) {
    camera.fx = *in.fl_x;
  } else if (in.angle_x) {
    camera.fx = 0.5 * width / std::tan(0.5 * *in.angle_x);
  } else {
    throw InvalidArgument(frame.where + ": needs 'fl_x' or 'camera_angle_x'");
  }
  camera.fy = in.fl_y      ? *in.fl_y
              : in.angle_y ? 0.5 * height / std::tan(0.5 * *in.angle_y)
                           : camera.fx;
  camera.cx = in.cx ? *in.cx - 0.5 : 0.5 * width - 0.5;
  camera.cy = in.cy ? *in.cy - 0.5 : 0.5 * height - 0.5;
  if (!(camera.fx > 0 && camera.fy > 0 && std::isfinite(camera.fx) && std::isfinite(camera.fy))) {
    throw InvalidArgument(frame.where + ": focal length is not a positive number");
  }
  return camera;
}

}  // namespace

Scene import_blender(const std::string& path, const ImportOptions& options) {
  std::vector<Frame> frames;
  json top;               // the last file read: where instant-ngp's aabb_scale is
  std::string json_file;  // its name
  fs::path directory = path;
  if (fs::is_regular_file(path)) {
    directory = fs::path(path).parent_path();
    const std::string stem = fs::path(path).stem().string();
    const std::string prefix = "transforms_";
    const bool named = stem.compare(0, prefix.size(), prefix) == 0;
    const std::optional<Split> split =
        named ? std::optional<Split>(split_named(stem.substr(prefix.size()), path)) : std::nullopt;
    frames = read_transforms(path, split, options, &top);
    json_file = path;
  } else {
    for (const std::string& split : options.splits) {
      const Split named = split_named(split, "ImportOptions::splits");
      const fs::path file = directory / ("transforms_" + split + ".json");
      if (!fs::exists(file)) continue;
      const std::vector<Frame> more = read_transforms(file.string(), named, options, &top);
      json_file = file.string();
      frames.insert(frames.end(), more.begin(), more.end());
    }
    if (frames.empty() && fs::exists(directory / "transforms.json")) {
      json_file = (directory / "transforms.json").string();
      frames = read_transforms(json_file, std::nullopt, options, &top);
    }
    if (frames.empty()) {
      throw InvalidArgument(path +
                            ": no frames in transforms_{train,val,test}.json or "
                            "transforms.json");
    }
  }

  Scene scene;
  {
    std::vector<std::string> files;
    for (const Frame& frame : frames) files.push_back(frame.image_path);
    frames = select(frames, existing_images(files, fs::path(json_file).parent_path().string(),
                                            options, json_file, &scene));
  }
  std::vector<Split> splits;
  for (const Frame& frame : frames) splits.push_back(frame.split);
  frames = select(frames, first_views_per_split(splits, options.max_views_per_split));
  const bool dynamic = frames.front().time.has_value();
  std::vector<std::string> paths;
  for (const Frame& frame : frames) {
    if (frame.time.has_value() != dynamic) {
      throw InvalidArgument(frame.where + ": some frames have a 'time' and others do not");
    }
    paths.push_back(frame.image_path);
  }
  const uint8_t background = background_level(options.background);
  std::vector<Image> images = load_rgb_images(paths, background, options);

  scene.name = directory_name(directory.string());
  scene.source_format = "blender";
  scene.dynamic = dynamic;
  scene.views.resize(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& frame = frames[i];
    View& view = scene.views[i];
    view.name = frame.name;
    view.camera = camera_for(frame, images[i], images[0]);
    view.time = frame.time.value_or(0);
    view.split = frame.split;
    const Distortion& distortion = frame.intrinsics.distortion;
    view.rgb = distortion.is_identity()
                   ? std::move(images[i].pixels)
                   : undistort_rgb(images[i].pixels, view.camera, distortion, background);
    if (options.downsample > 1 || options.target_width > 0) {
      fit_view(&view, output_size(view.camera.width, view.camera.height, options, frame.image_path),
               frame.where);
    }
  }
  if (!bounds_from_aabb(top, json_file, &scene) && !bounds_from_cameras(&scene)) {
    for (View& view : scene.views) {
      view.near_depth = kNearDepth;
      view.far_depth = kFarDepth;
    }
    scene.depth_bounds_from = "NeRF's 2 and 6";
    if (!(options.near_depth && options.far_depth)) {
      scene.warnings.push_back(json_file +
                               ": its views look nearly the same way and it has no "
                               "aabb_scale, so near and far are NeRF's 2 and 6; set --near and "
                               "--far for this scene");
    }
  }
  finish_scene(&scene, options);
  return scene;
}

}  // namespace mvibr::data
