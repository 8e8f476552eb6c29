// Importers of camera models on small scenes written here: instant-ngp's lens distortion
// undistorted away (a rendered checkerboard), COLMAP's text and binary models, and every bad
// input refused with an InvalidArgument that names the file.
#include "importer_fixture.h"

#include <array>

namespace mvibr::data {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------------------------
// instant-ngp transforms.json with lens distortion

double checker(double x, double y) {
  const double square = 0.08;  // in normalized coordinates: 12 pixels at f = 150
  return (int(std::floor(x / square)) + int(std::floor(y / square))) % 2 ? 230.0 : 25.0;
}

// Distance in pixels from the nearest checker edge, for pixels whose colour bilinear
// resampling may legitimately blend.
double edge_distance(double x, double y, double focal) {
  const double square = 0.08;
  const auto to_edge = [&](double t) {
    const double f = t / square - std::floor(t / square);
    return std::min(f, 1 - f) * square * focal;
  };
  return std::min(to_edge(x), to_edge(y));
}

TEST(ImportBlender, InstantNgpDistortionIsUndistortedAway) {
  TempDir dir;
  const int width = 160, height = 120;
  const double focal = 150, cx_file = 80, cy_file = 60;  // corner convention in the file
  Distortion d;
  d.k1 = -0.3;
  d.k2 = 0.1;
  d.p1 = 0.002;
  d.p2 = -0.003;
  // Render what the lens saw: each distorted pixel's ideal point, by fixed-point inversion.
  std::vector<uint8_t> distorted(size_t(width) * height * 3);
  for (int v = 0; v < height; ++v) {
    for (int u = 0; u < width; ++u) {
      const double xd = (u + 0.5 - cx_file) / focal, yd = (v + 0.5 - cy_file) / focal;
      double x = xd, y = yd;
      for (int iteration = 0; iteration < 50; ++iteration) {
        double xx, yy;
        distort_normalized(d, x, y, &xx, &yy);
        x += xd - xx;
        y += yd - yy;
      }
      for (int c = 0; c < 3; ++c)
        distorted[(size_t(v) * width + u) * 3 + c] = uint8_t(checker(x, y));
    }
  }
  write_png(dir / "frame.png", width, height, 3, distorted.data());
  json transforms = {{"fl_x", focal}, {"fl_y", focal}, {"cx", cx_file}, {"cy", cy_file},
                     {"w", width},    {"h", height},   {"k1", d.k1},    {"k2", d.k2},
                     {"p1", d.p1},    {"p2", d.p2}};
  transforms["frames"] = {
      {{"file_path", "frame.png"},
       {"transform_matrix", {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 4}, {0, 0, 0, 1}}}}};
  write_text(dir / "transforms.json", transforms.dump());
  ASSERT_EQ(detect_format(dir.str()), "blender");
  const Scene scene = import_scene("auto", dir.str(), ImportOptions{});
  ASSERT_EQ(scene.views.size(), 1u);
  const View& view = scene.views[0];
  EXPECT_EQ(view.camera.cx, 79.5);
  EXPECT_EQ(view.camera.cy, 59.5);
  EXPECT_EQ(view.split, Split::kTest);  // view 0 of a transforms.json without splits
  int compared = 0, undistorted_good = 0, raw_good = 0;
  for (int v = 0; v < height; ++v) {
    for (int u = 0; u < width; ++u) {
      const double x = (u - view.camera.cx) / focal, y = (v - view.camera.cy) / focal;
      if (edge_distance(x, y, focal) < 1.5) continue;
      ++compared;
      const size_t i = (size_t(v) * width + u) * 3;
      undistorted_good += std::abs(view.rgb[i] - checker(x, y)) <= 12;
      raw_good += std::abs(distorted[i] - checker(x, y)) <= 12;
    }
  }
  ASSERT_GT(compared, 5000);
  EXPECT_GT(undistorted_good, 0.995 * compared);
  EXPECT_LT(raw_good, 0.8 * compared);  // the distortion was large enough to matter
}

