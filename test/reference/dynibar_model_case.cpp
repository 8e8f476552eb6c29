// Writes the case folder of one DynIBaR training step (see dynibar_model_case.h).
#include "dynibar_model_case.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/dynibar_motion.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/motion_mlp.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/ray_batch.h"
#include "npy.h"
#include "relu_masks.h"

namespace mvibr::test {

namespace fs = std::filesystem;
using train::TrainConfig;

namespace {

NpyArray camera_array(const std::vector<const data::View*>& views) {
  NpyArray a{{views.size(), 16}, {}};
  for (const data::View* v : views) {
    const PinholeCamera<double>& c = v->camera;
    a.data.insert(a.data.end(), {c.fx, c.fy, c.cx, c.cy});
    a.data.insert(a.data.end(), c.c2w, c.c2w + 12);
  }
  return a;
}

// [V,H,W,3] in [0,1]; black where the view's content moves when `black_out_motion`.
std::vector<float> images_of(const std::vector<const data::View*>& views, bool black_out_motion) {
  std::vector<float> out;
  for (const data::View* v : views) {
    for (size_t i = 0; i < v->rgb.size(); ++i) {
      const float keep = black_out_motion ? float(1 - v->motion.motion_mask[i / 3]) : 1.0f;
      out.push_back(float(v->rgb[i]) / 255.0f * keep);
    }
  }
  return out;
}

// The fp32 side's ReLU masks of one feature net on its images (see model_parity_test.cpp).
void write_relu_masks(const TrainConfig& c, const nn::ParameterSet& model,
                      const std::string& prefix, const std::string& tag,
                      const std::vector<float>& images, int views, int height, int width,
                      const fs::path& dir) {
  nn::ParameterSet copy;
  const nn::ResUNet net(train::dynibar_feature_net_options(c), &copy, prefix);
  for (const nn::ParameterInfo& info : copy.infos()) {
    const float* values = model.value(model.find(info.name));
    std::copy(values, values + info.size, copy.values().begin() + long(info.offset));
  }
  const auto [hf, wf] = nn::ResUNet::output_size(height, width, true);
  std::vector<float> coarse(size_t(views) * hf * wf * size_t(c.coarse_feat_dim));
  nn::ResUNet::Workspace workspace;
  net.forward(views, height, width, images.data(), &workspace, coarse.data(), nullptr);
  for (const auto& [unit, mask] : test::relu_masks(net, workspace)) {
    test::write_npy(dir / ("mask_" + tag + "_" + unit + ".npy"), mask);
  }
}

// The fp32 side's ReLU masks in the motion MLP, from the same float computations the step runs
// on the same inputs: the samples along the rays, their motion at the target's time, the anchor
// samples' at the anchor's. Many pre-activations there lie within fp32 rounding of 0.
void write_motion_masks(const TrainConfig& c, const nn::ParameterSet& model,
                        const data::View& target, int anchor_frame,
                        const std::vector<int>& anchor_frames, const std::vector<float>& pixels,
                        const std::vector<float>& depths, const fs::path& dir) {
  nn::ParameterSet copy;
  nn::MotionMlpOptions options;
  options.basis = c.num_basis;
  options.linear_operands =
      c.precision == train::Precision::kBf16 ? nn::Operands::kBf16 : nn::Operands::kFp32;
  const nn::MotionMlp mlp(copy, "motion_mlp.", options);
  for (const nn::ParameterInfo& info : copy.infos()) {
    const float* values = model.value(model.find(info.name));
    std::copy(values, values + info.size, copy.values().begin() + long(info.offset));
  }
  const float* basis = model.value(model.find("trajectory_basis"));
  const nn::DynibarMotion motion(mlp, c.num_frames);
  const int R = int(pixels.size() / 2), S = c.N_samples, t = target.time_index;
  const size_t n = size_t(R) * size_t(S);
  std::vector<float> origins(size_t(R) * 3), directions(size_t(R) * 3), points(n * 3);
  cpu::generate_rays(camera_cast<float>(target.camera), pixels.data(), R, origins.data(),
                     directions.data());
  for (size_t p = 0; p < n; ++p) {
    for (size_t a = 0; a < 3; ++a) {
      points[3 * p + a] =
          origins[3 * (p / size_t(S)) + a] + depths[p] * directions[3 * (p / size_t(S)) + a];
    }
  }
  const auto time_of = [&](int f) { return float(double(f) / double(c.num_frames)); };
  const auto write = [&](const nn::DynibarMotionWorkspace<float>& ws, const std::string& tag) {
    const nn::MotionMlpLayout layout = mlp.layout(n);
    const size_t W = size_t(options.width);
    for (size_t layer = 0; layer < layout.hidden.size(); ++layer) {
      NpyArray mask{{size_t(R), size_t(S), W}, {}};
      const float* h = ws.saved.data() + layout.hidden[layer];
      for (size_t i = 0; i < n * W; ++i) mask.data.push_back(h[i] > 0.0f ? 1.0 : 0.0);
      test::write_npy(dir / ("mask_motion_" + tag + "_" + std::to_string(layer) + ".npy"), mask);
    }
  };
  const int first = std::max(0, t - 3), last = std::min(c.num_frames - 1, t + 3);
  std::vector<int> frames;
  for (int f = first; f <= last; ++f) frames.push_back(f);
  std::vector<float> moved(frames.size() * n * 3), moved_anchor(anchor_frames.size() * n * 3);
  nn::DynibarMotionWorkspace<float> ref, anchor;
  const size_t mlp_offset = mlp.parameter_offset();
  motion.forward(copy.values().data() + mlp_offset, basis, R, S, points.data(), time_of(t), t,
                 frames, moved.data(), &ref);
  write(ref, "ref");
  const float* anchor_points = moved.data() + size_t(anchor_frame - first) * n * 3;
  motion.forward(copy.values().data() + mlp_offset, basis, R, S, anchor_points,
                 time_of(anchor_frame), anchor_frame, anchor_frames, moved_anchor.data(), &anchor);
  write(anchor, "anchor");
}

NpyArray floats(std::vector<size_t> shape, const std::vector<float>& v) {
  return {std::move(shape), std::vector<double>(v.begin(), v.end())};
}

}  // namespace

void write_dynibar_case(const TrainConfig& c, const train::DynibarModel& model,
                        const data::TrainingSample& s, RandomKey key, const fs::path& dir) {
  const data::DynibarSourceSets& sets = s.dynibar.value();
  const nn::ParameterSet& p = model.parameters();
  fs::create_directories(dir);
  train::TrainingState state;
  state.config = c.to_text();
  state.cursors = {data::ReaderCursor{}};
  const std::string written =
      train::save_checkpoint((dir / "run").string(), p, model.optimizer(), state, 0);
  fs::rename(written, dir / "checkpoint.h5");
  fs::remove_all(dir / "run");

  // The sources of each set, as the model takes them from the sample.
  std::vector<const data::View*> dynamic, anchor, statics;
  std::vector<double> dynamic_frames, anchor_frames;
  std::vector<int> flow_index;
  for (int k = 0; k < data::kFlowCount; ++k) {
    if (sets.dynamic[size_t(k)] < 0) continue;
    dynamic.push_back(&s.sources[size_t(sets.dynamic[size_t(k)])]);
    dynamic_frames.push_back(dynamic.back()->time_index);
    flow_index.push_back(k);
  }
  for (int at : sets.anchor) {
    anchor.push_back(&s.sources[size_t(at)]);
    anchor_frames.push_back(anchor.back()->time_index);
  }
  for (int at : sets.static_views) statics.push_back(&s.sources[size_t(at)]);
  const int H = s.target.camera.height, W = s.target.camera.width;
  std::vector<const data::View*> dynamic_and_anchor = dynamic;
  dynamic_and_anchor.insert(dynamic_and_anchor.end(), anchor.begin(), anchor.end());
  const std::vector<float> dynamic_images = images_of(dynamic_and_anchor, false);
  const std::vector<float> static_images = images_of(statics, true);
  const size_t Vd = dynamic_and_anchor.size(), Vs = statics.size();
  test::write_npy(dir / "dynamic_images.npy",
                  floats({Vd, size_t(H), size_t(W), 3}, dynamic_images));
  test::write_npy(dir / "static_images.npy", floats({Vs, size_t(H), size_t(W), 3}, static_images));
  test::write_npy(dir / "dynamic_cameras.npy", camera_array(dynamic));
  test::write_npy(dir / "anchor_cameras.npy", camera_array(anchor));
  test::write_npy(dir / "static_cameras.npy", camera_array(statics));
  test::write_npy(dir / "target_camera.npy", {{16}, camera_array({&s.target}).data});
  test::write_npy(dir / "dynamic_frames.npy", {{dynamic_frames.size()}, dynamic_frames});
  test::write_npy(dir / "anchor_frames.npy", {{anchor_frames.size()}, anchor_frames});
  write_relu_masks(c, p, "feature_net.", "dy", dynamic_images, int(Vd), H, W, dir);
  write_relu_masks(c, p, "feature_net_st.", "st", static_images, int(Vs), H, W, dir);

  // The rays and samples the step draws, and the target's data at them.
  const train::RayBatch rays =
      train::select_rays(s.target, c.N_rand, c.sample_mode, c.center_ratio, key, 0);
  const size_t R = size_t(c.N_rand), S = size_t(c.N_samples), K = flow_index.size();
  std::vector<float> depths(R * S);
  cpu::sample_coarse_depths(
      c.N_rand,
      DepthSampling{s.target.near_depth, s.target.far_depth, c.N_samples, c.inv_uniform, c.det},
      key, 0, depths.data());
  const data::FrameMotion& m = s.target.motion;
  NpyArray disparity{{R}, {}}, motion{{R}, {}}, static_mask{{R}, {}};
  NpyArray flows{{K, R, 2}, std::vector<double>(K * R * 2)},
      valid{{K, R}, std::vector<double>(K * R)};
  for (size_t r = 0; r < R; ++r) {
    const size_t i = size_t(rays.pixels[2 * r + 1]) * size_t(W) + size_t(rays.pixels[2 * r]);
    disparity.data.push_back(m.disparity[i]);
    motion.data.push_back(m.motion_mask[i]);
    static_mask.data.push_back(m.static_mask[i]);
    for (size_t k = 0; k < K; ++k) {
      const size_t at = size_t(flow_index[k]) * size_t(H * W) + i;
      flows.data[(k * R + r) * 2] = m.flow[2 * at];
      flows.data[(k * R + r) * 2 + 1] = m.flow[2 * at + 1];
      valid.data[k * R + r] = m.flow_valid[at];
    }
  }
  write_motion_masks(c, p, s.target, sets.anchor_time,
                     std::vector<int>(anchor_frames.begin(), anchor_frames.end()), rays.pixels,
                     depths, dir);
  test::write_npy(dir / "pixels.npy", floats({R, 2}, rays.pixels));
  test::write_npy(dir / "target_rgb.npy", floats({R, 3}, rays.target_rgb));
  test::write_npy(dir / "depths.npy", floats({R, S}, depths));
  test::write_npy(dir / "target_disparity.npy", disparity);
  test::write_npy(dir / "motion_mask.npy", motion);
  test::write_npy(dir / "static_mask.npy", static_mask);
  test::write_npy(dir / "target_flows.npy", flows);
  test::write_npy(dir / "flow_validity.npy", valid);

  const nn::ResUNetOptions features = train::dynibar_feature_net_options(c);
  const DynibarScheduleOptions schedule = train::dynibar_schedule_options(c);
  const nlohmann::json spec = {{"frame", s.target.time_index},
                               {"anchor_frame", sets.anchor_time},
                               {"num_frames", c.num_frames},
                               {"num_basis", c.num_basis},
                               {"widths", features.widths},
                               {"blocks", features.blocks},
                               {"coarse_feat_dim", c.coarse_feat_dim},
                               {"anti_alias_pooling", c.anti_alias_pooling},
                               {"shift", nn::AggregatorOptions{}.density_shift},
                               {"linear_operands",
                                c.precision == train::Precision::kBf16 ? "bf16" : "fp32"},
                               {"near", s.target.near_depth},
                               {"far", s.target.far_depth},
                               {"step", model.updates()},
                               {"schedule",
                                {{"num_frames", schedule.num_frames},
                                 {"init_decay_epoch", schedule.init_decay_epoch},
                                 {"decay_rate", schedule.decay_rate},
                                 {"w_disp", schedule.w_disp},
                                 {"w_flow", schedule.w_flow},
                                 {"w_cycle", schedule.w_cycle},
                                 {"cycle_factor", schedule.cycle_factor},
                                 {"anneal_cycle", schedule.anneal_cycle},
                                 {"w_reg", schedule.w_reg},
                                 {"w_skew_entropy", schedule.w_skew_entropy},
                                 {"w_distortion", schedule.w_distortion},
                                 {"lrate_feature", schedule.lrate_feature},
                                 {"lrate_mlp", schedule.lrate_mlp},
                                 {"lrate_decay_factor", schedule.lrate_decay_factor}}}};
  std::ofstream(dir / "case.json") << spec.dump();
}

}  // namespace mvibr::test
