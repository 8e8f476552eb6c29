// CPU backend of the masked MSE loss. The sum runs serially in double: it is O(rays), and a
// fixed order keeps the loss identical for any thread count.
#include "mvibr/render/loss.h"

#include "mvibr/ops/render_ops.h"

namespace mvibr::cpu {

template <typename T>
void masked_mse(int n_rays, const T* predicted, const T* target, const T* ray_mask,
                T* loss_and_denominator) {
  double sum = 0, mask_sum = 0;
  for (int r = 0; r < n_rays; ++r) {
    sum += masked_squared_error(predicted + 3 * r, target + 3 * r, ray_mask[r]);
    mask_sum += ray_mask[r];
  }
  const double denominator = masked_mse_denominator(mask_sum);
  loss_and_denominator[0] = T(sum / denominator);
  loss_and_denominator[1] = T(denominator);
}

template <typename T>
void masked_mse_backward(int n_rays, const T* predicted, const T* target, const T* ray_mask,
                         const T* loss_and_denominator, T grad_loss, T* grad_predicted) {
  const T scale = grad_loss / loss_and_denominator[1];
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_rays; ++r) {
    masked_squared_error_backward(predicted + 3 * r, target + 3 * r, ray_mask[r], scale,
                                  grad_predicted + 3 * r);
  }
}

template void masked_mse(int, const float*, const float*, const float*, float*);
template void masked_mse(int, const double*, const double*, const double*, double*);
template void masked_mse_backward(int, const float*, const float*, const float*, const float*,
                                  float, float*);
template void masked_mse_backward(int, const double*, const double*, const double*, const double*,
                                  double, double*);

}  // namespace mvibr::cpu