TEST(Undistort, IdentityLeavesPixelsAlone) {
  PinholeCamera<double> camera{};
  camera.fx = camera.fy = 10;
  camera.cx = 3.5;
  camera.cy = 2.5;
  camera.width = 8;
  camera.height = 6;
  std::vector<uint8_t> rgb(8 * 6 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 5);
  EXPECT_EQ(undistort_rgb(rgb, camera, Distortion{}, 0), rgb);
}

// ---------------------------------------------------------------------------------------------
// COLMAP models

TEST(ImportColmap, TinyTextModelPosesIntrinsicsAndBounds) {
  TempDir dir;
  const std::vector<PinholeCamera<double>> truth = colmap_cameras();
  std::string images_txt = "# Image list with two lines of data per image:\n";
  for (size_t i = 0; i < truth.size(); ++i) {
    const double* m = truth[i].w2c;
    const std::array<double, 4> q = colmap_quaternion(truth[i]);
    char line[512];
    std::snprintf(line, sizeof line, "%zu %.17g %.17g %.17g %.17g %.17g %.17g %.17g 1 %s\n", i + 1,
                  q[0], q[1], q[2], q[3], m[3], m[7], m[11], kColmapImageNames[i]);
    images_txt += line;
    images_txt += i == 1 ? "\n" : "1.0 2.0 -1 3.5 4.5 7\n";  // 2D points: skipped
    write_gradient_png(dir / ("images/" + std::string(kColmapImageNames[i])), 32, 24, 3);
  }
  write_text(dir / "sparse/0/cameras.txt", "# Camera list\n1 PINHOLE 32 24 50 51 16 12\n");
  write_text(dir / "sparse/0/images.txt", images_txt);
  // Points seen by images 1 and 3; image 2 sees none and takes the percentiles of all depths.
  write_text(dir / "sparse/0/points3D.txt",
             "# 3D point list\n1 0 0 0 10 20 30 0.5 1 0 3 0\n2 0.2 0.1 0.3 1 2 3 0.1 1 1\n");
  ASSERT_EQ(detect_format(dir.str()), "colmap");
  ImportOptions options;
  options.llffhold = 2;
  const Scene scene = import_scene("auto", dir.str(), options);
  ASSERT_EQ(scene.views.size(), 3u);
  const size_t truth_of[] = {1, 2, 0};  // a.png, b.png, c.png
  for (size_t k = 0; k < 3; ++k) {
    const View& view = scene.views[k];
    const PinholeCamera<double>& expected = truth[truth_of[k]];
    EXPECT_EQ(view.name, "images/" + std::string(kColmapImageNames[truth_of[k]]));
    for (int j = 0; j < 12; ++j) EXPECT_NEAR(view.camera.c2w[j], expected.c2w[j], 1e-12) << k;
    EXPECT_EQ(view.camera.fx, 50);
    EXPECT_EQ(view.camera.fy, 51);
    EXPECT_EQ(view.camera.cx, 15.5);
    EXPECT_EQ(view.camera.cy, 11.5);
    EXPECT_EQ(view.split, k % 2 == 0 ? Split::kTest : Split::kTrain);
  }
  const auto depth = [&](size_t t, Vec3<double> p) { return transform_point(truth[t].w2c, p).z; };
  // Image 1 (c.png, imported last) sees both points.
  const double d0 = depth(0, {0, 0, 0}), d1 = depth(0, {0.2, 0.1, 0.3});
  EXPECT_NEAR(scene.views[2].near_depth, 0.9 * (std::min(d0, d1) + 0.001 * std::abs(d1 - d0)),
              1e-9);
  EXPECT_NEAR(scene.views[2].far_depth, 1.6 * (std::max(d0, d1) - 0.001 * std::abs(d1 - d0)), 1e-9);
  EXPECT_NEAR(scene.views[1].near_depth, 0.9 * depth(2, {0, 0, 0}), 1e-9);  // b.png: one point
  // a.png sees no point: the 0.1 / 99.9 percentiles of all three depths.
  std::vector<double> all = {d0, d1, depth(2, {0, 0, 0})};
  std::sort(all.begin(), all.end());
  EXPECT_NEAR(scene.views[0].near_depth, 0.9 * (all[0] + 0.002 * (all[1] - all[0])), 1e-9);
}

