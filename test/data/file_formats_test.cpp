// The file formats under the importers: PNG and JPEG (round trips, compositing, damaged data
// named), .npy (each supported type and shape, bad headers) and .npz (deflated and stored).
#include "importer_fixture.h"

namespace mvibr::data {
namespace {

using namespace testing;

// ---------------------------------------------------------------------------------------------
// Images, .npy, .npz

TEST(ImageIo, PngRoundTripAndCompositing) {
  TempDir dir;
  const uint8_t rgba[] = {10, 20, 30, 255, 200, 100, 50, 0, 100, 100, 100, 128, 1, 2, 3, 4};
  write_png(dir / "a.png", 2, 2, 4, rgba);
  const Image image = load_image(dir / "a.png");
  ASSERT_EQ(image.width, 2);
  ASSERT_EQ(image.height, 2);
  ASSERT_EQ(image.channels, 4);
  EXPECT_TRUE(std::equal(image.pixels.begin(), image.pixels.end(), rgba));
  const std::vector<uint8_t> white = composite_to_rgb(image, 255);
  const std::vector<uint8_t> black = composite_to_rgb(image, 0);
  EXPECT_EQ(white[0], 10);   // opaque: unchanged
  EXPECT_EQ(white[3], 255);  // transparent: background
  EXPECT_EQ(black[3], 0);
  EXPECT_EQ(white[6], 177);  // 100 * 128/255 + 255 * 127/255, rounded
  EXPECT_EQ(black[6], 50);
}

TEST(ImageIo, MissingAndTruncatedFilesAreNamed) {
  TempDir dir;
  expect_invalid_naming([&] { load_image(dir / "missing.png"); }, dir / "missing.png");
  write_gradient_png(dir / "full.png", 64, 48, 3);
  const std::string bytes = read_bytes(dir / "full.png");
  write_text(dir / "cut.png", bytes.substr(0, bytes.size() / 2));
  expect_invalid_naming([&] { load_image(dir / "cut.png"); }, dir / "cut.png");
  write_text(dir / "junk.png", "not an image at all");
  expect_invalid_naming([&] { load_image(dir / "junk.png"); }, dir / "junk.png");
}

// A JPEG of `rgb` through libjpeg's encoder (the decoder under test is libjpeg's too, but a
// damaged file is damaged for any decoder).
void write_jpeg(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  jpeg_compress_struct info{};
  jpeg_error_mgr errors{};
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = JDIMENSION(width);
  info.image_height = JDIMENSION(height);
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&rgb[size_t(info.next_scanline) * width * 3]);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  write_text(path, std::string(reinterpret_cast<char*>(buffer), size));
  jpeg_destroy_compress(&info);
  std::free(buffer);
}

// Damage a lenient decoder lets through: 8 zero bytes in a JPEG's entropy-coded data, a cut
// JPEG, a PNG whose pixel data fails its CRC.
TEST(ImageIo, DamagedJpegAndPngDataIsAnErrorNamingTheFile) {
  TempDir dir;
  const int width = 96, height = 64;
  std::vector<uint8_t> rgb(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const uint8_t value[3] = {uint8_t(2 * x), uint8_t(3 * y), uint8_t(128 + x - y)};
      std::memcpy(&rgb[(size_t(y) * width + x) * 3], value, 3);
    }
  }
  write_jpeg(dir / "good.jpg", width, height, rgb);
  const Image good = load_image(dir / "good.jpg");
  ASSERT_EQ(good.width, width);
  ASSERT_EQ(good.channels, 3);
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i)
    worst = std::max(worst, std::abs(good.pixels[i] - rgb[i]));
  EXPECT_LE(worst, 12) << "a quality-95 JPEG of a smooth image";
  const std::string bytes = read_bytes(dir / "good.jpg");
  // JPEG has no checksum: zeros that still decode as entropy-coded data go unseen by any decoder
  // (most positions here), so the test zeroes the last 8 bytes before the end marker, which
  // leaves the scan short of its blocks: libjpeg says "Corrupt JPEG data", as it did (through
  // ImageMagick) on the damaged capture that stb_image decoded silently.
  std::string zeroed = bytes;
  std::memset(&zeroed[bytes.size() - 10], 0, 8);
  write_text(dir / "zeroed.jpg", zeroed);
  expect_invalid_naming([&] { load_image(dir / "zeroed.jpg"); }, dir / "zeroed.jpg: corrupt JPEG");
  write_text(dir / "cut.jpg", bytes.substr(0, bytes.size() * 3 / 5));
  expect_invalid_naming([&] { load_image(dir / "cut.jpg"); }, dir / "cut.jpg: corrupt JPEG");
  // By content, not by name: a PNG called .jpg.
  write_gradient_png(dir / "png.jpg", 16, 12, 3);
  EXPECT_EQ(load_image(dir / "png.jpg").width, 16);
  // One flipped bit inside the first IDAT chunk's data: its CRC no longer matches.
  write_gradient_png(dir / "good.png", 64, 48, 3);
  std::string png = read_bytes(dir / "good.png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 4 + 10] = char(png[idat + 4 + 10] ^ 0x10);
  write_text(dir / "flipped.png", png);
  expect_invalid_naming([&] { load_image(dir / "flipped.png"); }, dir / "flipped.png: corrupt PNG");
}

