// Outputs are whole or absent: write_file_atomically and write_png replace a file through a
// temporary renamed into place, leave no temporary behind, and fail with the path named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"

namespace mvibr::data {
namespace {

namespace fs = std::filesystem;

std::string contents(const fs::path& path) {
  std::ostringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

TEST(OutputFiles, ReplaceWholeFilesAndLeaveNoTemporaries) {
  const fs::path dir = fs::temp_directory_path() / ("mvibr-outputs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_file_atomically((dir / "report.json").string(), "{\"a\": 1}\n");
  write_file_atomically((dir / "report.json").string(), "{}\n");
  EXPECT_EQ(contents(dir / "report.json"), "{}\n");

  const uint8_t pixels[2 * 3 * 3] = {0,  10,  20,  30,  40,  50,  60,  70,  80,
                                     90, 100, 110, 120, 130, 140, 150, 160, 255};
  write_png((dir / "image.png").string(), 3, 2, 3, pixels);
  const Image image = load_image((dir / "image.png").string());
  EXPECT_EQ(image.width, 3);
  EXPECT_EQ(image.height, 2);
  EXPECT_EQ(image.pixels, std::vector<uint8_t>(pixels, pixels + sizeof pixels));

  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
  EXPECT_EQ(files, 2u);

  try {
    write_png((dir / "missing" / "image.png").string(), 3, 2, 3, pixels);
    FAIL() << "wrote into a folder that does not exist";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("missing/image.png: cannot write"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "missing"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mvibr::data
