// A monocular dynamic scene written as DynIBaR's preprocessed folder (dynibar_folder.h): the
// inverse of import_dynibar, so that the ray tracer's exact flows, masks and depths test it.
#include "mvibr/data/dynibar_folder.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/npy.h"
#include "mvibr/data/npz.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

template <typename T>
NpyArray array_of(NpyType type, std::vector<size_t> shape, const std::vector<T>& values) {
  NpyArray array;
  array.type = type;
  array.shape = std::move(shape);
  array.bytes.resize(values.size() * sizeof(T));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

// 0 (black) where a mask is 1, 255 elsewhere.
std::vector<uint8_t> mask_image(const std::vector<uint8_t>& mask) {
  std::vector<uint8_t> grey(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) grey[i] = mask[i] ? 0 : 255;
  return grey;
}

std::string numbered(const char* format, int n) {
  char name[32];
  std::snprintf(name, sizeof(name), format, n);
  return name;
}

void check_writable(const Scene& scene) {
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument("scene '" + scene.name +
                          "' cannot be written as DynIBaR's folder: " + what);
  };
  validate_scene(scene);
  if (scene.views.size() < 2) fail("it needs at least 2 frames");
  for (size_t n = 0; n < scene.views.size(); ++n) {
    const View& v = scene.views[n];
    const PinholeCamera<double>& c = v.camera;
    if (v.time_index != int(n)) {
      fail("it is not one video in time order (view " + std::to_string(n) + " is time step " +
           std::to_string(v.time_index) + "); use the monocular rig");
    }
    if (v.motion.empty()) fail("view " + std::to_string(n) + " has no flows and masks");
    if (c.fx != c.fy || c.cx != 0.5 * c.width - 0.5 || c.cy != 0.5 * c.height - 0.5) {
      fail("view " + std::to_string(n) +
           " has fx != fy or an off-centre principal point, which the format cannot hold");
    }
  }
}

}  // namespace

void write_dynibar_folder(const Scene& scene, const std::string& folder) {
  check_writable(scene);
  const int width = scene.views[0].camera.width, height = scene.views[0].camera.height;
  const size_t n_frames = scene.views.size(), pixels = size_t(width) * height;
  const fs::path dense = fs::path(folder) / "dense";
  const std::string images = "images_" + std::to_string(width) + "x" + std::to_string(height);
  for (const std::string& sub :
       {images, std::string("images"), std::string("disp"), std::string("dynamic_masks"),
        std::string("static_masks"), std::string("flow_i1"), std::string("flow_i2"),
        std::string("flow_i3")}) {
    std::error_code error;
    fs::create_directories(dense / sub, error);
    if (error) {
      throw InvalidArgument((dense / sub).string() + ": cannot create folder: " + error.message());
    }
  }
  std::vector<double> rows;
  for (size_t n = 0; n < n_frames; ++n) {
    const View& v = scene.views[n];
    const double* m = v.camera.c2w;
    // OpenCV's [right, down, forward] columns back to LLFF's [down, right, backward].
    const double llff[15] = {m[1], m[0], -m[2],  m[3],  double(height),
                             m[5], m[4], -m[6],  m[7],  double(width),
                             m[9], m[8], -m[10], m[11], v.camera.fx};
    rows.insert(rows.end(), llff, llff + 15);
    rows.push_back(v.near_depth);
    rows.push_back(v.far_depth);

    const std::string frame = numbered("%05d.png", int(n));
    write_png((dense / images / frame).string(), width, height, 3, v.rgb.data());
    write_png((dense / "images" / frame).string(), width, height, 3, v.rgb.data());
    const FrameMotion& motion = v.motion;
    const std::string stem = numbered("%05d", int(n));
    write_file_atomically(
        (dense / "disp" / (stem + ".npy")).string(),
        encode_npy(array_of(NpyType::kFloat32, {size_t(height), size_t(width)}, motion.disparity)));
    write_png((dense / "dynamic_masks" / numbered("%d.png", int(n))).string(), width, height, 1,
              mask_image(motion.motion_mask).data());
    write_png((dense / "static_masks" / numbered("%d.png", int(n))).string(), width, height, 1,
              mask_image(motion.static_mask).data());
    for (int f = 0; f < kFlowCount; ++f) {
      const int offset = kFlowOffsets[f];
      const long long other = (long long)n + offset;
      if (other < 0 || other >= (long long)n_frames) continue;
      const std::vector<float> flow(motion.flow.begin() + long(f * pixels * 2),
                                    motion.flow.begin() + long((f + 1) * pixels * 2));
      const std::vector<uint8_t> valid(motion.flow_valid.begin() + long(f * pixels),
                                       motion.flow_valid.begin() + long((f + 1) * pixels));
      const std::string file = numbered("%05d", int(n)) + (offset > 0 ? "_fwd.npz" : "_bwd.npz");
      write_npz((dense / ("flow_i" + std::to_string(std::abs(offset))) / file).string(),
                {{"flow", array_of(NpyType::kFloat32, {size_t(height), size_t(width), 2}, flow)},
                 {"mask", array_of(NpyType::kBool, {size_t(height), size_t(width)}, valid)}});
    }
  }
  // Last, like scene.h5: a folder with its poses is complete.
  write_file_atomically((dense / "poses_bounds_cvd.npy").string(),
                        encode_npy(array_of(NpyType::kFloat64, {n_frames, 17}, rows)));
}

}  // namespace mvibr::data