std::string npy_bytes(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  const char length[2] = {char(header.size() & 0xff), char(header.size() >> 8)};
  return std::string("\x93NUMPY\x01\x00", 8) + std::string(length, 2) + header + data;
}

NpyArray parse(const std::string& bytes) {
  return parse_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.npy");
}

TEST(Npy, ReadsFernPosesBounds) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const NpyArray table = read_npy(fern_dir + "/poses_bounds.npy");
  ASSERT_EQ(table.shape, (std::vector<size_t>{20, 17}));
  EXPECT_EQ(table.type, NpyType::kFloat64);
  EXPECT_NEAR(table.at(0), 2.24225156e-02, 1e-10);  // numpy: poses_bounds[0, 0]
  EXPECT_EQ(table.at(4), 3024.0);                   // H of the full-size images
  EXPECT_NEAR(table.at(16), 78.2574871, 1e-6);      // far bound of image 0
}

TEST(Npy, ReadsEachSupportedTypeAndShape) {
  const float f[] = {1.5f, -2.0f};
  NpyArray a = parse(npy_bytes("<f4", "(2,)", std::string(reinterpret_cast<const char*>(f), 8)));
  EXPECT_EQ(a.shape, (std::vector<size_t>{2}));
  EXPECT_EQ(a.at(1), -2.0);
  a = parse(npy_bytes("|u1", "(2, 3)", "abcdef"));
  EXPECT_EQ(a.shape, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(a.at(5), double('f'));
  const int64_t i[] = {7};
  a = parse(npy_bytes("<i8", "()", std::string(reinterpret_cast<const char*>(i), 8)));
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.count(), 1u);
  EXPECT_EQ(a.at(0), 7.0);
}

TEST(Npy, RefusesBadHeadersTruncationAndAbsurdShapes) {
  MVIBR_NEED_DATASET(fern_dir, "llff_fern");
  const std::string eight(8, '\0');
  // Each of these must fail with InvalidArgument, never allocate from the header's shape.
  for (const std::string& bytes :
       {npy_bytes("<f8", "(2,)", eight),                            // truncated data
        npy_bytes("<f8", "(1,)", eight + eight),                    // data beyond the shape
        npy_bytes("<f8", "(1099511627776, 1099511627776)", eight),  // 2^80 elements
        npy_bytes("<f8", "(99999999999999999999999,)", eight),      // overflows size_t
        npy_bytes(">f8", "(1,)", eight),                            // big-endian
        npy_bytes("<c16", "(1,)", eight + eight),                   // complex
        npy_bytes("<f8", "(1,", eight),                             // malformed shape
        npy_bytes("<f8", "(1,)", eight).substr(0, 40),              // truncated header
        std::string("\x93NUMPZ\x01\x00\x10\x00", 10)}) {            // bad magic
    EXPECT_THROW(parse(bytes), InvalidArgument);
  }
  std::string fortran = npy_bytes("<f8", "(1,)", eight);
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_THROW(parse(fortran), InvalidArgument);

  TempDir dir;
  const std::string bytes = read_bytes(fern_dir + "/poses_bounds.npy");
  write_text(dir / "poses_bounds.npy", bytes.substr(0, bytes.size() - 8));
  expect_invalid_naming([&] { read_npy(dir / "poses_bounds.npy"); }, dir / "poses_bounds.npy");
  write_text(dir / "huge.npy", npy_bytes("<f8", "(4000000000, 4000000000, 3)", eight));
  expect_invalid_naming([&] { read_npy(dir / "huge.npy"); }, dir / "huge.npy");
}

