// DynIBaR's Fourier features (its PeriodicEmbed), forward and backward.
// - Each of a row's `dim` inputs as itself and its cosines and sines at `count` frequencies.
// - A concept of its own: the motion MLP embeds (x, y, z, t) with it, and DynIBaR's static and
//   dynamic networks embed time, directions and points with it in log spacing.
// - Output [n, dim (1 + 2 count)] = cat([x, cos(f_1 x), ..., cos(f_F x), sin(f_1 x), ...,
//   sin(f_F x)]) along the last axis, each block the whole input row: all cosines, then all
//   sines (the published module loops over [torch.cos, torch.sin], then over frequencies).
//   Published weights see their inputs in this order, so it must not change.
// - Frequencies are the float32 values the published module computes: linear spacing is
//   torch.linspace(1, max_freq + 1, count) (16 of them from 1 to 17 in steps of 16/15, not
//   integers), log spacing 2^linspace(0, count - 1, count) = 1, 2, 4, ... (max_freq unused). The
//   double path uses the same float frequencies, so both precisions compute the same function.
// - The backward reads the forward's output, not x: the identity block is x, and the slopes of
//   cos(f x) and sin(f x) are -f sin(f x) and f cos(f x), already there. No cos or sin again.
// - Serial, like Linear (layers.h): a network runs chunks of rows in parallel around it.
#pragma once

#include <cstddef>
#include <vector>

#include "mvibr/core/hd.h"

namespace mvibr::nn {

enum class FrequencySpacing { kLinear, kLog };

// The largest `count` a GPU kernel takes (the frequencies travel as a kernel argument).
constexpr int kMaxEmbedFrequencies = 64;

// The published module's frequencies as float32 (see above). InvalidArgument unless
// 1 <= count <= kMaxEmbedFrequencies.
std::vector<float> periodic_embed_frequencies(FrequencySpacing spacing, int max_freq, int count);

// dL/dx_j of one row from the embedding's output row y and its gradient g (both dim (1 + 2 count)
// wide): g_j + sum over k, in order, of f_k (cos_kj g_sin_kj - sin_kj g_cos_kj). One function for
// both backends, so that a GPU compiled without contraction gives the CPU's bits.
template <typename T>
MVIBR_HD T periodic_embed_input_gradient(int dim, int count, const float* frequencies, const T* y,
                                         const T* g, int j) {
  T sum = g[j];
  for (int k = 0; k < count; ++k) {
    const int c = (1 + k) * dim + j, s = (1 + count + k) * dim + j;
    sum += T(frequencies[k]) * (y[c] * g[s] - y[s] * g[c]);
  }
  return sum;
}

class PeriodicEmbed {
 public:
  // InvalidArgument unless dim >= 1 and 1 <= count <= kMaxEmbedFrequencies.
  PeriodicEmbed(int dim, FrequencySpacing spacing, int max_freq, int count);

  int dim() const { return dim_; }
  int count() const { return int(frequencies_.size()); }
  int width() const { return dim_ * (1 + 2 * count()); }  // the output's columns
  const std::vector<float>& frequencies() const { return frequencies_; }

  // x [n, dim] -> y [n, width()], overwritten.
  template <typename T>
  void forward(size_t n, const T* x, T* y) const;
  // grad_x [n, dim] from the forward's output y and grad_y [n, width()]: overwritten, or added to
  // when `accumulate`.
  template <typename T>
  void backward(size_t n, const T* y, const T* grad_y, T* grad_x, bool accumulate = false) const;

 private:
  int dim_;
  std::vector<float> frequencies_;
};

}  // namespace mvibr::nn