// What COLMAP writes by default: the same model in cameras.bin, images.bin and points3D.bin,
// written as COLMAP's reconstruction_io does (importer_fixture.h), reads as the text one does.
TEST(ImportColmap, BinaryModelsReadAsTheirTextTwins) {
  TempDir dir;
  const ColmapTwins twins = colmap_twins();
  write_colmap_twin(dir / "text", twins, false);
  write_colmap_twin(dir / "binary", twins, true);
  const std::string& images_bin = twins.images_bin;
  const std::string& cameras_bin = twins.cameras_bin;
  ASSERT_EQ(detect_format(dir / "binary"), "colmap");
  const Scene text = import_scene("auto", dir / "text", ImportOptions{});
  const Scene binary = import_scene("auto", dir / "binary", ImportOptions{});
  ASSERT_EQ(binary.views.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const View &a = text.views[k], &b = binary.views[k];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.split, b.split);
    for (int j = 0; j < 12; ++j) EXPECT_EQ(a.camera.c2w[j], b.camera.c2w[j]) << k;
    EXPECT_EQ(a.camera.fx, b.camera.fx);
    EXPECT_EQ(a.camera.cx, b.camera.cx);
    EXPECT_EQ(a.near_depth, b.near_depth);
    EXPECT_EQ(a.far_depth, b.far_depth);
    EXPECT_EQ(a.rgb, b.rgb);  // undistorted alike
  }
  EXPECT_NE(binary.views[1].near_depth, binary.views[0].near_depth);  // each its own points
  // Damage: a cut file, an absurd count, an unknown model, bytes after the end.
  write_text(dir / "binary/sparse/0/images.bin", images_bin.substr(0, images_bin.size() - 9));
  expect_invalid_naming([&] { import_colmap(dir / "binary", ImportOptions{}); }, "images.bin");
  std::string absurd = images_bin;
  const uint64_t huge = uint64_t(1) << 60;
  std::memcpy(&absurd[0], &huge, 8);
  write_text(dir / "binary/sparse/0/images.bin", absurd);
  expect_invalid_naming([&] { import_colmap(dir / "binary", ImportOptions{}); },
                        "images.bin at byte 8: the image count");
  write_text(dir / "binary/sparse/0/images.bin", images_bin + "x");
  expect_invalid_naming([&] { import_colmap(dir / "binary", ImportOptions{}); },
                        "1 bytes after the last record");
  write_text(dir / "binary/sparse/0/images.bin", images_bin);
  std::string fisheye = cameras_bin;
  const int32_t model = 5;
  std::memcpy(&fisheye[12], &model, 4);
  write_text(dir / "binary/sparse/0/cameras.bin", fisheye);
  expect_invalid_naming([&] { import_colmap(dir / "binary", ImportOptions{}); }, "OPENCV_FISHEYE");
}

TEST(ImportColmap, DistortedModelsAreUndistortedAndOthersRefused) {
  TempDir dir;
  write_gradient_png(dir / "images/a.png", 32, 24, 3);
  write_text(dir / "sparse/0/images.txt", "1 1 0 0 0 0 0 0 1 a.png\n\n");
  write_text(dir / "sparse/0/cameras.txt", "1 SIMPLE_RADIAL 32 24 40 16 12 -0.2\n");
  ImportOptions options;
  options.near_depth = 1;
  options.far_depth = 5;
  const Scene scene = import_colmap(dir.str(), options);
  EXPECT_NE(scene.views[0].rgb, load_image(dir / "images/a.png").pixels);  // resampled
  write_text(dir / "sparse/0/cameras.txt", "1 OPENCV_FISHEYE 32 24 40 40 16 12 0 0 0 0\n");
  expect_invalid_naming([&] { import_colmap(dir.str(), options); }, "cameras.txt line 1");
  write_text(dir / "sparse/0/cameras.txt", "1 PINHOLE 32 24 40 40 16 12\n");
  expect_invalid_naming([&] { import_colmap(dir.str(), ImportOptions{}); }, "points3D.txt");
  write_text(dir / "sparse/0/images.txt", "1 nan 0 0 0 0 0 0 1 a.png\n\n");
  expect_invalid_naming([&] { import_colmap(dir.str(), options); }, "images.txt line 1");
}

