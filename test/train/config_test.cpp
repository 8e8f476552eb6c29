// The training configuration: IBRNet's key names from a file and the command line (which
// wins), a round trip through to_text, errors that name the key and the file, and every key of
// the table parsed, listed in --help and carried by to_text (so checkpoints and the cross-rank
// check see it).
#include "mvibr/train/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/train/trainer.h"

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

// A value other than the default for every key, as to_text writes it back: a key added to the
// table without one here fails, and so does one dropped from the table, from --help, from
// parsing or from to_text.
const std::map<std::string, std::string> kOtherValues = {
    {"expname", "other"},
    {"basedir", "elsewhere"},
    {"datadir", "data2"},
    {"seed", "7"},
    {"n_iters", "9"},
    {"i_print", "3"},
    {"i_img", "4"},
    {"i_weights", "5"},
    {"keep_checkpoints", "2"},
    {"ckpt_path", "c.h5"},
    {"no_reload", "1"},
    {"init_ckpt", "i.h5"},
    {"N_rand", "77"},
    {"chunk_size", "99"},
    {"num_source_views", "4"},
    {"source_pool", "30"},
    {"sample_mode", "center"},
    {"center_ratio", "0.5"},
    {"queue_depth", "2"},
    {"model", "dynibar"},
    {"feature_net", "small"},
    {"conv_algorithm", "winograd"},
    {"coarse_feat_dim", "8"},
    {"fine_feat_dim", "9"},
    {"coarse_only", "1"},
    {"anti_alias_pooling", "0"},
    {"N_samples", "12"},
    {"N_importance", "0"},
    {"inv_uniform", "1"},
    {"det", "1"},
    {"white_bkgd", "1"},
    {"delta", "interval"},
    {"device", "cpu"},
    {"precision", "bf16"},
    {"flush_subnormals", "0"},
    {"loss_scale", "1024"},
    {"loss_scale_window", "10"},
    {"lrate_feature", "0.25"},
    {"lrate_mlp", "0.125"},
    {"lrate_decay_factor", "0.75"},
    {"lrate_decay_steps", "11"},
    {"grad_clip", "2.5"},
    {"optimizer", "lamb"},
    {"weight_decay", "0.0625"},
    {"weight_decay_1d", "1"},
    {"lr_schedule", "cosine"},
    {"warmup_steps", "7"},
    {"min_lr_ratio", "0.25"},
    {"num_frames", "30"},
    {"num_basis", "5"},
    {"max_range", "10"},
    {"init_decay_epoch", "50"},
    {"decay_rate", "4"},
    {"w_disp", "0.5"},
    {"w_flow", "0.25"},
    {"w_cycle", "0.375"},
    {"cycle_factor", "0.125"},
    {"anneal_cycle", "0"},
    {"w_reg", "0.0625"},
    {"w_skew_entropy", "0.001"},
    {"w_distortion", "0.002"},
    {"pose_batch", "3"},
    {"confidence_channels", "8"},
    {"confidence_hidden", "16"},
    {"heatmap_multiplier", "50"},
    {"w_joints_2d", "0.5"},
    {"use_confidences", "0"},
    {"cross_view_fusion", "1"},
    {"lrate_fusion", "0.0009765625"},
    {"fusion_init_scale", "0.5"},
    {"recompute_backbone", "1"},
    {"accumulation_steps", "3"},
    {"lr_scaling", "sqrt"},
    {"bucket_mb", "1.5"},
    {"overlap_allreduce", "0"},
    {"allreduce_dtype", "bf16"},
    {"watchdog_s", "60"},
    {"nan_policy", "stop"},
    {"allow_shared_shards", "1"},
};

TEST(TrainConfig, EveryKeyIsParsedListedAndCarried) {
  const std::string help = train_config_help();
  TrainConfig defaults;
  ASSERT_TRUE(parse_train_config({"--datadir", "d"}, &defaults));
  std::set<std::string> in_table;
  for (const ConfigKeyName& key : train_config_keys()) {
    SCOPED_TRACE(key.name);
    in_table.insert(key.name);
    EXPECT_NE(help.find("--" + key.name + " "), std::string::npos);
    const auto other = kOtherValues.find(key.name);
    ASSERT_NE(other, kOtherValues.end()) << "no test value for a key of the table";
    // precision bf16 on device = cpu is the pose model's only: it is set with device auto. The
    // warm-up and the final ratio need the cosine schedule.
    std::vector<std::string> args = {"--" + key.name, other->second};
    if (key.name != "datadir") args.insert(args.end(), {"--datadir", "d"});
    if (key.name == "precision") args.insert(args.end(), {"--device", "auto"});
    if (key.name == "warmup_steps" || key.name == "min_lr_ratio") {
      args.insert(args.end(), {"--lr_schedule", "cosine"});
    }
    TrainConfig config;
    ASSERT_TRUE(parse_train_config(args, &config));
    const std::string line = key.name + " = " + other->second + "\n";
    if (key.in_text) {
      EXPECT_NE(config.to_text().find(line), std::string::npos) << config.to_text();
      EXPECT_EQ(defaults.to_text().find(line), std::string::npos);
      const ConfigFile file(config.to_text());
      TrainConfig again;
      ASSERT_TRUE(parse_train_config({"--config", file.path.string()}, &again));
      EXPECT_EQ(again.to_text(), config.to_text());
    } else {
      EXPECT_EQ(config.to_text(), defaults.to_text());  // where a run starts, not what it trains
      EXPECT_EQ(config.to_text().find(key.name + " = "), std::string::npos);
      EXPECT_TRUE(config.ckpt_path == "c.h5" || config.no_reload || config.init_ckpt == "i.h5");
    }
  }
  for (const auto& [name, value] : kOtherValues) {
    EXPECT_EQ(in_table.count(name), 1u) << name << " is no longer a key of the table";
  }
}

