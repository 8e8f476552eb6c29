// COLMAP models, binary (what COLMAP writes by default: cameras.bin, images.bin, optional
// points3D.bin) or text (cameras.txt, images.txt, points3D.txt), images in images/; both read
// into the same records and checked alike.
//
// Cameras: SIMPLE_PINHOLE (f cx cy), PINHOLE (fx fy cx cy), SIMPLE_RADIAL (f cx cy k),
//   RADIAL (f cx cy k1 k2) and OPENCV (fx fy cx cy k1 k2 p1 p2); the distorted ones are
//   undistorted at import, other models are refused. COLMAP puts the first pixel's centre at
//   0.5, so cx - 0.5 is stored (importers.h). Images in a downscaled folder (images_N) scale the
//   intrinsics by the measured ratio of image to camera size (corner convention, then - 0.5).
// Poses: images.txt gives world-to-camera (qw qx qy qz, tx ty tz) in OpenCV axes already; each
//   image line is followed by a line of 2D points, skipped. Views are sorted by image name.
// Near/far: LLFF's rule on points3D.txt, the 0.1 and 99.9 percentiles of the camera-z depths of
//   the points each image sees, with LLFF's margins (near * 0.9, far * 1.6); an image that sees
//   no point takes the percentiles over all images. Without points, from the cameras
//   (import_common.h), or --near and --far.
// Missing images: an image of images.txt whose file is absent is skipped with a warning, or
//   refused with --strict.
// Splits: image i (in name order) is a test image when i % llffhold == 0, else train.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/undistort.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

constexpr double kNearPercentile = 0.001, kFarPercentile = 0.999;

struct ColmapCamera {
  int width = 0, height = 0;
  double fx = 0, fy = 0, cx = 0, cy = 0;  // COLMAP's corner convention
  Distortion distortion;
};

struct ColmapImage {
  std::string name, where;
  int camera_id = 0;
  double w2c[12];
};

// Non-comment lines with their 1-based line numbers. images.txt keeps blank lines: an image
// that sees no point has an empty 2D-point line.
std::vector<std::pair<int, std::string>> data_lines(const std::string& text, bool keep_blank) {
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') continue;
    if (first == std::string::npos && !keep_blank) continue;
    lines.emplace_back(number, line);
  }
  return lines;
}

// COLMAP's camera models by id (cameras.bin) with their parameter counts; the first five are
// those mvibr reads.
struct CameraModel {
  const char* name;
  size_t parameters;
};
constexpr CameraModel kCameraModels[] = {{"SIMPLE_PINHOLE", 3},
                                         {"PINHOLE", 4},
                                         {"SIMPLE_RADIAL", 4},
                                         {"RADIAL", 5},
                                         {"OPENCV", 8},
                                         {"OPENCV_FISHEYE", 8},
                                         {"FULL_OPENCV", 12},
                                         {"FOV", 5},
                                         {"SIMPLE_RADIAL_FISHEYE", 4},
                                         {"RADIAL_FISHEYE", 5},
                                         {"THIN_PRISM_FISHEYE", 12}};
constexpr size_t kSupportedModels = 5;

ColmapCamera make_camera(const std::string& model, long long width, long long height,
                         const std::vector<double>& p, const std::string& where) {
  size_t index = 0;
  while (index < kSupportedModels && model != kCameraModels[index].name) ++index;
  if (index == kSupportedModels) {
    throw InvalidArgument(where + ": camera model '" + model +
                          "' is not supported (SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, "
                          "OPENCV; undistort others with colmap image_undistorter)");
  }
  ColmapCamera c;
  if (p.size() != kCameraModels[index].parameters || width < 1 || height < 1 || width > 65536 ||
      height > 65536) {
    throw InvalidArgument(where + ": " + model + " needs width, height (1 to 65536) and " +
                          std::to_string(kCameraModels[index].parameters) + " parameters");
  }
  c.width = int(width);
  c.height = int(height);
  for (double value : p) {
    if (!std::isfinite(value)) throw InvalidArgument(where + ": non-finite camera parameter");
  }
  const bool one_focal = model != "PINHOLE" && model != "OPENCV";
  c.fx = p[0];
  c.fy = one_focal ? p[0] : p[1];
  c.cx = one_focal ? p[1] : p[2];
  c.cy = one_focal ? p[2] : p[3];
  if (model == "SIMPLE_RADIAL" || model == "RADIAL") c.distortion.k1 = p[3];
  if (model == "RADIAL") c.distortion.k2 = p[4];
  if (model == "OPENCV") c.distortion = {p[4], p[5], 0, p[6], p[7]};
  if (!(c.fx > 0 && c.fy > 0)) throw InvalidArgument(where + ": focal length is not positive");
  return c;
}

