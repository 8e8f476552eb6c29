// Instance norm with the residual add and activation that follow it in IBRNet's ResUNet, forward
// and backward (see conv_layers.h). Fused because every instance norm there is followed by one
// of them: each plane is normalised, added to and activated while it is in cache, instead of
// three trips over the whole map. Statistics and the normalised values are computed in double:
// planes are as small as 2x3 values deep in the encoder, where fp32 would lose the rounding bound
// (the variance subtracts the mean, the backward subtracts two nearly equal projections). The sums
// are OpenMP simd reductions: double lanes added in a fixed order the compiler chooses, the same on
// every run of one build; a strictly serial double sum waited out the adder's latency on every
// value and made these layers cost as much as the convolutions around them. Channels last (the
// pose backbone's maps), one image at a time, in runs of pixels and in float arithmetic about
// float centres, with double sums (channel_sums).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mvibr/nn/conv_layers.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

struct PlaneStatistics {
  double mean, inverse_std;
};

// Two passes (mean, then squared deviations): exact enough where |mean| >> std.
PlaneStatistics statistics(const float* values, size_t n) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) sum += double(values[i]);
  const double mean = sum / double(n);
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (size_t i = 0; i < n; ++i) {
    const double d = double(values[i]) - mean;
    squares += d * d;
  }
  return {mean, 1.0 / std::sqrt(squares / double(n) + double(kInstanceNormEps))};
}

// Plane p's statistics kept for the backward, and read back (conv_layers.h: the floats hold the
// doubles' bytes).
static_assert(sizeof(PlaneStatistics) == kInstanceNormStatisticsFloats * sizeof(float));

void keep(float* kept, size_t p, const PlaneStatistics& s) {
  std::memcpy(kept + p * kInstanceNormStatisticsFloats, &s, sizeof s);
}

PlaneStatistics kept_statistics(const float* kept, size_t p) {
  PlaneStatistics s;
  std::memcpy(&s, kept + p * kInstanceNormStatisticsFloats, sizeof s);
  return s;
}

// Channels last, an image [pixels, channels] is walked in runs of whole pixels at least 64
// values long, so that the inner loops are long enough to vectorise whatever the channel count:
// the per-channel factors are repeated along a run, and the per-channel sums are kept per run
// position and folded into channels at the end, in a fixed order. (Looping over one pixel's
// channels at a time made the layer 1.7x slower than on planes.)
//
// The values are taken in float, twice the lanes of double: the pose backbone's layers had
// been bound by double arithmetic, not memory. Each value enters as x - s, s a float near its
// channel's mean (exact but for one rounding of the difference), so no product or sum is ever
// as large as |mean| / std times the deviations; the sums are float over kRunsPerPartial runs,
// then double.
size_t run_length(size_t channels) {
  return channels * ((64 + channels - 1) / channels);
}

// Per-channel values repeated along a run (a whole number of pixels). Nested loops, not k %
// channels: a division per value made the set-up cost more than small images' own passes.
template <typename T>
std::vector<float> along_run(const std::vector<T>& per_channel, size_t run) {
  std::vector<float> repeated(run);
  const size_t channels = per_channel.size();
  for (size_t pixel = 0; pixel < run; pixel += channels) {
    for (size_t c = 0; c < channels; ++c) repeated[pixel + c] = float(per_channel[c]);
  }
  return repeated;
}

constexpr size_t kRunsPerPartial = 8;

// For each channel c of an image of `size` values: a[c] and b[c], the sums over its pixels of
// what sum_run(start, count, a, b) adds into a[k] and b[k] for the values start + k of each run.
template <typename SumRun>
void channel_sums(size_t size, size_t channels, SumRun sum_run, std::vector<double>* a,
                  std::vector<double>* b) {
  const size_t run = run_length(channels);
  std::vector<double> run_a(run, 0.0), run_b(run, 0.0);
  std::vector<float> partial_a(run), partial_b(run);
  for (size_t first = 0; first < size; first += kRunsPerPartial * run) {
    std::fill(partial_a.begin(), partial_a.end(), 0.0f);
    std::fill(partial_b.begin(), partial_b.end(), 0.0f);
    const size_t last = std::min(size, first + kRunsPerPartial * run);
    for (size_t start = first; start < last; start += run) {
      sum_run(start, std::min(run, last - start), partial_a.data(), partial_b.data());
    }
    for (size_t k = 0; k < run; ++k) {
      run_a[k] += double(partial_a[k]);
      run_b[k] += double(partial_b[k]);
    }
  }
  a->assign(channels, 0.0);
  b->assign(channels, 0.0);
  for (size_t pixel = 0; pixel < run; pixel += channels) {
    for (size_t c = 0; c < channels; ++c) {
      (*a)[c] += run_a[pixel + c];
      (*b)[c] += run_b[pixel + c];
    }
  }
}

