// Dynamic loss scaling (see loss_scale.h): GradScaler's defaults of growth 2 and backoff 1/2.
#include "mvibr/train/loss_scale.h"

#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::train {

DynamicLossScale::DynamicLossScale(double initial, int growth_interval)
    : scale_(initial), growth_interval_(growth_interval) {
  if (!(initial > 0) || !std::isfinite(initial)) {
    throw InvalidArgument("loss scale must be positive and finite, got " + std::to_string(initial));
  }
  if (growth_interval < 1) {
    throw InvalidArgument("loss scale growth interval must be >= 1, got " +
                          std::to_string(growth_interval));
  }
}

void DynamicLossScale::update(bool finite) {
  if (!finite) {
    scale_ /= 2;
    finite_in_a_row_ = 0;
    return;
  }
  if (++finite_in_a_row_ == growth_interval_) {
    scale_ *= 2;
    finite_in_a_row_ = 0;
  }
}

}  // namespace mvibr::train
