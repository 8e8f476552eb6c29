// Images through stb_image / stb_image_write, compiled here once. Files are read into memory
// first so that "cannot open" and "not a valid image" are told apart, and the header is
// checked (stbi_info) before stb allocates the decoded pixels.
#include "mvibr/data/image_io.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS (1 << 16)
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace mvibr::data {
namespace {

constexpr long long kMaxPixels = 1ll << 28;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot open the image file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) throw InvalidArgument(path + ": cannot read the image file");
  if (bytes.empty()) throw InvalidArgument(path + ": the image file is empty");
  if (bytes.size() > size_t(1) << 31) throw InvalidArgument(path + ": image file over 2 GiB");
  return bytes;
}

// stb_image decodes a JPEG that stops early as if the rest were grey; the end-of-image marker
// (FF D9, which cannot occur inside entropy-coded data) near the end tells a complete file.
bool is_truncated_jpeg(const std::vector<uint8_t>& bytes) {
  const bool is_jpeg = bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8;
  if (!is_jpeg) return false;
  const size_t tail_start = bytes.size() > 1024 ? bytes.size() - 1024 : 2;
  for (size_t i = bytes.size() - 1; i > tail_start; --i) {
    if (bytes[i - 1] == 0xFF && bytes[i] == 0xD9) return false;
  }
  return true;
}

void check_header(const std::string& path, const std::vector<uint8_t>& bytes, int* width,
                  int* height, int* channels) {
  if (!stbi_info_from_memory(bytes.data(), int(bytes.size()), width, height, channels)) {
    throw InvalidArgument(path + ": not a readable PNG or JPEG (" + stbi_failure_reason() + ")");
  }
  if (*width < 1 || *height < 1 || (long long)(*width) * *height > kMaxPixels) {
    throw InvalidArgument(path + ": image header claims " + std::to_string(*width) + "x" +
                          std::to_string(*height) + " pixels");
  }
}

}  // namespace

Image load_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  Image image;
  check_header(path, bytes, &image.width, &image.height, &image.channels);
  if (is_truncated_jpeg(bytes)) throw InvalidArgument(path + ": truncated JPEG (no end marker)");
  int width = 0, height = 0, channels = 0;
  uint8_t* decoded = stbi_load_from_memory(bytes.data(), int(bytes.size()), &width, &height,
                                           &channels, image.channels);
  if (decoded == nullptr) {
    throw InvalidArgument(path + ": cannot decode the image (" + stbi_failure_reason() + ")");
  }
  image.pixels.assign(decoded, decoded + size_t(width) * height * image.channels);
  stbi_image_free(decoded);
  return image;
}

void write_png(const std::string& path, int width, int height, int channels,
               const uint8_t* pixels) {
  std::string png;
  const auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
  };
  if (!stbi_write_png_to_func(append, &png, width, height, channels, pixels, width * channels)) {
    throw RuntimeFailure(path + ": cannot encode the PNG");
  }
  write_file_atomically(path, png);
}

std::vector<uint8_t> composite_to_rgb(const Image& image, uint8_t background) {
  const size_t n = size_t(image.width) * image.height;
  const int c = image.channels;
  const bool has_alpha = c == 2 || c == 4;
  std::vector<uint8_t> rgb(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &image.pixels[i * c];
    // Integer rounding of (value * a + background * (255 - a)) / 255.
    const int a = has_alpha ? p[c - 1] : 255;
    for (int k = 0; k < 3; ++k) {
      const int value = c >= 3 ? p[k] : p[0];
      rgb[i * 3 + k] = uint8_t((value * a + background * (255 - a) + 127) / 255);
    }
  }
  return rgb;
}

}  // namespace mvibr::data
