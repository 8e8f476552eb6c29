// The optimiser on a CUDA device: Adam's update, gradient clipping and the gradient norm on
// device arrays, for a step that keeps its training state where it runs.
// - The same arithmetic as nn::Adam and nn::global_grad_norm (nn/adam_math.h): Adam's and
//   AdamW's updates are the CPU's bit for bit (LAMB, with its per-tensor norms, is CPU only); the
//   norm sums each chunk in another order (double, far below float).
// - Asynchronous on `stream`; only gradient_norm waits, to read its 8 bytes.
// - Exists only in a build with the CUDA backend (MVIBR_HAVE_CUDA).
#pragma once

#include <cstddef>

#include "mvibr/nn/adam_math.h"
#include "mvibr/nn/parameters.h"

struct CUstream_st;

namespace mvibr::nn::cuda {

// sqrt of the sum of squares of grads [count], as nn::global_grad_norm chunks it; `partials`
// holds gradient_norm_partials(count) doubles. Non-finite when a gradient is.
size_t gradient_norm_partials(size_t count);
double gradient_norm(size_t count, const float* grads, double* partials, CUstream_st* stream);

// Adam or AdamW on values [begin, end) (an nn::Adam::Span): with `clip_factor` < 1 the gradients
// are first scaled by it (in place, as clip_grad_norm_ does), then each value takes
// adam_update_value as one of `group`, with AdamW's weight decay where `decays`.
void adam_update(size_t begin, size_t end, const AdamCoefficients& coefficients,
                 ParameterGroup group, bool decays, float clip_factor, float* values, float* grads,
                 float* exp_avg, float* exp_avg_sq, CUstream_st* stream);

}  // namespace mvibr::nn::cuda
