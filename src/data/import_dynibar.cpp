// DynIBaR's preprocessed monocular videos (layout: dynibar_folder.h), with their flows, masks and
// disparities, whoever made them (consistent video depth, RAFT and a segmenter, or mvibr's ray
// tracer).
//
// Cameras: LLFF's rows as import_llff reads them, but with DynIBaR's loader's intrinsics: the
//   row's focal as it is for the frames read, the principal point at the centre (cx = W/2 - 0.5
//   in mvibr's pixel-centre convention, importers.h). No recentring or rescaling (the loader's
//   bd_factor scale cancels: depths, disparities and poses stay in the file's units).
// Near/far: the loader's rule, scene-wide: near = 0.9 min(bounds); with s = 1 / (0.75
//   min(bounds)) its scale and M = s max(bounds), far = 1.5 / s * (M < 10 ? min(20, M + 15) :
//   min(50, max(20, M))): a far plane well behind the content, for the static model's
//   view-dependent background. --near/--far replace it.
// Times: frame n of N has time n / (N - 1) and time index n. Splits: llffhold or test_ids.
// Masks: a pixel moves where the mask image is darker than 255 (the loader's 1 - v/255 > 1e-3),
//   resized to the frame by nearest neighbour; the loader's later erosion is the model's choice.
// Flows: every flow whose other frame exists must be there, of the frame's size.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "import_common.h"
#include "mvibr/core/error.h"
#include "mvibr/data/npy.h"
#include "mvibr/data/npz.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

// DynIBaR's loader: bd_factor 0.75, and its far-plane rule in the rescaled units.
constexpr double kBoundsFactor = 0.75, kNearMargin = 0.9, kFarMargin = 1.5;

double dynibar_far(double min_bound, double max_bound) {
  const double scale = 1.0 / (kBoundsFactor * min_bound);
  const double m = max_bound * scale;
  const double far = m < 10 ? std::min(20.0, m + 15.0) : std::min(50.0, std::max(20.0, m));
  return kFarMargin * far / scale;
}

// images_<W>x<H>, W and H decimal numbers.
bool is_sized_images_folder(const std::string& name) {
  const std::string prefix = "images_";
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string size = name.substr(prefix.size());
  const size_t x = size.find('x');
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  return x != std::string::npos && digits(size.substr(0, x)) && digits(size.substr(x + 1));
}

// The folder of frames: --images, else the one images_<W>x<H> (DynIBaR's training height, 288,
// when there are several).
std::string frames_folder(const fs::path& dense, const ImportOptions& options) {
  if (!options.images_folder.empty()) {
    if (!fs::is_directory(dense / options.images_folder)) {
      throw InvalidArgument((dense / options.images_folder).string() + ": no such image folder");
    }
    return options.images_folder;
  }
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dense)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && is_sized_images_folder(name)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  for (const std::string& name : found) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "x288") == 0) return name;
  }
  std::string list;
  for (const std::string& name : found) list += " " + name;
  throw InvalidArgument(
      dense.string() + ": " +
      (found.empty() ? "no images_<W>x<H> folder of frames"
                     : "several frame folders (" + list.substr(1) + "); choose one with --images"));
}

void require_file(const fs::path& path, const std::string& what) {
  if (!fs::is_regular_file(path)) {
    throw InvalidArgument(path.string() + ": missing (" + what + ")");
  }
}

// A mask image at the frame's size (nearest neighbour, as cv2.INTER_NEAREST), 1 where darker
// than white.
std::vector<uint8_t> read_mask(const fs::path& path, int width, int height) {
  require_file(path, "a motion mask of every frame");
  const Image image = load_image(path.string());
  std::vector<uint8_t> mask(size_t(width) * height);
  for (int y = 0; y < height; ++y) {
    const int sy = std::min(image.height - 1, int(std::floor(y * double(image.height) / height)));
    for (int x = 0; x < width; ++x) {
      const int sx = std::min(image.width - 1, int(std::floor(x * double(image.width) / width)));
      mask[size_t(y) * width + x] =
          image.pixels[(size_t(sy) * image.width + sx) * size_t(image.channels)] < 255 ? 1 : 0;
    }
  }
  return mask;
}

