// Cameras: rigid inverse, pixel-to-ray with camera-z = 1, and projection back to the pixel.
#include "mvibr/geom/camera.h"

#include <gtest/gtest.h>

#include "mvibr/geom/projection.h"

namespace mvibr {
namespace {

PinholeCamera<double> test_camera() {
  return look_at_camera<double>({3, -1, 2}, {0.2, 0.1, -0.3}, {0, 0, 1}, 50.0, 64, 48);
}

TEST(Camera, WorldToCameraInvertsCameraToWorld) {
  const PinholeCamera<double> camera = test_camera();
  const Vec3<double> p{0.3, -0.7, 1.1};
  const Vec3<double> back = transform_point(camera.c2w, transform_point(camera.w2c, p));
  EXPECT_NEAR(back.x, p.x, 1e-12);
  EXPECT_NEAR(back.y, p.y, 1e-12);
  EXPECT_NEAR(back.z, p.z, 1e-12);
}

TEST(Camera, RayDirectionHasUnitCameraDepthAndLooksForward) {
  const PinholeCamera<double> camera = test_camera();
  Vec3<double> o, d;
  pixel_to_ray(camera, 10.0, 40.0, &o, &d);
  const Vec3<double> d_camera = rotate(camera.w2c, d);
  EXPECT_NEAR(d_camera.z, 1.0, 1e-12);
  EXPECT_NEAR(d_camera.x, (10.0 - camera.cx) / camera.fx, 1e-12);
  EXPECT_NEAR(d_camera.y, (40.0 - camera.cy) / camera.fy, 1e-12);
  EXPECT_NEAR(o.x, 3, 1e-12);
  // The principal point looks at the look-at target.
  pixel_to_ray(camera, camera.cx, camera.cy, &o, &d);
  const Vec3<double> to_target = Vec3<double>{0.2, 0.1, -0.3} - o;
  EXPECT_NEAR(dot(d, to_target) / (norm(d) * norm(to_target)), 1.0, 1e-12);
}

TEST(Camera, ProjectingARayPointReturnsItsPixel) {
  const PinholeCamera<double> camera = test_camera();
  Vec3<double> o, d;
  pixel_to_ray(camera, 17.25, 30.5, &o, &d);
  const Projection<double> p = project_point(camera, o + 4.0 * d, 64, 48);
  EXPECT_NEAR(p.u, 17.25, 1e-10);
  EXPECT_NEAR(p.v, 30.5, 1e-10);
  EXPECT_TRUE(p.valid);
  EXPECT_FALSE(project_point(camera, o - 4.0 * d, 64, 48).valid);  // behind
  pixel_to_ray(camera, -3.0, 30.5, &o, &d);
  EXPECT_FALSE(project_point(camera, o + 4.0 * d, 64, 48).valid);  // left of the image
}

}  // namespace
}  // namespace mvibr
