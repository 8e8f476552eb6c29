// Reflect padding, forward and backward (see conv_layers.h). IBRNet pads every convolution with
// padding_mode='reflect', which oneDNN does not have, so the convolution (conv2d.cpp) builds the
// padded map here and runs unpadded on it; backward folds the border's gradient back onto the rows
// and columns it was copied from. One implementation for both layouts: planar maps are
// channels-last maps of one channel, a batch of planes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"
#include "vector_math.h"

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

// Calls visit(padded values, the values they copy, count) over every padded row of every image
// [height, width, channels], left to right: a border pixel's channels, then the row's interior
// in one run (but the interior rows' own with skip_interior). Images are independent, so the
// threads split them and each writes only its own, in the map or in its gradient; each value is
// visited in the same order for any thread count.
template <typename Padded, typename Source, typename Visit>
void for_each_padded_run(int batch, int height, int width, int channels, int pad, Padded* padded,
                         Source* source, Visit visit, bool skip_interior = false) {
  check(height, width, pad);
  const size_t padded_height = size_t(height + 2 * pad), padded_width = size_t(width + 2 * pad);
  const size_t c = size_t(channels), row = size_t(width) * c;
  const std::vector<int> rows = source_indices(height, pad), columns = source_indices(width, pad);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < batch; ++n) {
    Padded* padded_image = padded + size_t(n) * padded_height * padded_width * c;
    Source* source_image = source + size_t(n) * size_t(height) * row;
    for (size_t i = 0; i < padded_height; ++i) {
      Padded* padded_row = padded_image + i * padded_width * c;
      Source* source_row = source_image + size_t(rows[i]) * row;
      for (size_t j = 0; j < size_t(pad); ++j) {
        visit(padded_row + j * c, source_row + size_t(columns[j]) * c, c);
      }
      const bool interior_row = i >= size_t(pad) && i < size_t(pad + height);
      if (!(skip_interior && interior_row)) visit(padded_row + size_t(pad) * c, source_row, row);
      for (size_t j = size_t(pad + width); j < padded_width; ++j) {
        visit(padded_row + j * c, source_row + size_t(columns[j]) * c, c);
      }
    }
  }
}

}  // namespace

int reflect_pad_source(int i, int pad, int n) {
  return reflect(i - pad, n);
}

void reflect_pad_forward_channels_last(int batch, int height, int width, int channels, int pad,
                                       const float* x, float* padded) {
  for_each_padded_run(batch, height, width, channels, pad, padded, x,
                      [](float* out, const float* in, size_t count) {
                        for (size_t k = 0; k < count; ++k) out[k] = in[k];
                      });
}

void reflect_pad_backward_channels_last(int batch, int height, int width, int channels, int pad,
                                        const float* grad_padded, float* grad_x, bool overwrite) {
  if (overwrite) {
    // The interior rows' own values written first; the border is then added onto them.
    check(height, width, pad);
    const size_t row = size_t(width) * size_t(channels);
    const size_t padded_width = size_t(width + 2 * pad), padded_height = size_t(height + 2 * pad);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < batch; ++n) {
      for (size_t r = 0; r < size_t(height); ++r) {
        const float* from =
            grad_padded +
            ((size_t(n) * padded_height + r + size_t(pad)) * padded_width + size_t(pad)) *
                size_t(channels);
        std::copy_n(from, row, grad_x + (size_t(n) * size_t(height) + r) * row);
      }
    }
  }
  for_each_padded_run(
      batch, height, width, channels, pad, grad_padded, grad_x,
      [](const float* grad_out, float* grad_in, size_t count) {
        for (size_t k = 0; k < count; ++k) grad_in[k] += grad_out[k];
      },
      overwrite);
}

void reflect_pad_forward_bf16_channels_last(int batch, int height, int width, int channels, int pad,
                                            const float* x, uint16_t* padded) {
  for_each_padded_run(batch, height, width, channels, pad, padded, x,
                      [](uint16_t* out, const float* in, size_t count) {
#pragma omp simd
                        for (size_t k = 0; k < count; ++k) out[k] = bf16_bits(in[k]);
                      });
}

void round_to_bf16(size_t count, const float* x, uint16_t* rounded) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < count; ++i) rounded[i] = bf16_bits(x[i]);
}

void reflect_pad_forward(int planes, int height, int width, int pad, const float* x,
                         float* padded) {
  reflect_pad_forward_channels_last(planes, height, width, 1, pad, x, padded);
}

void reflect_pad_backward(int planes, int height, int width, int pad, const float* grad_padded,
                          float* grad_x) {
  reflect_pad_backward_channels_last(planes, height, width, 1, pad, grad_padded, grad_x);
}

}  // namespace mvibr::nn