// Per channel of one channels-last image, as statistics() per plane. One pass over the image:
// the sums of d = x - s and of d^2 give mean = s + mean(d) and var = mean(d^2) - mean(d)^2, s the
// mean of the channel's first pixels (at most 32), rounded to float.
std::vector<PlaneStatistics> channel_statistics(const float* image, size_t pixels,
                                                size_t channels) {
  const size_t size = pixels * channels, run = run_length(channels);
  const size_t first_pixels = std::min<size_t>(pixels, 32);
  std::vector<double> first_mean(channels, 0.0);
  for (size_t i = 0; i < first_pixels; ++i) {
    for (size_t c = 0; c < channels; ++c) first_mean[c] += image[i * channels + c];
  }
  for (double& m : first_mean) m /= double(first_pixels);
  const std::vector<float> shift = along_run(first_mean, run);
  std::vector<double> sums, squares;
  channel_sums(
      size, channels,
      [&](size_t start, size_t count, float* sum, float* square) {
        const float* values = image + start;
#pragma omp simd
        for (size_t k = 0; k < count; ++k) {
          const float d = values[k] - shift[k];
          sum[k] += d;
          square[k] = multiply_add(d, d, square[k]);
        }
      },
      &sums, &squares);
  std::vector<PlaneStatistics> statistics(channels);
  for (size_t c = 0; c < channels; ++c) {
    const double mean_d = sums[c] / double(pixels);
    const double variance = std::max(squares[c] / double(pixels) - mean_d * mean_d, 0.0);
    statistics[c] = {double(shift[c]) + mean_d,
                     1.0 / std::sqrt(variance + double(kInstanceNormEps))};
  }
  return statistics;
}

// The float factors a run's values are normalised with: x̂ = (x - centre) inverse_std - offset,
// centre the mean rounded to float and offset (mean - centre) inverse_std.
struct RunNormalisation {
  std::vector<float> centre, inverse_std, offset;
};

RunNormalisation run_normalisation(const std::vector<PlaneStatistics>& statistics, size_t run) {
  std::vector<float> centre(statistics.size()), inverse_std(statistics.size()),
      offset(statistics.size());
  for (size_t c = 0; c < statistics.size(); ++c) {
    centre[c] = float(statistics[c].mean);
    inverse_std[c] = float(statistics[c].inverse_std);
    offset[c] = float((statistics[c].mean - double(centre[c])) * statistics[c].inverse_std);
  }
  return {along_run(centre, run), along_run(inverse_std, run), along_run(offset, run)};
}

void activate(Activation activation, size_t n, float* result) {
  if (activation == Activation::kRelu) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) result[i] = result[i] > 0.0f ? result[i] : 0.0f;
  } else if (activation == Activation::kElu) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) result[i] = elu_of(result[i]);
  }
}

void forward_channels_last(const InstanceNormShape& shape, const float* x, const float* gamma,
                           const float* beta, const float* residual, Activation activation,
                           float* out, float* kept) {
  const size_t pixels = size_t(shape.plane_size), channels = size_t(shape.channels);
  const size_t image_size = pixels * channels, run = run_length(channels);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < shape.batch; ++n) {
    const float* image = x + size_t(n) * image_size;
    const std::vector<PlaneStatistics> s = channel_statistics(image, pixels, channels);
    for (size_t c = 0; kept && c < channels; ++c) keep(kept, size_t(n) * channels + c, s[c]);
    // z = gamma x̂ + beta = (x - centre) scale + shift.
    const RunNormalisation r = run_normalisation(s, run);
    std::vector<double> channel_scale(channels), channel_shift(channels);
    for (size_t c = 0; c < channels; ++c) {
      channel_scale[c] = double(gamma[c]) * s[c].inverse_std;
      channel_shift[c] =
          double(beta[c]) - channel_scale[c] * (s[c].mean - double(float(s[c].mean)));
    }
    const std::vector<float> scale = along_run(channel_scale, run),
                             shift = along_run(channel_shift, run);
    const float* added = residual ? residual + size_t(n) * image_size : nullptr;
    float* result = out + size_t(n) * image_size;
    for (size_t start = 0; start < image_size; start += run) {
      const size_t count = std::min(run, image_size - start);
      const float* values = image + start;
      float* z = result + start;
#pragma omp simd
      for (size_t k = 0; k < count; ++k) {
        z[k] = multiply_add(values[k] - r.centre[k], scale[k], shift[k]);
      }
      if (added) {
#pragma omp simd
        for (size_t k = 0; k < count; ++k) z[k] += added[start + k];
      }
      activate(activation, count, z);
    }
  }
}

