// Reflect padding, forward and backward (see conv_layers.h). IBRNet pads every convolution with
// padding_mode='reflect', which oneDNN does not have, so the padded map is built here and the
// convolution runs unpadded on it; backward folds the border's gradient back onto the rows and
// columns it was copied from.
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"

namespace mvibr::nn {
namespace {

// The source index of padded index i - pad along an axis of length n: PyTorch's reflection,
// -1 -> 1 and n -> n - 2.
int reflect(int i, int n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

void check(int height, int width, int pad) {
  if (pad < 0 || pad >= height || pad >= width) {
    throw InvalidArgument("reflect padding by " + std::to_string(pad) +
                          " needs a map larger than " + std::to_string(height) + "x" +
                          std::to_string(width));
  }
}

std::vector<int> source_indices(int n, int pad) {
  std::vector<int> source(size_t(n + 2 * pad));
  for (int i = 0; i < n + 2 * pad; ++i) source[size_t(i)] = reflect(i - pad, n);
  return source;
}

}  // namespace

void reflect_pad_forward(int planes, int height, int width, int pad, const float* x,
                         float* padded) {
  check(height, width, pad);
  const int padded_height = height + 2 * pad, padded_width = width + 2 * pad;
  const std::vector<int> rows = source_indices(height, pad), columns = source_indices(width, pad);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = x + size_t(p) * size_t(height) * size_t(width);
    float* out = padded + size_t(p) * size_t(padded_height) * size_t(padded_width);
    for (int i = 0; i < padded_height; ++i) {
      const float* in_row = in + size_t(rows[size_t(i)]) * size_t(width);
      float* out_row = out + size_t(i) * size_t(padded_width);
      for (int j = 0; j < pad; ++j) out_row[j] = in_row[columns[size_t(j)]];
      for (int j = 0; j < width; ++j) out_row[pad + j] = in_row[j];
      for (int j = pad + width; j < padded_width; ++j) out_row[j] = in_row[columns[size_t(j)]];
    }
  }
}

void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x) {
  check(height, width, pad);
  const int padded_height = height + 2 * pad, padded_width = width + 2 * pad;
  const std::vector<int> rows = source_indices(height, pad), columns = source_indices(width, pad);
  // Planes are independent, so each thread scatters into its own planes without races.
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    const float* in = grad_padded + size_t(p) * size_t(padded_height) * size_t(padded_width);
    float* out = grad_x + size_t(p) * size_t(height) * size_t(width);
    for (int i = 0; i < padded_height; ++i) {
      const float* in_row = in + size_t(i) * size_t(padded_width);
      float* out_row = out + size_t(rows[size_t(i)]) * size_t(width);
      for (int j = 0; j < pad; ++j) out_row[columns[size_t(j)]] += in_row[j];
      for (int j = 0; j < width; ++j) out_row[j] += in_row[pad + j];
      for (int j = pad + width; j < padded_width; ++j) out_row[columns[size_t(j)]] += in_row[j];
    }
  }
}

}  // namespace mvibr::nn
