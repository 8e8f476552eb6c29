// Zip reading for .npz: the end-of-central-directory record (zip64 when numpy's force_zip64 or
// a >4 GiB archive needs it) gives the central directory; each entry there gives the member's
// sizes and the offset of its local header, which is skipped to reach the data. Members are
// stored or raw deflate (zlib inflate with windowBits -15) and checked against their CRC-32.
#include "mvibr/data/npz.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"

namespace mvibr::data {
namespace {

constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kCentralEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
// Deflate cannot do better than about 1032:1, so a claimed size beyond that is a lie.
constexpr uint64_t kMaxDeflateRatio = 1032;

// Little-endian reads that throw instead of running off the end of the file.
struct Reader {
  const std::vector<uint8_t>& bytes;
  const std::string& path;

  void need(uint64_t offset, uint64_t length, const char* what) const {
    if (offset > bytes.size() || length > bytes.size() - offset) {
      throw InvalidArgument(path + ": truncated zip (" + what + " runs past the end)");
    }
  }
  uint64_t le(uint64_t offset, int width, const char* what) const {
    need(offset, uint64_t(width), what);
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = v << 8 | bytes[offset + uint64_t(i)];
    return v;
  }
};

struct Member {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, uncompressed = 0, local_offset = 0;
};

uint64_t find_end_record(const Reader& r) {
  const uint64_t size = r.bytes.size();
  if (size < 22) throw InvalidArgument(r.path + ": not a zip/npz file (too short)");
  // The record is 22 bytes plus a comment of at most 65535, at the very end.
  const uint64_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (uint64_t at = size - 22;; --at) {
    if (r.le(at, 4, "end record") == kEndOfCentralDirectory) return at;
    if (at == lowest) break;
  }
  throw InvalidArgument(r.path + ": not a zip/npz file (no end of central directory; truncated?)");
}

// Replaces 0xFFFFFFFF sizes and offsets by their values in the zip64 extra field (tag 1).
void apply_zip64_extra(const Reader& r, uint64_t extra, uint64_t extra_length, Member* m) {
  const uint64_t end = extra + extra_length;
  while (extra + 4 <= end) {
    const uint64_t tag = r.le(extra, 2, "extra field"), length = r.le(extra + 2, 2, "extra field");
    uint64_t field = extra + 4;
    if (tag == 1) {
      for (uint64_t* value : {&m->uncompressed, &m->compressed, &m->local_offset}) {
        if (*value != 0xFFFFFFFFu) continue;
        if (field + 8 > extra + 4 + length) throw InvalidArgument(r.path + ": bad zip64 field");
        *value = r.le(field, 8, "zip64 field");
        field += 8;
      }
    }
    extra += 4 + length;
  }
}

std::vector<Member> read_central_directory(const Reader& r) {
  const uint64_t end = find_end_record(r);
  uint64_t entries = r.le(end + 10, 2, "end record");
  uint64_t directory = r.le(end + 16, 4, "end record");
  if (entries == 0xFFFF || directory == 0xFFFFFFFFu) {
    if (end < 20 || r.le(end - 20, 4, "zip64 locator") != kZip64Locator) {
      throw InvalidArgument(r.path + ": zip64 archive without its locator");
    }
    const uint64_t end64 = r.le(end - 20 + 8, 8, "zip64 locator");
    if (r.le(end64, 4, "zip64 end record") != kZip64EndOfCentralDirectory) {
      throw InvalidArgument(r.path + ": bad zip64 end of central directory");
    }
    entries = r.le(end64 + 32, 8, "zip64 end record");
    directory = r.le(end64 + 48, 8, "zip64 end record");
  }
  // A central entry takes at least 46 bytes, which bounds `entries` before reserving.
  if (entries > r.bytes.size() / 46) throw InvalidArgument(r.path + ": corrupt zip entry count");
  r.need(directory, entries * 46, "central directory");
  std::vector<Member> members;
  members.reserve(entries);
  uint64_t at = directory;
  for (uint64_t i = 0; i < entries; ++i) {
    if (r.le(at, 4, "central directory") != kCentralEntry) {
      throw InvalidArgument(r.path + ": corrupt zip central directory");
    }
    Member m;
    m.method = uint16_t(r.le(at + 10, 2, "central directory"));
    m.crc = uint32_t(r.le(at + 16, 4, "central directory"));
    m.compressed = r.le(at + 20, 4, "central directory");
    m.uncompressed = r.le(at + 24, 4, "central directory");
    const uint64_t name_length = r.le(at + 28, 2, "central directory");
    const uint64_t extra_length = r.le(at + 30, 2, "central directory");
    const uint64_t comment_length = r.le(at + 32, 2, "central directory");
    m.local_offset = r.le(at + 42, 4, "central directory");
    r.need(at + 46, name_length + extra_length + comment_length, "central directory");
    m.name.assign(r.bytes.begin() + long(at + 46), r.bytes.begin() + long(at + 46 + name_length));
    apply_zip64_extra(r, at + 46 + name_length, extra_length, &m);
    members.push_back(m);
    at += 46 + name_length + extra_length + comment_length;
  }
  return members;
}

std::vector<uint8_t> inflate_member(const Reader& r, const Member& m, uint64_t data,
                                    const std::string& source) {
  if (m.uncompressed > m.compressed * kMaxDeflateRatio + 1024) {
    throw InvalidArgument(source + ": claims an impossible compression ratio");
  }
  std::vector<uint8_t> out(m.uncompressed);
  z_stream stream{};
  if (inflateInit2(&stream, -15) != Z_OK) throw RuntimeFailure("zlib inflateInit2 failed");
  uint64_t in_done = 0, out_done = 0;
  int status = Z_OK;
  // zlib counts in 32-bit uInt, so members over 4 GiB are fed in pieces.
  while (status == Z_OK) {
    if (stream.avail_in == 0) {
      stream.next_in = const_cast<Bytef*>(r.bytes.data() + data + in_done);
      stream.avail_in = uInt(std::min<uint64_t>(m.compressed - in_done, UINT_MAX));
      in_done += stream.avail_in;
    }
    if (stream.avail_out == 0) {
      stream.next_out = out.data() + out_done;
      stream.avail_out = uInt(std::min<uint64_t>(m.uncompressed - out_done, UINT_MAX));
      out_done += stream.avail_out;
    }
    // Z_BUF_ERROR (no progress: input or output used up before the stream's end) ends it too.
    status = inflate(&stream, Z_NO_FLUSH);
  }
  const bool complete = status == Z_STREAM_END && stream.total_out == m.uncompressed;
  inflateEnd(&stream);
  if (!complete) throw InvalidArgument(source + ": corrupt or truncated deflate data");
  return out;
}

}  // namespace

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot open");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (in.bad()) throw InvalidArgument(path + ": cannot read");
  const Reader r{bytes, path};
  std::map<std::string, NpyArray> arrays;
  for (const Member& m : read_central_directory(r)) {
    const std::string source = path + ":" + m.name;
    if (r.le(m.local_offset, 4, "local header") != kLocalHeader) {
      throw InvalidArgument(source + ": bad local header");
    }
    const uint64_t data = m.local_offset + 30 + r.le(m.local_offset + 26, 2, "local header") +
                          r.le(m.local_offset + 28, 2, "local header");
    r.need(data, m.compressed, "member data");
    std::vector<uint8_t> npy;
    if (m.method == 0) {
      if (m.compressed != m.uncompressed) throw InvalidArgument(source + ": bad stored sizes");
      npy.assign(bytes.begin() + long(data), bytes.begin() + long(data + m.compressed));
    } else if (m.method == 8) {
      npy = inflate_member(r, m, data, source);
    } else {
      throw InvalidArgument(source + ": zip compression method " + std::to_string(m.method) +
                            " is not supported (stored or deflate)");
    }
    // crc32 takes 32-bit lengths: checksum in pieces.
    uLong crc = crc32(0, nullptr, 0);
    for (size_t done = 0; done < npy.size();) {
      const uInt piece = uInt(std::min<size_t>(npy.size() - done, UINT_MAX));
      crc = crc32(crc, npy.data() + done, piece);
      done += piece;
    }
    if (crc != m.crc) throw InvalidArgument(source + ": CRC mismatch (corrupt archive)");
    std::string key = m.name;
    if (key.size() > 4 && key.compare(key.size() - 4, 4, ".npy") == 0) key.resize(key.size() - 4);
    arrays[key] = parse_npy(npy.data(), npy.size(), source);
  }
  return arrays;
}

