// Bilinear upsampling by 2 with align_corners=True, forward and backward (see conv_layers.h): the
// decoder's upconv layers. With align_corners the output's corners sit on the input's corners,
// so output index o samples the input at o (n - 1) / (2n - 1), PyTorch's source index.
#include <vector>

#include "mvibr/nn/conv_layers.h"

namespace mvibr::nn {
namespace {

// Where one output row (or column) samples its input: the two neighbours and their weights.
struct Tap {
  int low, high;
  float low_weight, high_weight;
};

std::vector<Tap> taps(int n) {
  const int outputs = 2 * n;
  const double scale = double(n - 1) / double(outputs - 1);
  std::vector<Tap> result(static_cast<size_t>(outputs));
  for (int o = 0; o < outputs; ++o) {
    const double source = scale * o;
    const int low = int(source);
    const int high = low < n - 1 ? low + 1 : low;
    const float fraction = float(source - low);
    result[size_t(o)] = {low, high, 1.0f - fraction, fraction};
  }
  return result;
}

}  // namespace

void upsample2x_forward(int planes, int height, int width, const float* x, float* y) {
  const std::vector<Tap> rows = taps(height), columns = taps(width);
  const size_t in_size = size_t(height) * size_t(width), out_width = size_t(2 * width);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * in_size;
    float* out = y + size_t(p) * 4 * in_size;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tap r = rows[i];
      const float* low = in + size_t(r.low) * size_t(width);
      const float* high = in + size_t(r.high) * size_t(width);
      float* out_row = out + i * out_width;
      for (size_t j = 0; j < out_width; ++j) {
        const Tap c = columns[j];
        out_row[j] = r.low_weight * (c.low_weight * low[c.low] + c.high_weight * low[c.high]) +
                     r.high_weight * (c.low_weight * high[c.low] + c.high_weight * high[c.high]);
      }
    }
  }
}

void upsample2x_backward(int planes, int height, int width, const float* grad_y, float* grad_x) {
  const std::vector<Tap> rows = taps(height), columns = taps(width);
  const size_t in_size = size_t(height) * size_t(width), out_width = size_t(2 * width);
  // One plane per thread: the scatter stays inside it.
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = grad_y + size_t(p) * 4 * in_size;
    float* out = grad_x + size_t(p) * in_size;
    for (size_t k = 0; k < in_size; ++k) out[k] = 0.0f;
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tap r = rows[i];
      float* low = out + size_t(r.low) * size_t(width);
      float* high = out + size_t(r.high) * size_t(width);
      const float* in_row = in + i * out_width;
      for (size_t j = 0; j < out_width; ++j) {
        const Tap c = columns[j];
        const float g = in_row[j];
        low[c.low] += r.low_weight * c.low_weight * g;
        low[c.high] += r.low_weight * c.high_weight * g;
        high[c.low] += r.high_weight * c.low_weight * g;
        high[c.high] += r.high_weight * c.high_weight * g;
      }
    }
  }
}

}  // namespace mvibr::nn