std::map<int, ColmapCamera> read_cameras(const std::string& file) {
  std::map<int, ColmapCamera> cameras;
  for (const auto& [number, line] : data_lines(read_text_file(file), false)) {
    const std::string where = file + " line " + std::to_string(number);
    std::istringstream in(line);
    int id = 0;
    std::string model;
    long long width = 0, height = 0;
    in >> id >> model >> width >> height;
    std::vector<double> p;
    for (double value; in >> value;) p.push_back(value);
    if (in.fail() && !in.eof()) throw InvalidArgument(where + ": malformed camera line");
    cameras[id] = make_camera(model, width, height, p, where);
  }
  if (cameras.empty()) throw InvalidArgument(file + ": no cameras");
  return cameras;
}

// Rotation matrix (row-major 3x3 into a 3x4) of the unit quaternion along (w, x, y, z).
void quaternion_rotation(double w, double x, double y, double z, double* m) {
  const double n = std::sqrt(w * w + x * x + y * y + z * z);
  w /= n, x /= n, y /= n, z /= n;
  const double r[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                       2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 3; ++col) m[row * 4 + col] = r[row * 3 + col];
  }
}

// Checks and adds an image (its name, where and camera_id set) with pose q, t to `images`.
void add_image(long long id, const double q[4], const double t[3], ColmapImage* image,
               std::map<int, ColmapImage>* images) {
  const double q_norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  if (!std::isfinite(q_norm) || std::abs(q_norm - 1) > 1e-3 || !std::isfinite(t[0]) ||
      !std::isfinite(t[1]) || !std::isfinite(t[2])) {
    throw InvalidArgument(image->where + ": pose needs a unit quaternion and a finite translation");
  }
  quaternion_rotation(q[0], q[1], q[2], q[3], image->w2c);
  for (int row = 0; row < 3; ++row) image->w2c[row * 4 + 3] = t[row];
  if (id < 0 || id > std::numeric_limits<int>::max() || !images->emplace(int(id), *image).second) {
    throw InvalidArgument(image->where + ": image id " + std::to_string(id) +
                          " repeats or is out "
                          "of range");
  }
}

std::map<int, ColmapImage> read_images(const std::string& file) {
  const std::vector<std::pair<int, std::string>> lines = data_lines(read_text_file(file), true);
  std::map<int, ColmapImage> images;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& [number, line] = lines[i];
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // trailing blank lines
    ColmapImage image;
    image.where = file + " line " + std::to_string(number);
    std::istringstream in(line);
    int id = 0;
    double q[4], t[3];
    in >> id >> q[0] >> q[1] >> q[2] >> q[3] >> t[0] >> t[1] >> t[2] >> image.camera_id;
    std::getline(in >> std::ws, image.name);
    if (in.fail() || image.name.empty()) {
      throw InvalidArgument(image.where +
                            ": expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME");
    }
    add_image(id, q, t, &image, &images);
    ++i;  // the 2D points line
  }
  if (images.empty()) throw InvalidArgument(file + ": no images");
  return images;
}

// Records the depth of point p in image `image_id` (LLFF's imgs2poses rule: camera z, in front).
void add_depth(const Vec3<double>& p, long long image_id, const std::map<int, ColmapImage>& images,
               std::map<int, std::vector<double>>* depths) {
  if (image_id < 0 || image_id > std::numeric_limits<int>::max()) return;
  const auto image = images.find(int(image_id));
  if (image == images.end()) return;  // a track entry of an image not in the model's images
  const double z = transform_point(image->second.w2c, p).z;
  if (z > 0 && std::isfinite(z)) (*depths)[image->first].push_back(z);
}

