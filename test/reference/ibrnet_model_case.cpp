// Writes the case folder of one training step (see ibrnet_model_case.h).
#include "ibrnet_model_case.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/checkpoint.h"
#include "npy.h"

namespace mvibr::test {

namespace fs = std::filesystem;

namespace {

NpyArray camera_array(const PinholeCamera<double>& c) {
  std::vector<double> v{c.fx, c.fy, c.cx, c.cy};
  v.insert(v.end(), c.c2w, c.c2w + 12);
  return {{16}, v};
}

// The Philox numbers the step draws, so that the reference uses the same ones.
NpyArray philox_uniforms(RandomStream stream, RandomKey key, size_t rays, size_t per_ray) {
  NpyArray u{{rays, per_ray}, std::vector<double>(rays * per_ray)};
  for (size_t r = 0; r < rays; ++r) {
    for (size_t i = 0; i < per_ray; ++i) {
      u.data[r * per_ray + i] = philox_uniform(key, stream, uint32_t(r), uint32_t(i));
    }
  }
  return u;
}

}  // namespace

void write_model_case(const train::TrainConfig& c, const train::IbrnetModel& model,
                      const data::TrainingSample& sample, const train::RayBatch& rays,
                      RandomKey key, const fs::path& dir) {
  fs::create_directories(dir);
  const nn::Adam adam(model.parameters(), nn::AdamOptions{});
  train::TrainingState state;
  state.config = c.to_text();
  state.cursors = {data::ReaderCursor{}};  // one rank
  const std::string written =
      train::save_checkpoint((dir / "run").string(), model.parameters(), adam, state, 0);
  fs::rename(written, dir / "checkpoint.h5");
  fs::remove_all(dir / "run");

  const nn::ResUNetOptions features = train::feature_net_options(c);
  const auto [hf, wf] =
      nn::ResUNet::output_size(sample.target.camera.height, sample.target.camera.width);
  const nlohmann::json spec = {
      {"widths", features.widths},
      {"blocks", features.blocks},
      {"coarse_feat_dim", c.coarse_feat_dim},
      {"fine_feat_dim", c.fine_feat_dim},
      {"coarse_only", c.coarse_only},
      {"feature_size", {hf, wf}},
      {"near", sample.target.near_depth},
      {"far", sample.target.far_depth},
      {"N_samples", c.N_samples},
      {"N_importance", c.N_importance},
      {"inv_uniform", c.inv_uniform},
      {"det", c.det},
      {"delta", name_of(c.delta)},
      {"white_bkgd", c.white_bkgd},
      {"anti_alias_pooling", c.anti_alias_pooling},
      {"attention_mask",
       nn::AggregatorOptions{}.attention_mask == nn::AttentionMask::kKeys ? "keys" : "queries"},
      {"lrate_feature", c.lrate_feature},
      {"lrate_mlp", c.lrate_mlp},
      {"lrate_decay_factor", c.lrate_decay_factor},
      {"lrate_decay_steps", c.lrate_decay_steps},
      {"grad_clip", c.grad_clip}};
  std::ofstream(dir / "case.json") << spec.dump();

  const size_t V = sample.sources.size(), R = rays.pixels.size() / 2;
  const size_t H = size_t(sample.target.camera.height), W = size_t(sample.target.camera.width);
  NpyArray images{{V, H, W, 3}, {}}, cameras{{V, 16}, {}};
  for (const data::View& view : sample.sources) {
    images.data.insert(images.data.end(), view.rgb.begin(), view.rgb.end());
    const NpyArray camera = camera_array(view.camera);
    cameras.data.insert(cameras.data.end(), camera.data.begin(), camera.data.end());
  }
  write_npy(dir / "images.npy", images);
  write_npy(dir / "cameras.npy", cameras);
  write_npy(dir / "target_camera.npy", camera_array(sample.target.camera));
  write_npy(dir / "pixels.npy",
            {{R, 2}, std::vector<double>(rays.pixels.begin(), rays.pixels.end())});
  write_npy(dir / "target_rgb.npy",
            {{R, 3}, std::vector<double>(rays.target_rgb.begin(), rays.target_rgb.end())});
  write_npy(dir / "u_coarse.npy",
            philox_uniforms(RandomStream::kStratifiedJitter, key, R, size_t(c.N_samples)));
  write_npy(dir / "u_importance.npy",
            philox_uniforms(RandomStream::kImportanceSampling, key, R, size_t(c.N_importance)));
}

}  // namespace mvibr::test
