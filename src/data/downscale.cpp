// Area-averaging downscale and the matching intrinsics (see downscale.h).
#include "mvibr/data/downscale.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::data {
namespace {

// For each output index, the input indices it covers and the share of each (summing to 1).
struct Taps {
  std::vector<int> first;       // first input index of output i
  std::vector<int> count;       // how many inputs it covers
  std::vector<double> weights;  // count[i] weights from offset[i]
  std::vector<size_t> offset;
};

Taps area_taps(int size, int new_size) {
  Taps taps;
  const double ratio = double(size) / new_size;
  for (int i = 0; i < new_size; ++i) {
    const double begin = i * ratio, end = (i + 1) * ratio;
    const int first = int(std::floor(begin));
    const int last = std::min(size - 1, int(std::ceil(end)) - 1);
    taps.first.push_back(first);
    taps.count.push_back(last - first + 1);
    taps.offset.push_back(taps.weights.size());
    for (int k = first; k <= last; ++k) {
      const double covered = std::min(end, double(k + 1)) - std::max(begin, double(k));
      taps.weights.push_back(covered / ratio);
    }
  }
  return taps;
}

}  // namespace

std::vector<uint8_t> downscale_area(const std::vector<uint8_t>& pixels, int width, int height,
                                    int channels, int new_width, int new_height) {
  if (new_width < 1 || new_height < 1 || new_width > width || new_height > height ||
      pixels.size() != size_t(width) * size_t(height) * size_t(channels)) {
    throw InvalidArgument("downscale_area: cannot make " + std::to_string(width) + "x" +
                          std::to_string(height) + " into " + std::to_string(new_width) + "x" +
                          std::to_string(new_height));
  }
  const Taps across = area_taps(width, new_width), down = area_taps(height, new_height);
  // Rows first (each input row to new_width columns), then columns, in double.
  std::vector<double> rows(size_t(height) * size_t(new_width) * size_t(channels));
#pragma omp parallel for
  for (int y = 0; y < height; ++y) {
    const uint8_t* in = &pixels[size_t(y) * size_t(width) * size_t(channels)];
    double* out = &rows[size_t(y) * size_t(new_width) * size_t(channels)];
    for (int x = 0; x < new_width; ++x) {
      for (int c = 0; c < channels; ++c) {
        double sum = 0;
        for (int k = 0; k < across.count[size_t(x)]; ++k) {
          sum += across.weights[across.offset[size_t(x)] + size_t(k)] *
                 in[size_t(across.first[size_t(x)] + k) * size_t(channels) + size_t(c)];
        }
        out[size_t(x) * size_t(channels) + size_t(c)] = sum;
      }
    }
  }
  std::vector<uint8_t> result(size_t(new_height) * size_t(new_width) * size_t(channels));
  const size_t row_values = size_t(new_width) * size_t(channels);
#pragma omp parallel for
  for (int y = 0; y < new_height; ++y) {
    for (size_t i = 0; i < row_values; ++i) {
      double sum = 0;
      for (int k = 0; k < down.count[size_t(y)]; ++k) {
        sum += down.weights[down.offset[size_t(y)] + size_t(k)] *
               rows[size_t(down.first[size_t(y)] + k) * row_values + i];
      }
      result[size_t(y) * row_values + i] = uint8_t(std::clamp(std::lround(sum), 0L, 255L));
    }
  }
  return result;
}

void scale_intrinsics(PinholeCamera<double>* camera, int new_width, int new_height) {
  const double sx = double(new_width) / camera->width, sy = double(new_height) / camera->height;
  camera->fx *= sx;
  camera->fy *= sy;
  camera->cx = (camera->cx + 0.5) * sx - 0.5;
  camera->cy = (camera->cy + 0.5) * sy - 0.5;
  camera->width = new_width;
  camera->height = new_height;
}

}  // namespace mvibr::data
