// The NCHW order a float64 reference holds maps in, against a MapBatch's own layout.
// - for_each_value(maps, f) calls f(i, j) for every value: i its index in NCHW order, j its
//   offset in `maps` (MapBatch::offset), in NCHW order.
#pragma once

#include <cstddef>

#include "mvibr/nn/conv_layers.h"

namespace mvibr::test {

template <typename Visit>
void for_each_value(const nn::MapBatch& maps, Visit visit) {
  size_t i = 0;
  for (int n = 0; n < maps.batch; ++n) {
    for (int c = 0; c < maps.channels; ++c) {
      for (int y = 0; y < maps.height; ++y) {
        for (int x = 0; x < maps.width; ++x) visit(i++, maps.offset(n, c, y, x));
      }
    }
  }
}

}  // namespace mvibr::test