TEST(TrainConfig, EnumeratedKeysNameTheirChoices) {
  EXPECT_NE(error_of({"--datadir", "d", "--device", "gpu"})
                .find("config key 'device': must be auto, cpu or cuda, got 'gpu'"),
            std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--sample_mode", "edges"})
                .find("config key 'sample_mode': must be uniform or center, got 'edges'"),
            std::string::npos);
  // On the CPU: fp32, and bf16 for the pose model's convolutions only.
  const std::string cpu_only =
      "config key 'precision': device = cpu runs fp32, and bf16 only for "
      "model = pose";
  EXPECT_NE(error_of({"--datadir", "d", "--device", "cpu", "--precision", "fp16"}).find(cpu_only),
            std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--device", "cpu", "--precision", "bf16"}).find(cpu_only),
            std::string::npos);
  EXPECT_NE(
      error_of({"--datadir", "d", "--device", "cpu", "--model", "pose", "--precision", "fp16"})
          .find(cpu_only),
      std::string::npos);
  TrainConfig pose;
  EXPECT_TRUE(parse_train_config(
      {"--datadir", "d", "--device", "cpu", "--model", "pose", "--precision", "bf16"}, &pose));
  EXPECT_NE(train_config_help().find("fp32 | bf16 | fp16: "), std::string::npos);
  EXPECT_NE(error_of({"--datadir", "d", "--optimizer", "sgd"})
                .find("config key 'optimizer': must be adam, adamw or lamb, got 'sgd'"),
            std::string::npos);
}

// The optimiser's keys reach AdamOptions, and combinations that would be ignored or cannot run
// are one-line errors naming the key.
TEST(TrainConfig, OptimiserKeysReachAdamOptionsAndBadCombinationsAreRefused) {
  TrainConfig config;
  ASSERT_TRUE(parse_train_config(
      {"--datadir", "d", "--optimizer", "adamw", "--weight_decay", "0.05", "--lr_schedule",
       "cosine", "--warmup_steps", "100", "--min_lr_ratio", "0.1", "--n_iters", "1000"},
      &config));
  const nn::AdamOptions o = adam_options(config, 1);
  EXPECT_EQ(o.kind, nn::OptimizerKind::kAdamW);
  EXPECT_EQ(o.weight_decay, 0.05);
  EXPECT_FALSE(o.weight_decay_1d);
  EXPECT_EQ(o.lr_schedule, nn::LrSchedule::kCosine);
  EXPECT_EQ(o.warmup_steps, 100u);
  EXPECT_EQ(o.total_steps, 1000u);
  EXPECT_EQ(o.min_lr_ratio, 0.1);
  const nn::AdamOptions defaults = adam_options(TrainConfig(), 1);
  EXPECT_EQ(defaults.kind, nn::OptimizerKind::kAdam);
  EXPECT_EQ(defaults.weight_decay, 0.0);
  EXPECT_EQ(defaults.lr_schedule, nn::LrSchedule::kStep);

  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"--optimizer", "adamw", "--weight_decay", "-1"}, "config key 'weight_decay': must be >= 0"},
      {{"--warmup_steps", "10"}, "config key 'warmup_steps': must be 0 with lr_schedule = step"},
      {{"--lr_schedule", "cosine", "--n_iters", "50", "--warmup_steps", "50"},
       "config key 'warmup_steps': must be 0 with lr_schedule = step, and in [0, n_iters)"},
      {{"--lr_schedule", "cosine", "--min_lr_ratio", "1.5"},
       "config key 'min_lr_ratio': must be in [0, 1]"},
      {{"--min_lr_ratio", "0.1"}, "config key 'min_lr_ratio': must be in [0, 1], and 0 unless"},
      {{"--lr_schedule", "cosine", "--model", "dynibar"},
       "config key 'lr_schedule': cosine is for model = ibrnet"},
      {{"--optimizer", "lamb", "--device", "cuda"},
       "config key 'optimizer': lamb runs on the CPU step only"},
  };
  for (const auto& [args, message] : refused) {
    std::vector<std::string> all = {"--datadir", "d"};
    all.insert(all.end(), args.begin(), args.end());
    const std::string error = error_of(all);
    EXPECT_NE(error.find(message), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace mvibr::train
