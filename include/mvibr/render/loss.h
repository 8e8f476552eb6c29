// IBRNet's masked MSE (img2mse): sum over valid rays of the squared colour error, divided by
// 3 * (number of valid rays) + 1e-6. PSNR is -10 log10(mse).
#pragma once

#include <cmath>

#include "mvibr/core/hd.h"

namespace mvibr {

constexpr double kLossDenominatorEpsilon = 1e-6;

template <typename T>
MVIBR_HD T masked_squared_error(const T* predicted, const T* target, T mask) {
  const T dr = predicted[0] - target[0], dg = predicted[1] - target[1],
          db = predicted[2] - target[2];
  return mask * (dr * dr + dg * dg + db * db);
}

template <typename T>
MVIBR_HD T masked_mse_denominator(T mask_sum) {
  return T(3) * mask_sum + T(kLossDenominatorEpsilon);
}

template <typename T>
MVIBR_HD void masked_squared_error_backward(const T* predicted, const T* target, T mask, T scale,
                                            T* grad_predicted) {
  for (int c = 0; c < 3; ++c) grad_predicted[c] = T(2) * mask * (predicted[c] - target[c]) * scale;
}

inline double mse_to_psnr(double mse) {
  return -10.0 * std::log10(mse);
}

}  // namespace mvibr