// Camera-z depths of the points each image sees, by image id (LLFF's imgs2poses rule).
std::map<int, std::vector<double>> read_point_depths(const std::string& file,
                                                     const std::map<int, ColmapImage>& images) {
  std::map<int, std::vector<double>> depths;
  for (const auto& [number, line] : data_lines(read_text_file(file), false)) {
    std::istringstream in(line);
    long long id = 0;
    Vec3<double> p;
    double colour_and_error[4];
    in >> id >> p.x >> p.y >> p.z;
    for (double& value : colour_and_error) in >> value;
    if (in.fail()) {
      throw InvalidArgument(file + " line " + std::to_string(number) + ": malformed point");
    }
    long long image_id = 0, point2d = 0;
    while (in >> image_id >> point2d) add_depth(p, image_id, images, &depths);
  }
  return depths;
}

// COLMAP's binary model files (little-endian, as COLMAP writes them on every platform mvibr
// runs on), read from memory with every count checked against the bytes left before anything
// is allocated from it.
class BinaryModel {
 public:
  explicit BinaryModel(std::string file) : file_(std::move(file)), bytes_(read_text_file(file_)) {}

  template <typename T>
  T read(const char* what) {
    need(1, sizeof(T), what);
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  // A count of records of at least `record_bytes` each, which the bytes left must hold.
  uint64_t count(size_t record_bytes, const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, record_bytes, what);
    return n;
  }
  std::string name(const char* what) {
    const size_t end = bytes_.find('\0', at_);
    if (end == std::string::npos) fail(std::string(what) + " has no end");
    std::string text = bytes_.substr(at_, end - at_);
    at_ = end + 1;
    return text;
  }
  void skip(uint64_t n, size_t size, const char* what) {
    need(n, size, what);
    at_ += size_t(n * size);
  }
  void expect_end() const {
    if (at_ != bytes_.size()) {
      fail(std::to_string(bytes_.size() - at_) + " bytes after the last record");
    }
  }
  std::string where() const { return file_ + " at byte " + std::to_string(at_); }
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(where() + ": " + what);
  }

 private:
  void need(uint64_t n, size_t size, const char* what) const {
    const uint64_t left = bytes_.size() - at_;
    if (size != 0 && n > left / size) {
      fail(std::string(what) + ": needs " + std::to_string(n) + " x " + std::to_string(size) +
           " bytes, the file has " + std::to_string(left) + " left (truncated or not COLMAP)");
    }
  }

  std::string file_, bytes_;
  size_t at_ = 0;
};

std::map<int, ColmapCamera> read_cameras_binary(const std::string& file) {
  BinaryModel in(file);
  std::map<int, ColmapCamera> cameras;
  const uint64_t n = in.count(4 + 4 + 8 + 8, "the camera count");
  for (uint64_t k = 0; k < n; ++k) {
    const std::string where = in.where();
    const uint32_t id = in.read<uint32_t>("a camera id");
    const int32_t model = in.read<int32_t>("a camera model");
    const uint64_t width = in.read<uint64_t>("a width"), height = in.read<uint64_t>("a height");
    if (model < 0 || size_t(model) >= std::size(kCameraModels)) {
      throw InvalidArgument(where + ": camera model id " + std::to_string(model) + " is unknown");
    }
    std::vector<double> p(kCameraModels[model].parameters);
    for (double& value : p) value = in.read<double>("camera parameters");
    if (id > uint32_t(std::numeric_limits<int>::max()) || cameras.count(int(id))) {
      throw InvalidArgument(where + ": camera id " + std::to_string(id) +
                            " repeats or is out of "
                            "range");
    }
    cameras[int(id)] =
        make_camera(kCameraModels[model].name, (long long)std::min<uint64_t>(width, 1 << 30),
                    (long long)std::min<uint64_t>(height, 1 << 30), p, where);
  }
  in.expect_end();
  if (cameras.empty()) throw InvalidArgument(file + ": no cameras");
  return cameras;
}

