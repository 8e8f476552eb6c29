// Bilinear upsampling by 2 with align_corners=True, forward and backward (see conv_layers.h): the
// decoder's upconv layers. With align_corners the output's corners sit on the input's corners,
// so output index o samples the input at o (n - 1) / (2n - 1), PyTorch's source index. One
// implementation for both layouts (planar maps are channels-last maps of one channel) and with
// the reflect padding of the convolution that reads the result: padded index i takes the taps of
// the upsampled index it reflects (reflect_pad_source), so the upsampled map is never written.
#include <cstdint>
#include <vector>

#include "mvibr/nn/conv_layers.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

// Where one output row (or column) samples its input: the two neighbours and their weights.
struct Tap {
  int low, high;
  float low_weight, high_weight;
};

// The taps of the 2n upsampled indices, reflect-padded by `pad` on both sides.
std::vector<Tap> taps(int n, int pad) {
  const int outputs = 2 * n;
  const double scale = double(n - 1) / double(outputs - 1);
  std::vector<Tap> result(size_t(outputs + 2 * pad));
  for (int i = 0; i < outputs + 2 * pad; ++i) {
    const double source = scale * reflect_pad_source(i, pad, outputs);
    const int low = int(source);
    const int high = low < n - 1 ? low + 1 : low;
    const float fraction = float(source - low);
    result[size_t(i)] = {low, high, 1.0f - fraction, fraction};
  }
  return result;
}

float stored(float value, float*) {
  return value;
}
uint16_t stored(float value, uint16_t*) {
  return bf16_bits(value);
}

template <typename Out>
void forward(int batch, int height, int width, int channels, int pad, const float* x, Out* y) {
  const std::vector<Tap> rows = taps(height, pad), columns = taps(width, pad);
  const size_t c = size_t(channels), in_row = size_t(width) * c, out_width = columns.size();
  const size_t in_size = size_t(height) * in_row, out_size = rows.size() * out_width * c;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < batch; ++n) {
    const float* in = x + size_t(n) * in_size;
    Out* out = y + size_t(n) * out_size;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tap r = rows[i];
      const float* low = in + size_t(r.low) * in_row;
      const float* high = in + size_t(r.high) * in_row;
      for (size_t j = 0; j < out_width; ++j) {
        const Tap t = columns[j];
        const float *low_left = low + size_t(t.low) * c, *low_right = low + size_t(t.high) * c;
        const float *high_left = high + size_t(t.low) * c, *high_right = high + size_t(t.high) * c;
        Out* out_pixel = out + (i * out_width + j) * c;
#pragma omp simd
        for (size_t k = 0; k < c; ++k) {
          out_pixel[k] = stored(
              r.low_weight * (t.low_weight * low_left[k] + t.high_weight * low_right[k]) +
                  r.high_weight * (t.low_weight * high_left[k] + t.high_weight * high_right[k]),
              out_pixel);
        }
      }
    }
  }
}

}  // namespace

void upsample2x_pad_forward_channels_last(int batch, int height, int width, int channels, int pad,
                                          const float* x, float* y) {
  forward(batch, height, width, channels, pad, x, y);
}

void upsample2x_pad_forward_bf16_channels_last(int batch, int height, int width, int channels,
                                               int pad, const float* x, uint16_t* y) {
  forward(batch, height, width, channels, pad, x, y);
}

void upsample2x_pad_backward_channels_last(int batch, int height, int width, int channels, int pad,
                                           const float* grad_padded, float* grad_x,
                                           bool overwrite) {
  const std::vector<Tap> rows = taps(height, pad), columns = taps(width, pad);
  const size_t c = size_t(channels), in_row = size_t(width) * c, out_width = columns.size();
  const size_t in_size = size_t(height) * in_row, out_size = rows.size() * out_width * c;
  // One image per thread: the scatter stays inside it.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < batch; ++n) {
    const float* in = grad_padded + size_t(n) * out_size;
    float* out = grad_x + size_t(n) * in_size;
    if (overwrite) {
      for (size_t k = 0; k < in_size; ++k) out[k] = 0.0f;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tap r = rows[i];
      float* low = out + size_t(r.low) * in_row;
      float* high = out + size_t(r.high) * in_row;
      for (size_t j = 0; j < out_width; ++j) {
        const Tap t = columns[j];
        float *low_left = low + size_t(t.low) * c, *low_right = low + size_t(t.high) * c;
        float *high_left = high + size_t(t.low) * c, *high_right = high + size_t(t.high) * c;
        const float* g = in + (i * out_width + j) * c;
        // In this order for every channel; the four may be the same pixel at an edge.
        for (size_t k = 0; k < c; ++k) low_left[k] += r.low_weight * t.low_weight * g[k];
        for (size_t k = 0; k < c; ++k) low_right[k] += r.low_weight * t.high_weight * g[k];
        for (size_t k = 0; k < c; ++k) high_left[k] += r.high_weight * t.low_weight * g[k];
        for (size_t k = 0; k < c; ++k) high_right[k] += r.high_weight * t.high_weight * g[k];
      }
    }
  }
}

void upsample2x_forward_channels_last(int batch, int height, int width, int channels,
                                      const float* x, float* y) {
  upsample2x_pad_forward_channels_last(batch, height, width, channels, 0, x, y);
}

void upsample2x_backward_channels_last(int batch, int height, int width, int channels,
                                       const float* grad_y, float* grad_x) {
  upsample2x_pad_backward_channels_last(batch, height, width, channels, 0, grad_y, grad_x, true);
}

void upsample2x_forward(int planes, int height, int width, const float* x, float* y) {
  upsample2x_forward_channels_last(planes, height, width, 1, x, y);
}

void upsample2x_backward(int planes, int height, int width, const float* grad_y, float* grad_x) {
  upsample2x_backward_channels_last(planes, height, width, 1, grad_y, grad_x);
}

}  // namespace mvibr::nn
