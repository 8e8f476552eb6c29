// Images: decoded by libjpeg-turbo and libpng, written by stb_image_write. The decoders are the
// reference ones for their formats and report damage: libjpeg's warnings ("Corrupt JPEG data",
// "Premature end of JPEG file") and libpng's CRC errors are errors here, naming the file, where
// a lenient decoder would hand back a shifted or grey-filled image. Files are read into memory
// first, so that "cannot open" and "not a valid image" are told apart, and the header is checked
// before any pixel buffer is allocated from it.
#include "mvibr/data/image_io.h"

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace mvibr::data {
namespace {

constexpr long long kMaxPixels = 1ll << 28;
constexpr uint32_t kMaxSide = 1u << 16;

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

void check_size(const std::string& path, long long width, long long height) {
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide ||
      width * height > kMaxPixels) {
    throw InvalidArgument(path + ": image header claims " + std::to_string(width) + "x" +
                          std::to_string(height) + " pixels");
  }
}

// libjpeg reports through these: errors and warnings alike end the decode (longjmp back to
// decode_jpeg, whose frame holds no object a jump could skip), trace messages are dropped.
struct JpegFailure {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr info) {
  auto* failure = reinterpret_cast<JpegFailure*>(info->err);
  info->err->format_message(info, failure->message);
  std::longjmp(failure->jump, 1);
}

void jpeg_message(j_common_ptr info, int level) {
  if (level < 0) jpeg_fail(info);  // a warning: corrupt data
}

// Decodes into *image (its pixels on the heap, sized before the scanlines are read).
void decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes, Image* image) {
  jpeg_decompress_struct info{};
  JpegFailure failure{};
  info.err = jpeg_std_error(&failure.manager);
  failure.manager.error_exit = jpeg_fail;
  failure.manager.emit_message = jpeg_message;
  if (setjmp(failure.jump)) {
    jpeg_destroy_decompress(&info);
    throw InvalidArgument(path + ": corrupt JPEG (" + failure.message + ")");
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  const bool grey = info.jpeg_color_space == JCS_GRAYSCALE;
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  if (cmyk || (long long)info.image_width * info.image_height > kMaxPixels ||
      info.image_width > kMaxSide || info.image_height > kMaxSide) {
    jpeg_destroy_decompress(&info);
    if (cmyk) throw InvalidArgument(path + ": a CMYK JPEG (convert it to RGB)");
    check_size(path, info.image_width, info.image_height);
  }
  info.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  image->width = int(info.output_width);
  image->height = int(info.output_height);
  image->channels = int(info.output_components);
  image->pixels.resize(size_t(image->width) * image->height * image->channels);
  const size_t stride = size_t(image->width) * image->channels;
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = image->pixels.data() + info.output_scanline * stride;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
}

struct PngInput {
  const std::vector<uint8_t>* bytes;
  size_t at;
  char message[256];
};

void png_fail(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->message, sizeof(input->message), "%s", message);
  png_longjmp(png, 1);
}

// Colour-management complaints (an sRGB profile libpng knows to be off, a gamma it ignores) are
// about metadata, not pixels; every other warning is damage.
void png_warn(png_structp png, png_const_charp message) {
  for (const char* benign : {"iCCP", "sRGB", "cHRM", "gAMA", "known incorrect sRGB profile"}) {
    if (std::strncmp(message, benign, std::strlen(benign)) == 0) return;
  }
  png_fail(png, message);
}

void png_read_memory(png_structp png, png_bytep out, png_size_t count) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (count > input->bytes->size() - input->at) png_error(png, "the file ends inside a chunk");
  std::memcpy(out, input->bytes->data() + input->at, count);
  input->at += count;
}

void decode_png(const std::string& path, const std::vector<uint8_t>& bytes, Image* image) {
  PngInput input{&bytes, 0, {}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) throw RuntimeFailure(path + ": libpng cannot start");
  std::unique_ptr<png_bytep[]> rows;  // set before the jump point, filled after it
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw InvalidArgument(path + ": corrupt PNG (" + input.message + ")");
  }
  png_set_read_fn(png, &input, png_read_memory);
  png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_set_user_limits(png, kMaxSide, kMaxSide);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info),
                    height = png_get_image_height(png, info);
  if ((long long)width * height > kMaxPixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    check_size(path, width, height);
  }
  // 8 bits per channel as stored: 16-bit samples keep their high byte, palettes and low bit
  // depths expand, tRNS becomes alpha; no gamma or colour conversion.
  png_set_strip_16(png);
  png_set_packing(png);
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  png_set_tRNS_to_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  image->width = int(width);
  image->height = int(height);
  image->channels = int(png_get_channels(png, info));
  const size_t stride = size_t(width) * image->channels;
  if (png_get_rowbytes(png, info) != stride) png_error(png, "unexpected row size");
  image->pixels.resize(stride * height);
  rows.reset(new png_bytep[height]);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = image->pixels.data() + y * stride;
  png_read_image(png, rows.get());
  png_read_end(png, nullptr);  // the chunks after the pixels, and their CRCs
  png_destroy_read_struct(&png, &info, nullptr);
}

}  // namespace

Image load_image(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto image = std::make_unique<Image>();
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) {
    decode_png(path, bytes, image.get());
  } else if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    decode_jpeg(path, bytes, image.get());
  } else {
    throw InvalidArgument(path + ": not a PNG or JPEG file");
  }
  return std::move(*image);
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
