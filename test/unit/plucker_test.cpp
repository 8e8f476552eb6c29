// Plucker coordinates (geom/plucker.h): the published formulas on a hand-worked ray, the moment's
// invariance along the ray, and the source ray through a point.
#include "mvibr/geom/plucker.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mvibr {
namespace {

TEST(Plucker, DirectionIsUnitAndMomentIsOriginCrossDirection) {
  double out[6];
  plucker_coordinates(Vec3<double>{1, 0, 0}, Vec3<double>{0, 0, 2}, out);
  const double expected[6] = {0, 0, 1, 0, -1, 0};  // (1,0,0) x (0,0,1) = (0,-1,0)
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(out[i], expected[i]) << i;
}

TEST(Plucker, EveryPointOfALineGivesTheSameCoordinates) {
  const Vec3<double> origin{0.3, -1.2, 2.0}, direction{0.5, 0.25, -1.0};
  double first[6], moved[6];
  plucker_coordinates(origin, direction, first);
  plucker_coordinates(origin + 3.7 * direction, 0.2 * direction, moved);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(moved[i], first[i], 1e-14) << i;
  // The moment is perpendicular to the direction.
  EXPECT_NEAR(first[0] * first[3] + first[1] * first[4] + first[2] * first[5], 0, 1e-15);
}

TEST(Plucker, SourceRaysRunFromTheCameraCentreThroughThePoint) {
  const Vec3<double> center{1, 2, 3}, point{2, 2, 3};
  double out[6];
  source_plucker_coordinates(center, point, out);
  EXPECT_DOUBLE_EQ(out[0], 1);
  EXPECT_DOUBLE_EQ(out[1], 0);
  EXPECT_DOUBLE_EQ(out[2], 0);
  // (1,2,3) x (1,0,0) = (0, 3, -2)
  EXPECT_DOUBLE_EQ(out[3], 0);
  EXPECT_DOUBLE_EQ(out[4], 3);
  EXPECT_DOUBLE_EQ(out[5], -2);
  // A point on the camera centre: F.normalize's floor keeps it finite.
  source_plucker_coordinates(center, center, out);
  for (double x : out) EXPECT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace mvibr
