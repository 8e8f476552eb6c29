// Every op of ops/render_ops.h at a given problem size, with its compulsory bytes and FLOP
// estimate, bound to random inputs on the CPU or the CUDA backend: what `mvibr bench kernels` and
// bench/render_ops_bench time, from one copy of the inputs and the counts.
#pragma once

#include <vector>

#include "mvibr/bench/measure.h"

namespace mvibr::bench {

// IBRNet's training sizes by default: 512 rays, 64 coarse + 64 importance samples, 10 source
// views of 400x300 with 100x75 feature maps of 32 channels.
struct RenderOpsSize {
  int rays = 512;
  int samples = 64;     // coarse samples per ray (gather and ray mask run on these)
  int importance = 64;  // added by importance sampling (compositing runs on all of them)
  int views = 10;
  int channels = 32;
  int image_width = 400, image_height = 300;
  int feature_width = 100, feature_height = 75;
};

// Throws InvalidArgument naming the first size out of range.
void validate_render_ops_size(const RenderOpsSize& size);

// The ops in pipeline order (generate_rays ... masked_mse_backward), on host inputs.
std::vector<OpCase> cpu_render_op_cases(const RenderOpsSize& size);
// The same on the current CUDA device, each run synchronised. Throws RuntimeFailure in a build
// without CUDA or without a device.
std::vector<OpCase> cuda_render_op_cases(const RenderOpsSize& size);

}  // namespace mvibr::bench