// ---------------------------------------------------------------------------------------------
// Bad input: every refusal names the file

// A two-frame NeRF-synthetic scene in `dir`; `edit` may change the JSON before it is written.
void write_blender_scene(const TempDir& dir, const std::function<void(json&)>& edit = {}) {
  json transforms = {{"camera_angle_x", 0.69}};
  for (int i = 0; i < 2; ++i) {
    transforms["frames"].push_back(
        {{"file_path", "./train/r_" + std::to_string(i)},
         {"transform_matrix", {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 4 + i}, {0, 0, 0, 1}}}});
    write_gradient_png(dir / ("train/r_" + std::to_string(i) + ".png"), 16, 12, 4);
  }
  if (edit) edit(transforms);
  write_text(dir / "transforms_train.json", transforms.dump());
}

TEST(ImportErrors, BlenderScenesNameTheBadFile) {
  TempDir dir;
  write_blender_scene(dir);
  EXPECT_EQ(import_blender(dir.str(), ImportOptions{}).views.size(), 2u);
  const std::string json_file = dir / "transforms_train.json";

  // A missing image: skipped with a warning that counts and names it, or refused with strict.
  fs::remove(dir / "train/r_1.png");
  const Scene without = import_blender(dir.str(), ImportOptions{});
  EXPECT_EQ(without.views.size(), 1u);
  ASSERT_FALSE(without.warnings.empty());
  EXPECT_NE(without.warnings[0].find("1 of 2 frames of " + json_file + " have no image file in " +
                                     dir.str() + " (train/r_1.png)"),
            std::string::npos)
      << without.warnings[0];
  ImportOptions strict;
  strict.strict = true;
  expect_invalid_naming([&] { import_blender(dir.str(), strict); }, "train/r_1.png");

  const std::string png = read_bytes(dir / "train/r_0.png");
  write_text(dir / "train/r_1.png", png.substr(0, png.size() - 20));
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, "train/r_1.png");

  write_blender_scene(dir);
  write_gradient_png(dir / "train/r_1.png", 16, 13, 4);
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, "train/r_1.png");
  write_blender_scene(dir, [](json& t) { t["w"] = 16, t["h"] = 13; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, "train/r_0.png");

  // JSON has no NaN: Python's json.dump writes the bare word, nlohmann's dump writes null.
  write_blender_scene(dir, [](json& t) { t["frames"][1]["transform_matrix"][0][3] = 1.25; });
  std::string text = read_bytes(json_file);
  write_text(json_file, text.replace(text.find("1.25"), 4, "NaN"));
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["frames"][1]["transform_matrix"][0][3] = NAN; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["frames"][0]["transform_matrix"][0][0] = 1.2; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["frames"][0]["transform_matrix"][0][0] = -1; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t.erase("camera_angle_x"); });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["frames"][0].erase("file_path"); });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["frames"][0]["time"] = 0.5; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_blender_scene(dir, [](json& t) { t["is_fisheye"] = true; });
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);
  write_text(json_file, "{\"camera_angle_x\": 0.69, \"frames\": [");
  expect_invalid_naming([&] { import_blender(dir.str(), ImportOptions{}); }, json_file);

  expect_invalid_naming([&] { detect_format(dir / "nothing_here"); }, "nothing_here");
  expect_invalid_naming([&] { import_scene("nerfies", dir.str(), ImportOptions{}); }, "nerfies");
}

