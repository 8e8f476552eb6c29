// TensorBoard event files written without TensorFlow or protobuf: the TFRecord framing and the
// few Event / Summary messages TensorBoard reads (scalars and PNG images), encoded by hand.
//
// A file is a sequence of records: uint64 length, masked CRC32C of those 8 bytes, the data,
// masked CRC32C of the data (all little-endian). Each record is one serialized tensorflow.Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; Image image = 4; }
//   Image   { int32 height = 1; int32 width = 2; int32 colorspace = 3;
//             bytes encoded_image_string = 4; }
// The first event of a file carries file_version "brain.Event:2", which TensorBoard expects.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/train/evaluate.h"

namespace mvibr::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), and TFRecord's masked form of it
// ((crc >> 15 | crc << 17) + 0xa282ead8), which keeps a CRC of data holding CRCs from being
// a CRC of itself.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// One event file, appended to and flushed after every event, so that a crash loses nothing
// already logged. Throws RuntimeFailure naming the file when it cannot be created or written.
class EventWriter {
 public:
  // Creates `directory` and events.out.tfevents.<unix seconds>.<host>.<pid> in it (TensorBoard
  // reads every file whose name holds "tfevents"; the pid keeps two runs that start in the same
  // second apart), and writes the file_version event.
  explicit EventWriter(const std::string& directory);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event with a scalar (Summary.Value.simple_value, a float) per (tag, value).
  void scalars(uint64_t step, const std::vector<std::pair<std::string, double>>& values);
  // The image as an RGB PNG (values in [0, 1], clamped and rounded to 8 bits).
  void image(const std::string& tag, uint64_t step, const RgbImage& image);

  const std::string& path() const { return path_; }

 private:
  void write_event(uint64_t step, const std::string& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace mvibr::train