void require_shape(const NpyArray& array, const std::vector<size_t>& shape,
                   const std::string& what) {
  if (array.shape == shape) return;
  const auto text = [](const std::vector<size_t>& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + ")";
  };
  throw InvalidArgument(what + ": shape " + text(array.shape) + ", expected " + text(shape) +
                        " (the frames' size)");
}

// The disparity, masks and flows of frame n of a video of `count` frames named by `stem`.
FrameMotion read_motion(const fs::path& dense, int n, int count, const std::string& stem, int width,
                        int height) {
  const size_t pixels = size_t(width) * height;
  const size_t h = size_t(height), w = size_t(width);
  FrameMotion m;
  const fs::path disp = dense / "disp" / (stem + ".npy");
  require_file(disp, "the disparity of every frame");
  const NpyArray disparity = read_npy(disp.string());
  require_shape(disparity, {h, w}, disp.string());
  m.disparity.resize(pixels);
  for (size_t i = 0; i < pixels; ++i) {
    const double d = disparity.at(i);
    if (!(d >= 0) || !std::isfinite(d)) {
      throw InvalidArgument(disp.string() + ": disparity must be finite and non-negative");
    }
    m.disparity[i] = float(d);
  }
  const std::string mask_name = std::to_string(n) + ".png";
  m.motion_mask = read_mask(dense / "dynamic_masks" / mask_name, width, height);
  m.static_mask = read_mask(dense / "static_masks" / mask_name, width, height);
  m.flow.assign(kFlowCount * pixels * 2, 0.0f);
  m.flow_valid.assign(kFlowCount * pixels, 0);
  for (int f = 0; f < kFlowCount; ++f) {
    const int offset = kFlowOffsets[f], other = n + offset;
    if (other < 0 || other >= count) continue;
    char name[32];
    std::snprintf(name, sizeof(name), "%05d_%s.npz", n, offset > 0 ? "fwd" : "bwd");
    const fs::path file = dense / ("flow_i" + std::to_string(std::abs(offset))) / name;
    require_file(file,
                 "the flow from frame " + std::to_string(n) + " to frame " + std::to_string(other));
    const std::map<std::string, NpyArray> arrays = read_npz(file.string());
    for (const char* key : {"flow", "mask"}) {
      if (!arrays.count(key)) throw InvalidArgument(file.string() + ": no '" + key + "' array");
    }
    const NpyArray& flow = arrays.at("flow");
    const NpyArray& valid = arrays.at("mask");
    require_shape(flow, {h, w, 2}, file.string() + ":flow");
    require_shape(valid, {h, w}, file.string() + ":mask");
    for (size_t i = 0; i < 2 * pixels; ++i) {
      const double value = flow.at(i);
      if (!std::isfinite(value)) throw InvalidArgument(file.string() + ": non-finite flow");
      m.flow[f * pixels * 2 + i] = float(value);
    }
    for (size_t i = 0; i < pixels; ++i) m.flow_valid[f * pixels + i] = valid.at(i) != 0 ? 1 : 0;
  }
  return m;
}

}  // namespace