TEST(ImportErrors, LlffAndDnerfNameTheBadFile) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  MVIBR_NEED_DATASET(dnerf_npz, "dnerf_lego_tiny");
  dnerf_npz += "/tiny_dnerf_data.npz";
  TempDir dir;
  const std::string table = read_bytes(fern_dir + "/poses_bounds.npy");
  write_text(dir / "poses_bounds.npy", table);
  expect_invalid_naming([&] { import_llff(dir.str(), fern_options()); }, dir / "images_8");
  fs::create_directories(dir / "images_8");
  for (const fs::directory_entry& e : fs::directory_iterator(fern_dir + "/images_8")) {
    fs::copy_file(e.path(), dir / ("images_8/" + e.path().filename().string()));
  }
  write_gradient_png(dir / "images_8/image007.png", 500, 378, 3);
  expect_invalid_naming([&] { import_llff(dir.str(), fern_options()); }, "image007.png");
  fs::remove(dir / "images_8/image007.png");
  expect_invalid_naming([&] { import_llff(dir.str(), fern_options()); }, "poses_bounds.npy");
  fs::copy_file(fern_dir + "/images_8/image007.png", dir / "images_8/image007.png");
  EXPECT_EQ(import_llff(dir.str(), fern_options()).views.size(), 20u);
  // A NaN in the rotation of row 4.
  std::string nan_table = table;
  const double nan = NAN;
  std::memcpy(&nan_table[nan_table.size() - 20 * 17 * 8 + (4 * 17 + 1) * 8], &nan, 8);
  write_text(dir / "poses_bounds.npy", nan_table);
  expect_invalid_naming([&] { import_llff(dir.str(), fern_options()); }, "poses_bounds.npy row 4");
  write_text(dir / "poses_bounds.npy", table.substr(0, table.size() - 100));
  expect_invalid_naming([&] { import_llff(dir.str(), fern_options()); }, "poses_bounds.npy");

  const std::string npz = read_bytes(dnerf_npz);
  write_text(dir / "cut.npz", npz.substr(0, npz.size() * 3 / 4));
  expect_invalid_naming([&] { import_dnerf(dir / "cut.npz", ImportOptions{}); }, dir / "cut.npz");
}

// ---------------------------------------------------------------------------------------------
// Downscaling, depth bounds, missing frames and test ids: scenes as users bring them

TEST(Downscale, AveragesTheAreaEachPixelCoversAndScalesIntrinsics) {
  // 4x2 grey to 2x1: 2x2 blocks. 3x1 to 2x1: pixel 1 is shared half and half.
  const std::vector<uint8_t> grey = {0, 10, 20, 30, 40, 50, 60, 71};
  EXPECT_EQ(downscale_area(grey, 4, 2, 1, 2, 1), (std::vector<uint8_t>{25, 45}));  // 45.25
  const std::vector<uint8_t> row = {30, 60, 90};
  // Output 0 covers [0, 1.5): (30 + 0.5 * 60) / 1.5 = 40; output 1 (0.5 * 60 + 90) / 1.5 = 80.
  EXPECT_EQ(downscale_area(row, 3, 1, 1, 2, 1), (std::vector<uint8_t>{40, 80}));
  EXPECT_THROW(downscale_area(row, 3, 1, 1, 4, 1), InvalidArgument);
  PinholeCamera<double> camera{};
  camera.width = 400, camera.height = 300;
  camera.fx = 500, camera.fy = 480, camera.cx = 199.5, camera.cy = 149.5;
  scale_intrinsics(&camera, 100, 75);
  EXPECT_DOUBLE_EQ(camera.fx, 125);
  EXPECT_DOUBLE_EQ(camera.fy, 120);
  EXPECT_DOUBLE_EQ(camera.cx, 49.5);  // still the centre: (199.5 + 0.5) / 4 - 0.5
  EXPECT_DOUBLE_EQ(camera.cy, 37);
  EXPECT_EQ(camera.width, 100);
  EXPECT_EQ(camera.height, 75);
}

// fern ships images_8 only: --factor 16 reads it and halves it again, the intrinsics one
// sixteenth of the full-size ones in poses_bounds.npy.
TEST(ImportLlff, FactorWithoutItsFolderDownscalesTheNearestLargerOne) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  ImportOptions options;
  options.downsample = 16;
  const Scene scene = import_llff(fern_dir, options);
  const Scene eighth = import_llff(fern_dir, fern_options());
  const NpyArray table = read_npy(fern_dir + "/poses_bounds.npy");
  ASSERT_EQ(scene.views.size(), 20u);
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const PinholeCamera<double>& c = scene.views[i].camera;
    EXPECT_EQ(c.width, 252);
    EXPECT_EQ(c.height, 189);
    EXPECT_NEAR(c.fx, table.at(i * 17 + 14) / 16, 1e-9);
    EXPECT_NEAR(c.fy, table.at(i * 17 + 14) / 16, 1e-9);
    EXPECT_DOUBLE_EQ(c.cx, 125.5);
    EXPECT_DOUBLE_EQ(c.cy, 94);
  }
  // Pixel (10, 7) of the 252x189 frame is the mean of the 2x2 block at (20, 14) of images_8.
  for (int c = 0; c < 3; ++c) {
    const auto at = [&](int x, int y) { return int(eighth.views[3].rgb[(y * 504 + x) * 3 + c]); };
    const double mean = (at(20, 14) + at(21, 14) + at(20, 15) + at(21, 15)) / 4.0;
    EXPECT_NEAR(scene.views[3].rgb[(7 * 252 + 10) * 3 + c], mean, 0.5 + 1e-9);
  }
}

