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

// Calls visit(padded element, the element it copies) for every element of the padded planes,
// row by row, left to right. Planes are independent, so the threads split them and each
// writes only its own planes, in the map or in its gradient.
template <typename Padded, typename Source, typename Visit>
void for_each_padded_element(int planes, int height, int width, int pad, Padded* padded,
                             Source* source, Visit visit) {
  check(height, width, pad);
  const int padded_height = height + 2 * pad, padded_width = width + 2 * pad;
  const std::vector<int> rows = source_indices(height, pad), columns = source_indices(width, pad);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < planes; ++p) {
    Padded* padded_plane = padded + size_t(p) * size_t(padded_height) * size_t(padded_width);
    Source* source_plane = source + size_t(p) * size_t(height) * size_t(width);
    for (int i = 0; i < padded_height; ++i) {
      Padded* padded_row = padded_plane + size_t(i) * size_t(padded_width);
      Source* source_row = source_plane + size_t(rows[size_t(i)]) * size_t(width);
      for (int j = 0; j < pad; ++j) visit(padded_row[j], source_row[columns[size_t(j)]]);
      for (int j = 0; j < width; ++j) visit(padded_row[pad + j], source_row[j]);
      for (int j = pad + width; j < padded_width; ++j) {
        visit(padded_row[j], source_row[columns[size_t(j)]]);
      }
    }
  }
}

}  // namespace

void reflect_pad_forward(int planes, int height, int width, int pad, const float* x,
                         float* padded) {
  for_each_padded_element(planes, height, width, pad, padded, x,
                          [](float& out, const float& in) { out = in; });
}

void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x) {
  for_each_padded_element(planes, height, width, pad, grad_padded, grad_x,
                          [](const float& grad_out, float& grad_in) { grad_in += grad_out; });
}

}  // namespace mvibr::nn