// grad *= act'(·) over n values, given the activation's output `out` (ELU's slope as
// vector_math.h takes it, so that the loop vectorises: as a select it did not, and was the
// layer's largest cost).
void deactivate(Activation activation, size_t n, const float* out, float* grad) {
  if (activation == Activation::kRelu) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) grad[i] = out[i] > 0.0f ? grad[i] : 0.0f;
  } else if (activation == Activation::kElu) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) grad[i] *= elu_slope(out[i]);
  }
}

// Through the activation, into the residual's gradient: the first steps of a plane's or an
// image's backward, while its values are in cache.
void activation_and_residual_backward(Activation activation, size_t n, const float* out,
                                      float* grad, float* grad_residual) {
  deactivate(activation, n, out, grad);
  if (!grad_residual) return;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) grad_residual[i] += grad[i];
}

void backward_channels_last(const InstanceNormShape& shape, const float* x, const float* gamma,
                            const float* kept, Activation activation, const float* out, float* grad,
                            float* grad_residual, float* grad_gamma, float* grad_beta,
                            uint16_t* rounded_grad) {
  const size_t pixels = size_t(shape.plane_size), channels = size_t(shape.channels);
  const size_t image_size = pixels * channels, run = run_length(channels);
  // Per image and channel, then added over the images in order, as the planar backward does.
  std::vector<std::vector<double>> sum_grad(size_t(shape.batch)),
      sum_grad_normalised(size_t(shape.batch));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < shape.batch; ++n) {
    const float* image = x + size_t(n) * image_size;
    std::vector<PlaneStatistics> s(channels);
    if (kept) {
      for (size_t c = 0; c < channels; ++c) s[c] = kept_statistics(kept, size_t(n) * channels + c);
    } else {
      s = channel_statistics(image, pixels, channels);
    }
    const RunNormalisation r = run_normalisation(s, run);
    float* g = grad + size_t(n) * image_size;
    const float* activated = out + size_t(n) * image_size;
    float* grad_added = grad_residual ? grad_residual + size_t(n) * image_size : nullptr;
    std::vector<double>& sums = sum_grad[size_t(n)];
    std::vector<double>& dots = sum_grad_normalised[size_t(n)];
    channel_sums(
        image_size, channels,
        [&](size_t start, size_t count, float* sum, float* dot) {
          float* gradient = g + start;
          const float* values = image + start;
          activation_and_residual_backward(activation, count, activated + start, gradient,
                                           grad_added ? grad_added + start : nullptr);
#pragma omp simd
          for (size_t k = 0; k < count; ++k) {
            const float normalised =
                multiply_add(values[k] - r.centre[k], r.inverse_std[k], -r.offset[k]);
            sum[k] += gradient[k];
            dot[k] = multiply_add(gradient[k], normalised, dot[k]);
          }
        },
        &sums, &dots);
    // dx = gamma rstd (g - mean(g) - x̂ mean(g x̂)), as the planar backward.
    std::vector<double> channel_scale(channels), channel_mean_grad(channels),
        channel_mean_dot(channels);
    for (size_t c = 0; c < channels; ++c) {
      channel_scale[c] = double(gamma[c]) * s[c].inverse_std;
      channel_mean_grad[c] = sums[c] / double(pixels);
      channel_mean_dot[c] = dots[c] / double(pixels);
    }
    const std::vector<float> scale = along_run(channel_scale, run),
                             mean_grad = along_run(channel_mean_grad, run),
                             mean_dot = along_run(channel_mean_dot, run);
    for (size_t start = 0; start < image_size; start += run) {
      const size_t count = std::min(run, image_size - start);
      float* values = g + start;
      const float* inputs = image + start;
      const auto gradient = [&](size_t k) {
        const float normalised =
            multiply_add(inputs[k] - r.centre[k], r.inverse_std[k], -r.offset[k]);
        return scale[k] * multiply_add(-normalised, mean_dot[k], values[k] - mean_grad[k]);
      };
      if (rounded_grad) {
        uint16_t* rounded = rounded_grad + size_t(n) * image_size + start;
#pragma omp simd
        for (size_t k = 0; k < count; ++k) rounded[k] = bf16_bits(gradient(k));
      } else {
#pragma omp simd
        for (size_t k = 0; k < count; ++k) values[k] = gradient(k);
      }
    }
  }
  for (int n = 0; n < shape.batch; ++n) {
    for (size_t c = 0; c < channels; ++c) {
      grad_gamma[c] += float(sum_grad_normalised[size_t(n)][c]);
      grad_beta[c] += float(sum_grad[size_t(n)][c]);
    }
  }
}

}  // namespace