// An LLFF capture with full-size images only (images/): --factor 2 downscales them; with
// images_2/ present it is read instead, as LLFF's own loader does.
TEST(ImportLlff, FullSizeOnlyCapturesAreDownscaledAtImport) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  TempDir dir;
  // fern's images_8 as if they were full size: poses_bounds with H, W, focal of images_8.
  NpyArray table = read_npy(fern_dir + "/poses_bounds.npy");
  std::string bytes = read_bytes(fern_dir + "/poses_bounds.npy");
  const size_t data_start = bytes.size() - table.count() * 8;
  for (size_t i = 0; i < table.shape[0]; ++i) {
    for (const size_t k : {4, 9, 14}) {
      const double value = table.at(i * 17 + k) / 8;
      std::memcpy(&bytes[data_start + (i * 17 + k) * 8], &value, 8);
    }
  }
  write_text(dir / "poses_bounds.npy", bytes);
  fs::create_directories(dir / "images");
  for (const fs::directory_entry& e : fs::directory_iterator(fern_dir + "/images_8")) {
    fs::copy_file(e.path(), dir / ("images/" + e.path().filename().string()));
  }
  ImportOptions half;
  half.downsample = 2;
  half.max_views_per_split = 2;
  const Scene scene = import_llff(dir.str(), half);
  ASSERT_EQ(scene.views.size(), 4u);
  EXPECT_EQ(scene.views[0].camera.width, 252);
  EXPECT_EQ(scene.views[0].camera.height, 189);
  EXPECT_NEAR(scene.views[0].camera.fx, table.at(14) / 16, 1e-9);
  EXPECT_EQ(scene.views[0].name, "images/image000.png");
  ImportOptions wide = half;
  wide.downsample = 1;
  wide.target_width = 126;
  const Scene narrow = import_llff(dir.str(), wide);
  EXPECT_EQ(narrow.views[0].camera.width, 126);
  EXPECT_EQ(narrow.views[0].camera.height, 95);  // 378 * 126 / 504 = 94.5, rounded
  EXPECT_NEAR(narrow.views[0].camera.fx, table.at(14) / 32, 1e-9);
  wide.target_width = 600;
  expect_invalid_naming([&] { import_llff(dir.str(), wide); }, "cannot make them 600x450");
  // images_2 present: read, not made.
  fs::create_directories(dir / "images_2");
  std::vector<uint8_t> grey(size_t(252) * 189 * 3, 77);
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "images")) {
    write_png(dir / ("images_2/" + e.path().filename().string()), 252, 189, 3, grey.data());
  }
  const Scene read = import_llff(dir.str(), half);
  EXPECT_EQ(read.views[0].name, "images_2/image000.png");
  EXPECT_EQ(read.views[0].rgb[0], 77);
}

