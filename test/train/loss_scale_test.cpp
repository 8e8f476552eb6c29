// Dynamic loss scaling: halves on an overflow, doubles after the growth interval of finite steps,
// and an overflow restarts the count.
#include "mvibr/train/loss_scale.h"

#include <gtest/gtest.h>

#include "mvibr/core/error.h"

namespace mvibr::train {
namespace {

// From 1024: an overflow halves the scale, and the window's 3 finite steps, not 2, double it back.
void halve_then_double_after_the_window(DynamicLossScale& scale) {
  scale.update(false);
  EXPECT_EQ(scale.scale(), 512);
  scale.update(true);
  scale.update(true);
  EXPECT_EQ(scale.scale(), 512);
  scale.update(true);
  EXPECT_EQ(scale.scale(), 1024);
}

TEST(DynamicLossScale, HalvesOnOverflowAndDoublesAfterTheWindow) {
  DynamicLossScale scale(1024, 3);
  EXPECT_EQ(scale.scale(), 1024);
  halve_then_double_after_the_window(scale);
  // An overflow in the middle of a window starts the count again.
  scale.update(true);
  scale.update(true);
  halve_then_double_after_the_window(scale);
}

TEST(DynamicLossScale, BadSettingsAreRejected) {
  EXPECT_THROW(DynamicLossScale(0, 10), InvalidArgument);
  EXPECT_THROW(DynamicLossScale(-1, 10), InvalidArgument);
  EXPECT_THROW(DynamicLossScale(65536, 0), InvalidArgument);
}

}  // namespace
}  // namespace mvibr::train