TEST(Npz, ReadsDeflatedTinyDnerf) {
  MVIBR_NEED_DATASET(dnerf_npz, "dnerf_lego_tiny");
  dnerf_npz += "/tiny_dnerf_data.npz";
  const std::map<std::string, NpyArray> arrays = read_npz(dnerf_npz);
  ASSERT_EQ(arrays.size(), 4u);
  EXPECT_EQ(arrays.at("images").shape, (std::vector<size_t>{81, 100, 100, 3}));
  EXPECT_EQ(arrays.at("images").type, NpyType::kFloat32);
  EXPECT_EQ(arrays.at("poses").shape, (std::vector<size_t>{81, 4, 4}));
  EXPECT_EQ(arrays.at("times").shape, (std::vector<size_t>{81}));
  EXPECT_NEAR(arrays.at("focal").at(0), 138.88887889922103, 1e-9);
  EXPECT_EQ(arrays.at("times").at(80), 1.0);
}

// A stored (uncompressed) zip of one member, as np.savez writes without compression.
std::string stored_zip(const std::string& name, const std::string& data, uint32_t claimed_size) {
  const auto le = [](uint64_t v, int bytes) {
    std::string s;
    for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
    return s;
  };
  const uint32_t crc =
      uint32_t(crc32(0, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
  const std::string sizes = le(crc, 4) + le(data.size(), 4) + le(claimed_size, 4);
  const std::string local = le(0x04034b50, 4) + le(20, 2) + le(0, 2) + le(0, 2) + le(0, 4) + sizes +
                            le(name.size(), 2) + le(0, 2) + name;
  const std::string central = le(0x02014b50, 4) + le(20, 2) + le(20, 2) + le(0, 2) + le(0, 2) +
                              le(0, 4) + sizes + le(name.size(), 2) + le(0, 2) + le(0, 2) +
                              le(0, 2) + le(0, 2) + le(0, 4) + le(0, 4) + name;
  const std::string end = le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(1, 2) + le(1, 2) +
                          le(central.size(), 4) + le(local.size() + data.size(), 4) + le(0, 2);
  return local + data + central + end;
}

TEST(Npz, ReadsStoredMembersAndRefusesDamage) {
  MVIBR_NEED_DATASET(dnerf_npz, "dnerf_lego_tiny");
  dnerf_npz += "/tiny_dnerf_data.npz";
  TempDir dir;
  const std::string npy = npy_bytes("|u1", "(3,)", "xyz");
  write_text(dir / "stored.npz", stored_zip("a.npy", npy, uint32_t(npy.size())));
  const std::map<std::string, NpyArray> arrays = read_npz(dir / "stored.npz");
  ASSERT_EQ(arrays.count("a"), 1u);
  EXPECT_EQ(arrays.at("a").at(2), double('z'));

  write_text(dir / "lying.npz", stored_zip("a.npy", npy, 0xFFFFFFF0u));
  expect_invalid_naming([&] { read_npz(dir / "lying.npz"); }, dir / "lying.npz");
  const std::string real = read_bytes(dnerf_npz);
  for (const size_t keep : {real.size() - 10, real.size() / 2, size_t(30)}) {
    write_text(dir / "cut.npz", real.substr(0, keep));
    expect_invalid_naming([&] { read_npz(dir / "cut.npz"); }, dir / "cut.npz");
  }
  std::string flipped = real;
  flipped[5000] = char(flipped[5000] ^ 0x5a);  // inside images.npy's deflate stream
  write_text(dir / "flipped.npz", flipped);
  expect_invalid_naming([&] { read_npz(dir / "flipped.npz"); }, dir / "flipped.npz");
}

}  // namespace
}  // namespace mvibr::data