// instant-ngp's transforms.json as captures come: frames listed whose images are absent, names
// with their extension, lens distortion, aabb_scale for the bounds, a downscale, test ids.
TEST(ImportBlender, TransformsWithAbsentFramesDistortionBoundsAndFactor) {
  TempDir dir;
  const int width = 64, height = 48;
  json transforms = {{"fl_x", 60.0}, {"fl_y", 62.0},
                     {"cx", 32.0},   {"cy", 24.0},
                     {"w", width},   {"h", height},
                     {"k1", -0.1},   {"aabb_scale", 2},
                     {"scale", 0.5}, {"offset", {0.5, 0.5, 0.5}}};
  // Cameras 4 from the origin on the x and y axes, looking at it (OpenGL: backward is +z).
  const std::vector<json> poses = {
      {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 4}, {0, 0, 0, 1}},
      {{0, 0, 1, 4}, {0, 1, 0, 0}, {-1, 0, 0, 0}, {0, 0, 0, 1}},
      {{-1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, -1, -4}, {0, 0, 0, 1}},
      {{0, 0, -1, -4}, {0, 1, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}},
      {{1, 0, 0, 0}, {0, 0, -1, -4}, {0, 1, 0, 0}, {0, 0, 0, 1}},
  };
  for (size_t i = 0; i < poses.size(); ++i) {
    const std::string name = "images/000" + std::to_string(i) + ".jpg";
    transforms["frames"].push_back({{"file_path", name}, {"transform_matrix", poses[i]}});
    if (i != 1 && i != 3) write_gradient_png(dir / name, width, height, 3);  // PNG bytes, .jpg name
  }
  write_text(dir / "transforms.json", transforms.dump());
  ImportOptions options;
  options.downsample = 2;
  options.test_ids = {"0004"};
  const Scene scene = import_blender(dir.str(), options);
  ASSERT_EQ(scene.views.size(), 3u);
  ASSERT_FALSE(scene.warnings.empty());
  EXPECT_NE(scene.warnings[0].find("2 of 5 frames of " + (dir / "transforms.json") +
                                   " have no image file in " + dir.str() +
                                   " (images/0001.jpg, images/0003.jpg)"),
            std::string::npos)
      << scene.warnings[0];
  EXPECT_EQ(scene.views[0].name, "images/0000.jpg");
  EXPECT_EQ(scene.views[0].split, Split::kTrain);
  EXPECT_EQ(scene.views[2].split, Split::kTest);  // frame 4, by its name
  for (const View& view : scene.views) {
    EXPECT_EQ(view.camera.width, 32);
    EXPECT_EQ(view.camera.height, 24);
    EXPECT_DOUBLE_EQ(view.camera.fx, 30);
    EXPECT_DOUBLE_EQ(view.camera.fy, 31);
    EXPECT_DOUBLE_EQ(view.camera.cx, 15.5);  // (32 - 0.5 + 0.5) / 2 - 0.5
    EXPECT_DOUBLE_EQ(view.camera.cy, 11.5);
    // The box: instant-ngp's unit cube at scale 0.5 is 2 across, aabb_scale 2 makes it 4, about
    // the origin; seen from 4 away along an axis its corners are 2 to 6 deep.
    EXPECT_NEAR(view.near_depth, 2, 1e-9) << view.name;
    EXPECT_NEAR(view.far_depth, 6, 1e-9) << view.name;
  }
  EXPECT_NE(scene.depth_bounds_from.find("aabb_scale 2"), std::string::npos);
  // Without aabb_scale: the point the cameras look at is 4 ahead, so 2 and 6 again.
  transforms.erase("aabb_scale");
  write_text(dir / "transforms.json", transforms.dump());
  const Scene looked = import_blender(dir.str(), options);
  for (const View& view : looked.views) {
    EXPECT_NEAR(view.near_depth, 2, 1e-9);
    EXPECT_NEAR(view.far_depth, 6, 1e-9);
  }
  options.strict = true;
  expect_invalid_naming([&] { import_blender(dir.str(), options); }, "images/0001.jpg");
  options.strict = false;
  options.test_ids = {"7", "nothing"};
  expect_invalid_naming([&] { import_blender(dir.str(), options); }, "names no view of 5");
}

TEST(ImportOptions, TestIdsComeAsAListOrAFile) {
  TempDir dir;
  EXPECT_EQ(parse_test_ids("3,7,frame_0002.png"),
            (std::vector<std::string>{"3", "7", "frame_0002.png"}));
  write_text(dir / "test_ids.txt", "1 2\n5,\n");
  EXPECT_EQ(parse_test_ids(dir / "test_ids.txt"), (std::vector<std::string>{"1", "2", "5"}));
  EXPECT_THROW(parse_test_ids(","), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::data
