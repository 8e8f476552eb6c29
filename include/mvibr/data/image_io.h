// Reading and writing the 8-bit images that scenes are made of. PNG and JPEG only (what the
// supported data sets ship), decoded by libpng and libjpeg-turbo, which report damage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mvibr::data {

struct Image {
  int width = 0, height = 0;
  int channels = 0;             // 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA: as stored in the file
  std::vector<uint8_t> pixels;  // row-major [height][width][channels]
};

// PNG or JPEG, told by their first bytes whatever the file's name. Throws InvalidArgument naming
// the file and the decoder's reason when it is missing, unreadable, truncated, damaged (libjpeg's
// corrupt-data warnings and libpng's CRC errors included) or neither format, and refuses images
// of more than 2^28 pixels or 65536 a side before decoding.
Image load_image(const std::string& path);

// Written whole or not at all (core/durable_file.h). Throws RuntimeFailure naming the file when
// it cannot be written.
void write_png(const std::string& path, int width, int height, int channels, const uint8_t* pixels);

// RGB pixels of any image: grey is replicated, alpha composited over a grey level
// (255: white, 0: black) as c * a + background * (1 - a).
std::vector<uint8_t> composite_to_rgb(const Image& image, uint8_t background);

}  // namespace mvibr::data