std::map<int, ColmapImage> read_images_binary(const std::string& file) {
  BinaryModel in(file);
  std::map<int, ColmapImage> images;
  const uint64_t n = in.count(4 + 7 * 8 + 4 + 1 + 8, "the image count");
  for (uint64_t k = 0; k < n; ++k) {
    ColmapImage image;
    image.where = in.where();
    const uint32_t id = in.read<uint32_t>("an image id");
    double q[4], t[3];
    for (double& value : q) value = in.read<double>("a rotation");
    for (double& value : t) value = in.read<double>("a translation");
    const uint32_t camera = in.read<uint32_t>("a camera id");
    if (camera > uint32_t(std::numeric_limits<int>::max())) in.fail("camera id out of range");
    image.camera_id = int(camera);
    image.name = in.name("an image name");
    if (image.name.empty()) throw InvalidArgument(image.where + ": an image without a name");
    in.skip(in.count(8 + 8 + 8, "the 2D point count"), 8 + 8 + 8, "2D points");
    add_image(id, q, t, &image, &images);
  }
  in.expect_end();
  if (images.empty()) throw InvalidArgument(file + ": no images");
  return images;
}

std::map<int, std::vector<double>> read_point_depths_binary(
    const std::string& file, const std::map<int, ColmapImage>& images) {
  BinaryModel in(file);
  std::map<int, std::vector<double>> depths;
  const uint64_t n = in.count(8 + 3 * 8 + 3 + 8 + 8, "the point count");
  for (uint64_t k = 0; k < n; ++k) {
    in.read<uint64_t>("a point id");
    Vec3<double> p;
    p.x = in.read<double>("a point");
    p.y = in.read<double>("a point");
    p.z = in.read<double>("a point");
    in.skip(1, 3 + 8, "a colour and error");
    const uint64_t track = in.count(4 + 4, "a track length");
    for (uint64_t e = 0; e < track; ++e) {
      const uint32_t image_id = in.read<uint32_t>("a track");
      in.read<uint32_t>("a track");
      add_depth(p, image_id, images, &depths);
    }
  }
  in.expect_end();
  return depths;
}

// Where the model is, and whether it is binary (what COLMAP writes by default) or text.
struct ModelFiles {
  fs::path directory;
  bool binary = false;
  fs::path file(const char* stem) const {
    return directory / (std::string(stem) + (binary ? ".bin" : ".txt"));
  }
};

ModelFiles model_directory(const std::string& path) {
  for (const fs::path& candidate :
       {fs::path(path) / "sparse" / "0", fs::path(path) / "sparse", fs::path(path)}) {
    if (fs::exists(candidate / "cameras.txt")) return {candidate, false};
    if (fs::exists(candidate / "cameras.bin")) return {candidate, true};
  }
  throw InvalidArgument(path +
                        ": no COLMAP model (cameras.bin or cameras.txt in sparse/0, sparse or "
                        "the folder itself)");
}

}  // namespace

