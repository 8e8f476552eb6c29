// The training configuration: IBRNet's key names from a file and the command line (which
// wins), a round trip through to_text, and errors that name the key and the file.
#include "mvibr/train/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "mvibr/core/error.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

struct ConfigFile {
  fs::path path = fs::temp_directory_path() / ("mvibr-config-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(counter++) + ".txt");
  explicit ConfigFile(const std::string& text) { std::ofstream(path) << text; }
  ~ConfigFile() { fs::remove(path); }
  static inline int counter = 0;
};

std::string error_of(const std::vector<std::string>& args) {
  TrainConfig config;
  try {
    parse_train_config(args, &config);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, ReadsIbrnetKeysAndTheCommandLineWins) {
  const ConfigFile file(
      "# an IBRNet-style config\nexpname = fern_test\ndatadir = data/fern\nN_rand = 256\n"
      "N_samples = 48\nN_importance = 32\ninv_uniform = True\nwhite_bkgd = false\n"
      "lrate_feature = 0.002\ncoarse_only = 0\n");
  TrainConfig config;
  ASSERT_TRUE(
      parse_train_config({"--config", file.path.string(), "--N_rand", "128", "--det"}, &config));
  EXPECT_EQ(config.expname, "fern_test");
  EXPECT_EQ(config.N_rand, 128);  // the command line wins
  EXPECT_EQ(config.N_samples, 48);
  EXPECT_TRUE(config.inv_uniform);
  EXPECT_TRUE(config.det);
  EXPECT_FALSE(config.white_bkgd);
  EXPECT_DOUBLE_EQ(config.lrate_feature, 0.002);
  EXPECT_EQ(config.lrate_mlp, 5e-4);  // IBRNet's default
}

TEST(TrainConfig, ToTextParsesBackToTheSameConfig) {
  TrainConfig original;
  ASSERT_TRUE(parse_train_config({"--datadir", "d", "--seed", "9", "--lrate_mlp", "0.000123456789",
                                  "--white_bkgd", "--feature_net", "small"},
                                 &original));
  const ConfigFile file(original.to_text());
  TrainConfig again;
  ASSERT_TRUE(parse_train_config({"--config", file.path.string()}, &again));
  EXPECT_EQ(again.to_text(), original.to_text());
  EXPECT_EQ(again.lrate_mlp, 0.000123456789);
}

TEST(TrainConfig, UnknownKeysAndBadValuesNameTheKeyAndTheFile) {
  const ConfigFile unknown("datadir = d\nN_rnad = 5\n");
  const std::string a = error_of({"--config", unknown.path.string()});
  EXPECT_NE(a.find(unknown.path.string()), std::string::npos) << a;
  EXPECT_NE(a.find("N_rnad"), std::string::npos) << a;
  const ConfigFile bad("datadir = d\nN_rand = many\n");
  const std::string b = error_of({"--config", bad.path.string()});
  EXPECT_NE(b.find(bad.path.string()), std::string::npos) << b;
  EXPECT_NE(b.find("N_rand"), std::string::npos) << b;
  EXPECT_NE(error_of({"--datadir", "d", "--N_rand", "0"}).find("'N_rand'"), std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--delta", "huge"}).find("'delta'"), std::string::npos);
  EXPECT_NE(error_of({"--N_rand", "4"}).find("'datadir'"), std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--frobnicate", "1"}).find("command line"),
            std::string::npos);
  EXPECT_NE(error_of({"--config", "/nonexistent.txt"}).find("/nonexistent.txt"), std::string::npos);
}

// --resume (the design's key) sets IBRNet's ckpt_path and no_reload, and may not contradict them.
TEST(TrainConfig, ResumeIsAutoNoneOrACheckpoint) {
  TrainConfig automatic, none, path;
  ASSERT_TRUE(parse_train_config({"--datadir", "d", "--resume", "auto"}, &automatic));
  EXPECT_FALSE(automatic.no_reload);
  EXPECT_EQ(automatic.ckpt_path, "");
  ASSERT_TRUE(parse_train_config({"--datadir", "d", "--resume", "none"}, &none));
  EXPECT_TRUE(none.no_reload);
  EXPECT_EQ(none.ckpt_path, "");
  ASSERT_TRUE(parse_train_config({"--datadir", "d", "--resume", "runs/a/ckpt-00000010.h5"}, &path));
  EXPECT_FALSE(path.no_reload);
  EXPECT_EQ(path.ckpt_path, "runs/a/ckpt-00000010.h5");
  EXPECT_EQ(path.to_text(), automatic.to_text());  // where a run starts is not what it trains
  EXPECT_NE(error_of({"--datadir", "d", "--resume", "none", "--ckpt_path", "c.h5"})
                .find("'resume': is none, but ckpt_path names a checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--resume", "a.h5", "--ckpt_path", "b.h5"})
                .find("'resume': names a.h5, but ckpt_path names b.h5"),
            std::string::npos);
}

}  // namespace
}  // namespace mvibr::train