void instance_norm_forward(const InstanceNormShape& shape, const float* x, const float* gamma,
                           const float* beta, const float* residual, Activation activation,
                           float* out, float* statistics_kept) {
  if (shape.layout == MapLayout::kChannelsLast) {
    forward_channels_last(shape, x, gamma, beta, residual, activation, out, statistics_kept);
    return;
  }
  const int planes = shape.batch * shape.channels;
  const size_t n = size_t(shape.plane_size);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* values = x + size_t(p) * n;
    const PlaneStatistics s = statistics(values, n);
    if (statistics_kept) keep(statistics_kept, size_t(p), s);
    const int c = p % shape.channels;
    const double scale = gamma[c] * s.inverse_std, shift = beta[c] - scale * s.mean;
    const float* added = residual ? residual + size_t(p) * n : nullptr;
    float* result = out + size_t(p) * n;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
      const float z = float(scale * double(values[i]) + shift);
      result[i] = added ? z + added[i] : z;
    }
    // The activation in its own pass over the plane (still in cache), so the loop above has no
    // branch on it and vectorises.
    activate(activation, n, result);
  }
}

void instance_norm_backward(const InstanceNormShape& shape, const float* x, const float* gamma,
                            const float* statistics_kept, Activation activation, const float* out,
                            float* grad, float* grad_residual, float* grad_gamma, float* grad_beta,
                            uint16_t* rounded_grad) {
  if (shape.layout == MapLayout::kChannelsLast) {
    backward_channels_last(shape, x, gamma, statistics_kept, activation, out, grad, grad_residual,
                           grad_gamma, grad_beta, rounded_grad);
    return;
  }
  const int planes = shape.batch * shape.channels;
  const size_t n = size_t(shape.plane_size);
  // Per-plane sums first, so that planes of one channel (different views) never race on the
  // channel's gamma and beta gradients.
  const size_t plane_count = size_t(planes);
  std::vector<double> sum_grad(plane_count), sum_grad_normalised(plane_count);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* values = x + size_t(p) * n;
    const PlaneStatistics s =
        statistics_kept ? kept_statistics(statistics_kept, size_t(p)) : statistics(values, n);
    float* g = grad + size_t(p) * n;
    activation_and_residual_backward(activation, n, out + size_t(p) * n, g,
                                     grad_residual ? grad_residual + size_t(p) * n : nullptr);
    double sum = 0, dot = 0;
#pragma omp simd reduction(+ : sum, dot)
    for (size_t i = 0; i < n; ++i) {
      sum += double(g[i]);
      dot += double(g[i]) * ((double(values[i]) - s.mean) * s.inverse_std);
    }
    sum_grad[size_t(p)] = sum;
    sum_grad_normalised[size_t(p)] = dot;
    // dx = gamma rstd (g - mean(g) - x̂ mean(g x̂)): the normalisation's Jacobian.
    const double scale = gamma[p % shape.channels] * s.inverse_std;
    const double mean_grad = sum / double(n), mean_dot = dot / double(n);
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
      const double normalised = (double(values[i]) - s.mean) * s.inverse_std;
      g[i] = float(scale * (g[i] - mean_grad - normalised * mean_dot));
    }
    if (rounded_grad) {
      uint16_t* rounded = rounded_grad + size_t(p) * n;
#pragma omp simd
      for (size_t i = 0; i < n; ++i) rounded[i] = bf16_bits(g[i]);
    }
  }
  for (int p = 0; p < planes; ++p) {
    grad_gamma[p % shape.channels] += float(sum_grad_normalised[size_t(p)]);
    grad_beta[p % shape.channels] += float(sum_grad[size_t(p)]);
  }
}

}  // namespace mvibr::nn
