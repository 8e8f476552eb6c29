// TensorBoard event files (see tensorboard.h): protobuf wire format by hand (varints, fixed64 /
// fixed32 and length-delimited fields), TFRecord framing, PNG images through stb_image_write.
#include "mvibr/train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

// Declarations only: the implementation is compiled once, in src/data/image_io.cpp.
#include <stb_image_write.h>

#include "mvibr/core/error.h"

namespace mvibr::train {

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}

// Protobuf wire types of the fields written here.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(char(uint8_t(value) | 0x80));
    value >>= 7;
  }
  out->push_back(char(value));
}

void put_key(std::string* out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t(field) << 3) | type);
}

template <typename T>
void put_little_endian(std::string* out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and every GPU host mvibr targets: little-endian
  out->append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string* out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out->append(bytes);
}

void put_int(std::string* out, uint32_t field, uint64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, value);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void append_png_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
}

std::string encode_png(const RgbImage& image) {
  std::vector<uint8_t> pixels(image.pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) {
    // NaN (a diverged model) shows as black instead of being undefined in the cast.
    const float v = std::isfinite(image.pixels[i]) ? image.pixels[i] : 0.0f;
    pixels[i] = uint8_t(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
  }
  std::string png;
  if (!stbi_write_png_to_func(append_png_bytes, &png, image.width, image.height, 3, pixels.data(),
                              image.width * 3)) {
    throw RuntimeFailure("cannot encode a " + std::to_string(image.width) + "x" +
                         std::to_string(image.height) + " PNG for TensorBoard");
  }
  return png;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) throw RuntimeFailure(directory + ": cannot create (" + error.message() + ")");
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(uint64_t(unix_seconds())) + "." + host_name() +
            "." + std::to_string(::getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw RuntimeFailure(path_ + ": cannot create the event file");
  std::string version;
  put_bytes(&version, 3, "brain.Event:2");
  write_event(0, version);
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::scalars(uint64_t step,
                          const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string entry;
    put_bytes(&entry, 1, tag);
    put_key(&entry, 2, kFixed32);
    put_little_endian(&entry, float(value));
    put_bytes(&summary, 1, entry);
  }
  std::string payload;
  put_bytes(&payload, 5, summary);
  write_event(step, payload);
}

void EventWriter::image(const std::string& tag, uint64_t step, const RgbImage& image) {
  std::string encoded;
  put_int(&encoded, 1, uint64_t(image.height));
  put_int(&encoded, 2, uint64_t(image.width));
  put_int(&encoded, 3, 3);  // colorspace: RGB
  put_bytes(&encoded, 4, encode_png(image));
  std::string entry;
  put_bytes(&entry, 1, tag);
  put_bytes(&entry, 4, encoded);
  std::string summary;
  put_bytes(&summary, 1, entry);
  std::string payload;
  put_bytes(&payload, 5, summary);
  write_event(step, payload);
}

// `payload`: the Event's fields after wall_time and step, already encoded.
void EventWriter::write_event(uint64_t step, const std::string& payload) {
  std::string event;
  put_key(&event, 1, kFixed64);
  put_little_endian(&event, unix_seconds());
  put_int(&event, 2, step);
  event += payload;

  std::string record;
  put_little_endian(&record, uint64_t(event.size()));
  put_little_endian(&record, masked_crc32c(record.data(), 8));
  record += event;
  put_little_endian(&record, masked_crc32c(event.data(), event.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    throw RuntimeFailure(path_ + ": cannot write the event file");
  }
}

}  // namespace mvibr::train
