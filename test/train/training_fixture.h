// What the training tests share: the built-in scene prepared at test size, and a config that
// trains it in seconds on 2 cores (small feature net, 16 + 8 samples, 4 sources).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mvibr/data/neighbours.h"
#include "mvibr/data/pose_scene.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/data/shards.h"
#include "mvibr/data/synthetic_scene.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/synthetic/random_scene.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/config.h"
#include "mvibr/train/dynibar_model.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/model.h"

namespace mvibr::train::testing {

// 48x36 views of the built-in scene (every 8th a test view) prepared into root/data.
inline void prepare_small_scene(const std::filesystem::path& root, int n_views,
                                const std::string& command) {
  data::SyntheticSceneOptions options;
  options.width = 48;
  options.height = 36;
  options.n_views = n_views;
  data::Scene scene = data::make_synthetic_scene(options);
  data::select_neighbours(&scene, {20, 1});
  data::write_prepared_scene(scene, (root / "data").string(), {1, 0, command});
}

// A target view of the built-in scene at 48x40 and its three nearest cameras on the orbit: most
// target rays are seen by two or more sources along enough samples to count in IBRNet's ray mask.
inline data::TrainingSample three_source_sample() {
  data::SyntheticSceneOptions options;
  options.width = 48;
  options.height = 40;
  options.n_views = 16;
  const data::Scene scene = data::make_synthetic_scene(options);
  data::TrainingSample sample;
  sample.target_view = 1;
  sample.target = scene.views[1];
  sample.source_views = {0, 2, 3};
  for (int v : sample.source_views) sample.sources.push_back(scene.views[size_t(v)]);
  return sample;
}

// The model config of three_source_sample's steps: the small feature net, 16 + 16 channels, 48
// rays, 16 + 8 samples, on the CPU.
inline TrainConfig three_source_config(bool inv_uniform) {
  TrainConfig c;
  c.device = Device::kCpu;
  c.feature_net = nn::ResUNetPreset::kSmall;
  c.coarse_feat_dim = c.fine_feat_dim = 16;
  c.N_rand = 48;
  c.N_samples = 16;
  c.N_importance = 8;
  c.num_source_views = 3;
  c.inv_uniform = inv_uniform;
  return c;
}

inline TrainConfig small_config(const std::filesystem::path& root, const std::string& name,
                                int n_iters, int n_rand) {
  TrainConfig c;
  c.expname = name;
  c.basedir = (root / "runs").string();
  c.datadir = (root / "data").string();
  c.feature_net = nn::ResUNetPreset::kSmall;
  c.coarse_feat_dim = c.fine_feat_dim = 8;
  c.N_rand = n_rand;
  c.N_samples = 16;
  c.N_importance = 8;
  c.num_source_views = 4;
  c.source_pool = 6;
  c.n_iters = n_iters;
  c.seed = 3;
  c.device = Device::kCpu;  // the CPU step is deterministic to the bit, which resume tests rely on
  return c;
}

// A monocular video of the built-in dynamic scene at 40x32 (every 8th frame held out), each
// frame's source pool reaching `reach` frames either way, prepared into root/data for DynIBaR.
inline void prepare_small_video(const std::filesystem::path& root, const std::string& command,
                                int frames = 10, int reach = 4) {
  data::SyntheticSceneOptions options;
  options.rig = "monocular";
  options.n_time_steps = frames;
  options.width = 40;
  options.height = 32;
  data::Scene scene = data::make_synthetic_scene(options);
  data::select_neighbours(&scene, {2 * reach, reach});
  data::write_prepared_scene(scene, (root / "data").string(), {1, 0, command});
}

// DynIBaR on prepare_small_video's data (max_range = its reach): a static bootstrap of one epoch
// (init_decay_epoch 2), then the main loop; small nets, 16 samples, 3 + 6 sources.
inline TrainConfig small_dynibar_config(const std::filesystem::path& root, const std::string& name,
                                        int n_iters, int n_rand, int reach = 4) {
  TrainConfig c = small_config(root, name, n_iters, n_rand);
  c.model = ModelKind::kDynibar;
  c.N_importance = 0;
  c.inv_uniform = true;
  c.anti_alias_pooling = false;  // configs/train_kid-running.txt
  c.num_source_views = 3;
  c.max_range = reach;
  c.init_decay_epoch = 2;
  c.lrate_feature = 8e-4;
  c.lrate_mlp = 4e-4;
  return c;
}

// The built-in pose data set of side x side views from 4 cameras (one ray per pixel):
// `sequences` of `frames` instants, the last `test_sequences` held out, prepared into root/data
// in `shards` shards.
inline void write_pose_data(const std::filesystem::path& root, int side, int sequences, int frames,
                            int test_sequences, uint64_t seed, int shards,
                            const std::string& command) {
  data::PoseSceneOptions o;
  o.width = o.height = side;
  o.n_cameras = 4;
  o.n_sequences = sequences;
  o.n_frames = frames;
  o.n_test_sequences = test_sequences;
  o.samples_per_side = 1;
  o.seed = seed;
  data::write_prepared_scene(data::make_pose_scene(o), (root / "data").string(),
                             {shards, 0, command});
}

// At 96x96: 10 sequences of 4 instants, the last 2 held out (enough bodies and scenes for a
// short run to generalise).
inline void prepare_small_pose_data(const std::filesystem::path& root, int shards,
                                    const std::string& command) {
  write_pose_data(root, 96, 10, 4, 2, 2, shards, command);
}

// The pose model with the small backbone on that data, `pose_batch` instants a micro-batch.
inline TrainConfig small_pose_config(const std::filesystem::path& root, const std::string& name,
                                     int n_iters, int pose_batch) {
  TrainConfig c;
  c.model = ModelKind::kPose;
  c.device = Device::kCpu;
  c.expname = name;
  c.basedir = (root / "runs").string();
  c.datadir = (root / "data").string();
  c.n_iters = n_iters;
  c.i_print = 1;
  c.i_img = 1000;
  c.feature_net = nn::ResUNetPreset::kSmall;
  c.confidence_channels = 4;
  c.confidence_hidden = 8;
  c.heatmap_multiplier = 10;
  c.pose_batch = pose_batch;
  return c;
}

// The first sample of `config`'s video (DynIBaR's source sets, file order) whose target is a
// frame in [first_frame, last_frame].
inline data::TrainingSample video_sample(const TrainConfig& config, int first_frame,
                                         int last_frame) {
  data::ReaderOptions o;
  o.data_dir = config.datadir;
  o.seed = config.seed;
  o.dynibar_sources = true;
  o.dynibar = dynibar_source_options(config);
  o.shuffle = false;
  data::PrefetchReader reader(o);
  for (;;) {
    data::TrainingSample s = reader.next();
    if (s.target.time_index >= first_frame && s.target.time_index <= last_frame) return s;
  }
}

// A DynIBaR model initialised from seed 11 at update `step` (its phase follows), the motion head
// moved off its zero start so that the motion MLP and the basis get gradients.
inline std::unique_ptr<DynibarModel> dynibar_model_at(const TrainConfig& config, uint64_t step) {
  auto model = std::make_unique<DynibarModel>(config);
  model->initialize(11);
  nn::ParameterSet& p = model->parameters();
  for (const char* name : {"motion_mlp.coeff_linear.weight", "motion_mlp.coeff_linear.bias"}) {
    const nn::Parameter head = p.find(name);
    const std::vector<double> values = synthetic::random_values(p.info(head).size, -0.02, 0.02, 99);
    std::transform(values.begin(), values.end(), p.value(head), [](double x) { return float(x); });
  }
  nn::Adam& adam = model->optimizer();
  adam.restore(step, adam.exp_avg(), adam.exp_avg_sq());
  return model;
}

// For tests that compare two runs whose arithmetic differs only in summation order (ranks,
// micro-steps): the feature network at a tenth of IBRNet's rate. At 1e-3 Adam's first steps move
// every feature weight by about 1% at once, and on this 48x36 scene the deepest instance norms
// see 30 pixels: a rounding difference that carries one pixel across a ReLU's kink changes their
// statistics by ~3%, and the runs part for good (seed 3 of 5 ended 1.3e-4 apart). At 1e-4, 16
// seeds measured all stay within 1.2e-6.
inline void keep_rounding_from_compounding(TrainConfig* c) {
  c->lrate_feature = 1e-4;
}

// The parameters a checkpoint holds, in the layout of `config`'s model.
inline std::vector<float> checkpoint_values(const TrainConfig& config, const std::string& path) {
  const std::unique_ptr<TrainableModel> model = make_model(with_video_frames(config));
  nn::Adam adam(model->parameters(), nn::AdamOptions{});
  train::TrainingState state;
  train::load_checkpoint(path, &model->parameters(), &adam, &state);
  return model->parameters().values();
}

// How close two trained parameter vectors are: |x - y| / |y|, and how far training moved y from
// `config`'s initial parameters relative to |x - y| (so "equal" is not "both untrained").
struct Closeness {
  double relative = 0, moved = 0;
};
inline Closeness closeness(const TrainConfig& config, const std::vector<float>& x,
                           const std::vector<float>& y) {
  const std::unique_ptr<TrainableModel> model = make_model(with_video_frames(config));
  model->initialize(config.seed);
  const std::vector<float>& initial = model->parameters().values();
  double difference = 0, norm = 0, moved = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    difference += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(y[i]) * y[i];
    moved += (double(y[i]) - initial[i]) * (double(y[i]) - initial[i]);
  }
  return {std::sqrt(difference / norm), std::sqrt(moved / std::max(difference, 1e-300))};
}

}  // namespace mvibr::train::testing
