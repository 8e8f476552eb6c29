// Importers on the real data sets (LLFF fern, NeRF-synthetic lego, tiny D-NeRF lego): counts,
// sizes and splits; conventions checked against image content (silhouettes for lego,
// photo-consistency for fern) rather than only against the formulas.
#include "importer_fixture.h"

namespace mvibr::data {
namespace {

using namespace testing;

// Plane sweep between two views: for textured pixels of view a, the best colour match in view b
// over depths in a's bounds. Right poses and intrinsics find matches far better than wrong ones.
double photo_error(const View& a, const View& b) {
  const int w = a.camera.width, h = a.camera.height;
  const auto grey = [&](int u, int v) {
    const uint8_t* p = &a.rgb[(size_t(v) * w + u) * 3];
    return double(p[0]) + p[1] + p[2];
  };
  std::vector<double> errors;
  for (int v = 40; v < h - 40; v += 9) {
    for (int u = 40; u < w - 40; u += 9) {
      if (std::abs(grey(u + 2, v) - grey(u - 2, v)) + std::abs(grey(u, v + 2) - grey(u, v - 2)) <
          60) {
        continue;  // flat: any depth matches
      }
      double best = 1e30;
      for (int d = 0; d < 96; ++d) {
        const double inverse_depth =
            1 / a.near_depth + (d / 95.0) * (1 / a.far_depth - 1 / a.near_depth);
        double error = 0;
        bool inside = true;
        for (int dv = -2; dv <= 2 && inside; dv += 2) {
          for (int du = -2; du <= 2 && inside; du += 2) {
            Vec3<double> origin, direction;
            pixel_to_ray(a.camera, double(u + du), double(v + dv), &origin, &direction);
            const Projection<double> p =
                project_point(b.camera, origin + (1 / inverse_depth) * direction, w, h);
            double rgb[3];
            inside = p.valid && sample_rgb(b, p.u, p.v, rgb);
            const uint8_t* ref = &a.rgb[(size_t(v + dv) * w + u + du) * 3];
            for (int c = 0; c < 3 && inside; ++c) error += std::abs(rgb[c] - ref[c]);
          }
        }
        if (inside) best = std::min(best, error / 27);
      }
      if (best < 1e30) errors.push_back(best);
    }
  }
  std::sort(errors.begin(), errors.end());
  return errors.empty() ? 1e30 : errors[errors.size() / 2];
}

// The same two cameras rolled half a turn about their optical axes: the image upside down
// relative to the pose, as a wrong sign of the camera y axis would give.
std::pair<View, View> rolled(View a, View b) {
  for (View* view : {&a, &b}) {
    for (int row = 0; row < 3; ++row) {
      view->camera.c2w[row * 4] = -view->camera.c2w[row * 4];
      view->camera.c2w[row * 4 + 1] = -view->camera.c2w[row * 4 + 1];
    }
    set_world_to_camera(&view->camera);
  }
  return {a, b};
}

// ---------------------------------------------------------------------------------------------
// NeRF-synthetic lego

TEST(ImportBlender, LegoCountsSizesSplitsAndIntrinsics) {
  MVIBR_NEED_DATASET(lego_dir, "nerf_synthetic_lego_400");
  const auto start = std::chrono::steady_clock::now();
  const Scene scene = import_scene("auto", lego_dir, ImportOptions{});
  std::printf("lego: %zu views imported in %.2f s\n", scene.views.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(scene.source_format, "blender");
  EXPECT_EQ(scene.name, "nerf_synthetic_lego_400");
  EXPECT_FALSE(scene.dynamic);
  const int train = int(json_frame_count(lego_dir + "/transforms_train.json"));
  const int val = int(json_frame_count(lego_dir + "/transforms_val.json"));
  const int test = int(json_frame_count(lego_dir + "/transforms_test.json"));
  ASSERT_EQ(int(scene.views.size()), train + val + test);
  EXPECT_EQ(count_split(scene, Split::kTrain), train);
  EXPECT_EQ(count_split(scene, Split::kValidation), val);
  EXPECT_EQ(count_split(scene, Split::kTest), test);
  EXPECT_EQ(scene.views[0].name, "train/r_0.png");
  EXPECT_EQ(scene.views[train].name, "val/r_0.png");
  const double camera_angle_x = 0.6911112070083618;
  for (const View& view : scene.views) {
    ASSERT_EQ(view.camera.width, 400);
    ASSERT_EQ(view.camera.height, 400);
    ASSERT_EQ(view.rgb.size(), 400u * 400 * 3);
    EXPECT_DOUBLE_EQ(view.camera.fx, 200 / std::tan(0.5 * camera_angle_x));
    EXPECT_DOUBLE_EQ(view.camera.fy, view.camera.fx);
    EXPECT_EQ(view.camera.cx, 199.5);
    EXPECT_EQ(view.camera.cy, 199.5);
    // The cameras sit 4.03 from the point they all look at: about NeRF's 2 and 6.
    EXPECT_NEAR(view.near_depth, 0.5 * 4.0311, 1e-3);
    EXPECT_NEAR(view.far_depth, 1.5 * 4.0311, 1e-3);
  }
  EXPECT_NE(scene.depth_bounds_from.find("the point every view looks at"), std::string::npos);
  // A corner pixel of an RGBA render is transparent: white by default.
  EXPECT_EQ(scene.views[0].rgb[0], 255);
}

TEST(ImportBlender, LegoCamerasLookAtTheOriginUpright) {
  MVIBR_NEED_DATASET(lego_dir, "nerf_synthetic_lego_400");
  ImportOptions options;
  options.max_views_per_split = 6;
  const Scene scene = import_blender(lego_dir, options);
  ASSERT_EQ(scene.views.size(), 18u);
  for (const View& view : scene.views) {
    // The object sits at the origin: it projects near the image centre, in front.
    const Vec3<double> origin = transform_point(view.camera.w2c, Vec3<double>{0, 0, 0});
    EXPECT_GT(origin.z, 3.0) << view.name;
    const Projection<double> p = project_point(view.camera, {0, 0, 0}, 400, 400);
    EXPECT_NEAR(p.u, 199.5, 10) << view.name;
    EXPECT_NEAR(p.v, 199.5, 10) << view.name;
    expect_upright(view);
  }
  for (size_t a = 0; a < 6; ++a) {
    expect_reprojection_consistent(scene.views[a], scene.views[(a + 7) % 18], 199.5, 199.5, 4.0);
    expect_reprojection_consistent(scene.views[a], scene.views[a + 1], 31.0, 377.25, 3.3);
  }
}

TEST(ImportBlender, LegoViewsArePhotoConsistent) {
  MVIBR_NEED_DATASET(lego_dir, "nerf_synthetic_lego_400");
  ImportOptions options;
  options.splits = {"test"};  // the test views circle the object 1.8 degrees apart
  options.max_views_per_split = 3;
  const Scene scene = import_blender(lego_dir, options);
  const View& a = scene.views[0];
  const View& b = scene.views[2];
  const double right = photo_error(a, b);
  const auto [rolled_a, rolled_b] = rolled(a, b);
  const double upside_down = photo_error(rolled_a, rolled_b);
  std::printf("lego median photo error: %.2f right, %.2f rolled\n", right, upside_down);
  EXPECT_LT(right, 8.0);
  EXPECT_GT(upside_down, 1.4 * right);
}

// ---------------------------------------------------------------------------------------------
// LLFF fern

TEST(ImportLlff, FernCountsSizesSplitsIntrinsicsAndBounds) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const auto start = std::chrono::steady_clock::now();
  const Scene scene = import_scene("auto", fern_dir, fern_options());
  std::printf("fern: %zu views imported in %.2f s\n", scene.views.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(scene.source_format, "llff");
  EXPECT_EQ(scene.name, "llff_fern");
  ASSERT_EQ(scene.views.size(), 20u);
  const NpyArray table = read_npy(fern_dir + "/poses_bounds.npy");
  for (size_t i = 0; i < 20; ++i) {
    const View& view = scene.views[i];
    EXPECT_EQ(view.split, i % 8 == 0 ? Split::kTest : Split::kTrain) << i;
    ASSERT_EQ(view.camera.width, 504);
    ASSERT_EQ(view.camera.height, 378);
    EXPECT_NEAR(view.camera.fx, table.at(i * 17 + 14) / 8, 1e-9);
    EXPECT_NEAR(view.camera.fy, table.at(i * 17 + 14) / 8, 1e-9);
    EXPECT_EQ(view.camera.cx, 251.5);
    EXPECT_EQ(view.camera.cy, 188.5);
    EXPECT_NEAR(view.near_depth, 0.9 * table.at(i * 17 + 15), 1e-12);
    EXPECT_NEAR(view.far_depth, 1.6 * table.at(i * 17 + 16), 1e-12);
  }
  EXPECT_EQ(scene.views[3].name, "images_8/image003.png");
  EXPECT_EQ(count_split(scene, Split::kTest), 3);
}

TEST(ImportLlff, FernCamerasLookIntoTheirBoundsTogether) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = import_llff(fern_dir, fern_options());
  for (const View& a : scene.views) {
    // The centre ray's point at mid-bounds depth is scene content every view sees in front.
    const double mid = 0.5 * (a.near_depth / 0.9 + a.far_depth / 1.6);
    Vec3<double> origin, direction;
    pixel_to_ray(a.camera, a.camera.cx, a.camera.cy, &origin, &direction);
    const Vec3<double> point = origin + mid * direction;
    for (const View& b : scene.views) {
      EXPECT_TRUE(project_point(b.camera, point, 504, 378).valid) << a.name << " in " << b.name;
    }
    expect_reprojection_consistent(a, scene.views[(&a - &scene.views[0] + 5) % 20], 10.0, 300.0,
                                   mid);
  }
}

TEST(ImportLlff, FernViewsArePhotoConsistent) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const Scene scene = import_llff(fern_dir, fern_options());
  const View& a = scene.views[1];
  const View& b = scene.views[2];
  const double right = photo_error(a, b);
  const auto [rolled_a, rolled_b] = rolled(a, b);
  const double upside_down = photo_error(rolled_a, rolled_b);
  // LLFF's [down, right, back] columns taken as OpenCV's, unconverted.
  View raw_a = a, raw_b = b;
  for (View* view : {&raw_a, &raw_b}) {
    for (int row = 0; row < 3; ++row) {
      std::swap(view->camera.c2w[row * 4], view->camera.c2w[row * 4 + 1]);
      view->camera.c2w[row * 4 + 2] = -view->camera.c2w[row * 4 + 2];
    }
    set_world_to_camera(&view->camera);
  }
  const double unconverted = photo_error(raw_a, raw_b);
  std::printf("fern median photo error: %.2f right, %.2f rolled, %.2f unconverted\n", right,
              upside_down, unconverted);
  EXPECT_LT(right, 12.0);
  EXPECT_GT(upside_down, 1.5 * right);
  EXPECT_GT(unconverted, 1.5 * right);
}

// ---------------------------------------------------------------------------------------------
// D-NeRF tiny lego

TEST(ImportDnerf, TinyLegoCountsTimesSplitsAndConventions) {
  MVIBR_NEED_DATASET(dnerf_npz, "dnerf_lego_tiny");
  dnerf_npz += "/tiny_dnerf_data.npz";
  const Scene scene = import_scene("auto", dnerf_npz, ImportOptions{});
  EXPECT_EQ(scene.source_format, "dnerf");
  EXPECT_TRUE(scene.dynamic);
  ASSERT_EQ(scene.views.size(), 81u);
  const NpyArray times = read_npz(dnerf_npz).at("times");
  for (size_t i = 0; i < 81; ++i) {
    const View& view = scene.views[i];
    EXPECT_EQ(view.split, i % 8 == 0 ? Split::kTest : Split::kTrain);
    EXPECT_EQ(view.time, times.at(i));
    ASSERT_EQ(view.camera.width, 100);
    ASSERT_EQ(view.rgb.size(), 100u * 100 * 3);
    EXPECT_NEAR(view.camera.fx, 138.88887889922103, 1e-9);
    EXPECT_EQ(view.camera.cx, 49.5);
    expect_upright(view);
    EXPECT_GT(transform_point(view.camera.w2c, Vec3<double>{0, 0, 0}).z, 2.0) << i;
  }
  EXPECT_EQ(count_split(scene, Split::kTest), 11);
  // time_index numbers the distinct times in order.
  for (const View& a : scene.views) {
    for (const View& b : scene.views) {
      EXPECT_EQ(a.time < b.time, a.time_index < b.time_index);
    }
  }
  EXPECT_EQ(scene.views[0].time_index, 0);

  ImportOptions few;
  few.max_views_per_split = 2;
  EXPECT_EQ(import_dnerf(dnerf_npz, few).views.size(), 4u);
}

}  // namespace
}  // namespace mvibr::data