Scene import_colmap(const std::string& path, const ImportOptions& options) {
  const ModelFiles files_of = model_directory(path);
  const fs::path model = files_of.directory;
  const std::string cameras_file = files_of.file("cameras").string();
  const std::string images_file = files_of.file("images").string();
  const std::map<int, ColmapCamera> cameras =
      files_of.binary ? read_cameras_binary(cameras_file) : read_cameras(cameras_file);
  const std::map<int, ColmapImage> images_by_id =
      files_of.binary ? read_images_binary(images_file) : read_images(images_file);
  std::vector<ColmapImage> images;
  for (const auto& [id, image] : images_by_id) {
    if (!cameras.count(image.camera_id)) {
      throw InvalidArgument(image.where + ": unknown camera id " + std::to_string(image.camera_id));
    }
    images.push_back(image);
  }
  std::sort(images.begin(), images.end(),
            [](const ColmapImage& a, const ColmapImage& b) { return a.name < b.name; });

  // Depth bounds, per image and over all images (for images that see no point).
  using Bounds = std::pair<double, double>;
  std::map<std::string, Bounds> image_bounds;
  std::optional<Bounds> scene_bounds;
  const fs::path points_file = files_of.file("points3D");
  if (fs::exists(points_file)) {
    const std::map<int, std::vector<double>> depths =
        files_of.binary ? read_point_depths_binary(points_file.string(), images_by_id)
                        : read_point_depths(points_file.string(), images_by_id);
    std::vector<double> all_depths;
    for (const auto& [id, image_depths] : depths) {
      all_depths.insert(all_depths.end(), image_depths.begin(), image_depths.end());
      image_bounds[images_by_id.at(id).name] = {percentile(image_depths, kNearPercentile),
                                                percentile(image_depths, kFarPercentile)};
    }
    if (!all_depths.empty()) {
      scene_bounds =
          Bounds{percentile(all_depths, kNearPercentile), percentile(all_depths, kFarPercentile)};
    }
  }

  std::vector<std::string> names;
  for (const ColmapImage& image : images) names.push_back(image.name);
  const std::vector<Split> all_splits = holdout_splits(names, options, path);
  const ImagesFolder folder =
      choose_images_folder(path, options, cameras.at(images.front().camera_id).width);
  Scene scene;
  std::vector<size_t> present;
  {
    std::vector<std::string> all_files;
    for (const ColmapImage& image : images) {
      all_files.push_back((fs::path(path) / folder.name / image.name).string());
    }
    present = existing_images(all_files, (fs::path(path) / folder.name).string(), options,
                              images_file, &scene);
  }
  images = select(images, present);
  const std::vector<Split> splits = select(all_splits, present);
  const std::vector<size_t> kept = first_views_per_split(splits, options.max_views_per_split);
  std::vector<std::string> files;
  for (size_t i : kept) files.push_back((fs::path(path) / folder.name / images[i].name).string());
  const uint8_t background = background_level(options.background);
  std::vector<Image> pixels = load_rgb_images(files, background, options);

  scene.name = directory_name(path);
  scene.source_format = "colmap";
  if (scene_bounds) {
    scene.depth_bounds_from =
        "COLMAP's points: 0.1 and 99.9 percentiles of each view's point depths, near x0.9, far "
        "x1.6";
  }
  scene.views.resize(kept.size());
  for (size_t k = 0; k < kept.size(); ++k) {
    const ColmapImage& image = images[kept[k]];
    const ColmapCamera& c = cameras.at(image.camera_id);
    const Image& loaded = pixels[k];
    require_size(loaded, files[k], pixels[0].width, pixels[0].height, "the first image's size");
    const double scale_x = double(loaded.width) / c.width;
    const double scale_y = double(loaded.height) / c.height;
    if (std::abs(c.height * scale_x - loaded.height) > 1.0) {
      throw InvalidArgument(files[k] + ": image is " + std::to_string(loaded.width) + "x" +
                            std::to_string(loaded.height) + ", not a downscale of the camera's " +
                            std::to_string(c.width) + "x" + std::to_string(c.height));
    }
    View& view = scene.views[k];
    view.name = (fs::path(folder.name) / image.name).string();
    PinholeCamera<double>& camera = view.camera;
    camera.width = loaded.width;
    camera.height = loaded.height;
    camera.fx = c.fx * scale_x;
    camera.fy = c.fy * scale_y;
    camera.cx = c.cx * scale_x - 0.5;
    camera.cy = c.cy * scale_y - 0.5;
    // c2w = [R^T | -R^T t] of the world-to-camera [R | t].
    double c2w[12];
    for (int row = 0; row < 3; ++row) {
      for (int col = 0; col < 3; ++col) c2w[row * 4 + col] = image.w2c[col * 4 + row];
      c2w[row * 4 + 3] =
          -(image.w2c[0 * 4 + row] * image.w2c[3] + image.w2c[1 * 4 + row] * image.w2c[7] +
            image.w2c[2 * 4 + row] * image.w2c[11]);
    }
    set_pose(&camera, c2w, image.where);
    const auto own = image_bounds.find(image.name);
    const std::optional<Bounds> bounds = own != image_bounds.end() ? own->second : scene_bounds;
    if (bounds) {  // else the near/far options, applied by finish_scene
      view.near_depth = kBoundsNearMargin * bounds->first;
      view.far_depth = kBoundsFarMargin * bounds->second;
    }
    view.split = splits[kept[k]];
    view.rgb = c.distortion.is_identity()
                   ? std::move(pixels[k].pixels)
                   : undistort_rgb(pixels[k].pixels, camera, c.distortion, background);
    if (options.target_width > 0 ||
        (options.downsample > 1 && folder.factor != options.downsample)) {
      fit_view(&view, output_size(c.width, c.height, options, image.where), files[k]);
    }
  }
  if (!scene_bounds && !bounds_from_cameras(&scene) && !(options.near_depth && options.far_depth)) {
    throw InvalidArgument(points_file.string() +
                          ": missing or without points in front of the cameras, and the views "
                          "look nearly the same way; give --near and --far");
  }
  finish_scene(&scene, options);
  return scene;
}

}  // namespace mvibr::data