namespace {

void put_le(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(char((value >> (8 * i)) & 0xff));
}

}  // namespace

void write_npz(const std::string& path, const std::map<std::string, NpyArray>& arrays) {
  constexpr uint32_t kCentralHeader = 0x02014b50, kEndOfDirectory = 0x06054b50;
  constexpr uint16_t kVersion = 20, kDate1980 = 0x21;  // 1 January 1980, as numpy's members
  std::string zip, directory;
  for (const auto& [key, array] : arrays) {
    const std::string name = key + ".npy";
    const std::string npy = encode_npy(array);
    if (npy.size() >= UINT32_MAX || zip.size() >= UINT32_MAX) {
      throw InvalidArgument(path + ": member " + name + " needs zip64, which is not written");
    }
    const uInt crc = uInt(crc32(0, reinterpret_cast<const Bytef*>(npy.data()), uInt(npy.size())));
    const uint64_t offset = zip.size();
    // The fields the local and the central headers share: version, flags, method (0: stored),
    // time, date, CRC, sizes, name length.
    std::string common;
    put_le(&common, kVersion, 2);
    put_le(&common, 0, 2);
    put_le(&common, 0, 2);
    put_le(&common, 0, 2);
    put_le(&common, kDate1980, 2);
    put_le(&common, crc, 4);
    put_le(&common, npy.size(), 4);
    put_le(&common, npy.size(), 4);
    put_le(&common, name.size(), 2);
    put_le(&zip, kLocalHeader, 4);
    zip += common;
    put_le(&zip, 0, 2);  // no extra field
    zip += name + npy;
    put_le(&directory, kCentralHeader, 4);
    put_le(&directory, kVersion, 2);  // made by
    directory += common;
    directory.append(2 + 2 + 2 + 2 + 4, '\0');  // extra, comment, disk, attributes
    put_le(&directory, offset, 4);
    directory += name;
  }
  const uint64_t directory_offset = zip.size();
  zip += directory;
  put_le(&zip, kEndOfDirectory, 4);
  put_le(&zip, 0, 4);  // this disk, the directory's disk
  put_le(&zip, arrays.size(), 2);
  put_le(&zip, arrays.size(), 2);
  put_le(&zip, directory.size(), 4);
  put_le(&zip, directory_offset, 4);
  put_le(&zip, 0, 2);  // no comment
  write_file_atomically(path, zip);
}

}  // namespace mvibr::data