Scene import_dynibar(const std::string& scene_path, const ImportOptions& options) {
  const fs::path given(scene_path);
  const fs::path dense =
      fs::exists(given / "dense" / "poses_bounds_cvd.npy") ? given / "dense" : given;
  const fs::path bounds_file = dense / "poses_bounds_cvd.npy";
  if (!fs::exists(bounds_file)) {
    throw InvalidArgument(scene_path +
                          ": not a DynIBaR folder (no poses_bounds_cvd.npy in it or in dense/)");
  }
  if (options.downsample > 1 || options.target_width > 0 || options.max_views_per_split > 0) {
    throw InvalidArgument(
        scene_path +
        ": DynIBaR's flows, masks and disparities are at the frames' size and refer to every "
        "frame; --factor, --width and --max_views do not apply (choose a frame folder with "
        "--images)");
  }
  const NpyArray table = read_npy(bounds_file.string());
  if (table.shape.size() != 2 || table.shape[1] != 17 || table.shape[0] < 2) {
    throw InvalidArgument(bounds_file.string() + ": expected shape (N, 17) with N >= 2 frames");
  }
  const int count = int(table.shape[0]);
  const std::string folder = frames_folder(dense, options);
  const std::vector<std::string> files = image_files_in((dense / folder).string());
  if (files.size() != size_t(count)) {
    throw InvalidArgument(bounds_file.string() + ": has " + std::to_string(count) + " poses but " +
                          (dense / folder).string() + " has " + std::to_string(files.size()) +
                          " frames");
  }
  Scene scene;
  scene.name =
      directory_name(dense.filename() == "dense" ? dense.parent_path().string() : dense.string());
  scene.source_format = "dynibar";
  scene.dynamic = true;
  double min_bound = INFINITY, max_bound = 0;
  const std::vector<Split> splits = holdout_splits(files, options, dense.string());
  scene.views.resize(size_t(count));
  for (int n = 0; n < count; ++n) {
    const std::string where = bounds_file.string() + " row " + std::to_string(n);
    const auto m = [&](int r, int c) {
      return table.at(size_t(n) * 17 + size_t(r) * 5 + size_t(c));
    };
    const double near = table.at(size_t(n) * 17 + 15), far = table.at(size_t(n) * 17 + 16);
    if (!(near > 0 && near < far && std::isfinite(far))) {
      throw InvalidArgument(where + ": bounds must satisfy 0 < near < far");
    }
    if (!(m(2, 4) > 0 && std::isfinite(m(2, 4)))) {
      throw InvalidArgument(where + ": focal must be a positive number");
    }
    min_bound = std::min(min_bound, near);
    max_bound = std::max(max_bound, far);
    View& view = scene.views[size_t(n)];
    const double c2w[12] = {m(0, 1), m(0, 0), -m(0, 2), m(0, 3),  //
                            m(1, 1), m(1, 0), -m(1, 2), m(1, 3),  //
                            m(2, 1), m(2, 0), -m(2, 2), m(2, 3)};
    set_pose(&view.camera, c2w, where);
    view.camera.fx = view.camera.fy = m(2, 4);
    view.split = splits[size_t(n)];
    view.time = double(n) / (count - 1);
    view.time_index = n;
  }
  std::vector<Image> images = load_rgb_images(files, background_level(options.background), options);
  for (int n = 0; n < count; ++n) {
    const Image& image = images[size_t(n)];
    require_size(image, files[size_t(n)], images[0].width, images[0].height,
                 "the first frame's size");
    View& view = scene.views[size_t(n)];
    const fs::path file(files[size_t(n)]);
    view.name = (file.parent_path().filename() / file.filename()).string();
    view.camera.width = image.width;
    view.camera.height = image.height;
    view.camera.cx = 0.5 * image.width - 0.5;
    view.camera.cy = 0.5 * image.height - 0.5;
    view.near_depth = kNearMargin * min_bound;
    view.far_depth = dynibar_far(min_bound, max_bound);
    view.rgb = std::move(images[size_t(n)].pixels);
    view.motion = read_motion(dense, n, count, file.stem().string(), image.width, image.height);
  }
  scene.depth_bounds_from =
      "DynIBaR's rule on poses_bounds_cvd.npy: near 0.9 x the smallest bound, far 1.5 x a plane "
      "15 to 50 rescaled units back";
  finish_scene(&scene, options);
  return scene;
}

}  // namespace mvibr::data
