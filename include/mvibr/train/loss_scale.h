// Dynamic loss scaling for fp16 GEMMs (as torch.cuda.amp.GradScaler): the backward pass starts
// from loss x scale so that small gradients survive the GEMMs' fp16 inputs, and the gradients are
// divided by the scale before the update. A step whose gradients overflowed (not finite) is
// skipped and the scale halved; after `growth_interval` finite steps in a row it doubles. Every
// rank sees the same all-reduced gradients, so every rank's scale follows the same path.
#pragma once

namespace mvibr::train {

class DynamicLossScale {
 public:
  // InvalidArgument unless initial > 0 and growth_interval >= 1.
  DynamicLossScale(double initial, int growth_interval);

  double scale() const { return scale_; }
  // After each step, with whether its gradients were finite.
  void update(bool finite);

 private:
  double scale_;
  int growth_interval_;
  int finite_in_a_row_ = 0;
};

}  // namespace mvibr::train
