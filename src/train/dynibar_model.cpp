// The DynIBaR model's CPU step (see dynibar_model.h). A micro-batch's forward keeps everything in
// one MicroBatch until end_step, which runs its backward with the whole batch's denominators.
#include "mvibr/train/dynibar_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "dynibar_device.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/geom/plucker.h"
#include "mvibr/nn/aggregator.h"
#include "mvibr/nn/dynibar_motion.h"
#include "mvibr/nn/motion_mlp.h"
#include "mvibr/nn/trajectory.h"
#include "mvibr/ops/render_ops.h"
#include "mvibr/render/dynibar_losses.h"
#include "mvibr/render/loss.h"
#include "mvibr/train/trainer.h"
#include "phase_laps.h"
#include "state_copies.h"

namespace mvibr::train {

TrainConfig with_video_frames(const TrainConfig& config) {
  if (config.model != ModelKind::kDynibar) return config;
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  int frames = 0;
  for (const data::View& view : index.scene.views) frames = std::max(frames, view.time_index + 1);
  if (!index.scene.dynamic || frames < 2) {
    throw InvalidArgument("model = dynibar: " + config.datadir +
                          " holds no video (a dynamic scene with motion data)");
  }
  if (config.num_frames != 0 && config.num_frames != frames) {
    throw InvalidArgument("config key 'num_frames': " + std::to_string(config.num_frames) +
                          ", but " + config.datadir + " holds a video of " +
                          std::to_string(frames) + " frames");
  }
  // The dynamic sources of a training frame (t +- 1..3, where they are training frames too) must
  // be in its source pool: a pool prepared for IBRNet holds only t +- 1.
  std::vector<int> training_view_at(size_t(frames), -1);
  for (size_t v = 0; v < index.scene.views.size(); ++v) {
    const data::View& view = index.scene.views[v];
    if (view.split == data::Split::kTrain) training_view_at[size_t(view.time_index)] = int(v);
  }
  for (size_t v = 0; v < index.scene.views.size(); ++v) {
    const data::View& view = index.scene.views[v];
    if (view.split != data::Split::kTrain) continue;
    const std::vector<int>& pool = index.scene.neighbours[v];
    for (int offset : data::kFlowOffsets) {
      const int f = view.time_index + offset;
      if (f < 0 || f >= frames || training_view_at[size_t(f)] < 0) continue;
      if (std::find(pool.begin(), pool.end(), training_view_at[size_t(f)]) == pool.end()) {
        throw InvalidArgument("model = dynibar: frame " + std::to_string(f) +
                              " is not among the sources of view " + view.name + " in " +
                              config.datadir + ": prepare the video with --time_window " +
                              std::to_string(config.max_range) + " --neighbours " +
                              std::to_string(2 * config.max_range) + " (max_range's reach)");
      }
    }
  }
  TrainConfig resolved = config;
  resolved.num_frames = frames;
  return resolved;
}

data::DynibarSourceOptions dynibar_source_options(const TrainConfig& c) {
  data::DynibarSourceOptions o;
  o.max_range = c.max_range;
  o.static_views = 2 * c.num_source_views;
  return o;
}

DynibarScheduleOptions dynibar_schedule_options(const TrainConfig& c) {
  DynibarScheduleOptions o;
  o.num_frames = c.num_frames;
  o.init_decay_epoch = c.init_decay_epoch;
  o.decay_rate = c.decay_rate;
  o.w_disp = c.w_disp;
  o.w_flow = c.w_flow;
  o.w_cycle = c.w_cycle;
  o.cycle_factor = c.cycle_factor;
  o.anneal_cycle = c.anneal_cycle;
  o.w_reg = c.w_reg;
  o.w_skew_entropy = c.w_skew_entropy;
  o.w_distortion = c.w_distortion;
  o.lrate_feature = c.lrate_feature;
  o.lrate_mlp = c.lrate_mlp;
  o.lrate_decay_factor = c.lrate_decay_factor;
  return o;
}

nn::ResUNetOptions dynibar_feature_net_options(const TrainConfig& c) {
  nn::ResUNetOptions o = nn::ResUNetOptions::preset(c.feature_net);
  o.conv_algorithm = c.conv_algorithm;
  o.coarse_out_ch = c.coarse_feat_dim;
  o.fine_out_ch = c.fine_feat_dim;
  o.coarse_only = false;  // DynIBaR's out_conv has both halves; only the coarse one is read
  o.shallow = true;
  o.widths[0] = o.out_channels();
  return o;
}

namespace {

constexpr int kMaxOffset = 3;  // the dynamic sources and trajectories reach t +- 3
// A sample counts for a render when this many views see it (DynIBaR: > 1 at the target's
// time, > 0 across time); a ray when more than 8 samples count.
constexpr RayMaskRule kSeenTwice{2, 9}, kSeenOnce{1, 9};

// The CPU networks' Linear operands: bf16 when the config asks for it (the GPU step has its own).
nn::Operands linear_operands(const TrainConfig& c) {
  return c.precision == Precision::kBf16 && !runs_on_device(c) ? nn::Operands::kBf16
                                                               : nn::Operands::kFp32;
}

nn::AggregatorOptions network_options(const TrainConfig& c, nn::AggregatorVariant variant) {
  nn::AggregatorOptions o;
  o.variant = variant;
  o.feature_channels = c.coarse_feat_dim;
  o.n_samples_max = c.N_samples;
  o.anti_alias_pooling = variant == nn::AggregatorVariant::kDynibarStatic && c.anti_alias_pooling;
  o.group = variant == nn::AggregatorVariant::kDynibarStatic ? nn::ParameterGroup::kStaticMlp
                                                             : nn::ParameterGroup::kMlp;
  o.linear_operands = linear_operands(c);
  return o;
}

nn::ResUNetOptions static_feature_net_options(const TrainConfig& c) {
  nn::ResUNetOptions o = dynibar_feature_net_options(c);
  o.group = nn::ParameterGroup::kStaticFeature;
  return o;
}

// One source set as the gathers read it: cameras, images and coarse feature maps, each set's
// views back to back.
struct SourceSet {
  std::vector<int> positions;  // in the sample's sources
  std::vector<int> frames;     // their time steps
  std::vector<PinholeCamera<float>> cameras;
  int first_map = 0;  // the set's first view in its feature network's maps
};

// sum_s w c of one component, [R,3], and its backward into w and c (+=).
void component_colour(int n_rays, int n_samples, const float* weights, const float* rgb,
                      float* out) {
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    float sum[3] = {0, 0, 0};
    for (size_t i = r * n_samples; i < (r + 1) * n_samples; ++i) {
      for (int c = 0; c < 3; ++c) sum[c] += weights[i] * rgb[3 * i + c];
    }
    std::copy(sum, sum + 3, out + 3 * r);
  }
}

void component_colour_backward(int n_rays, int n_samples, const float* weights, const float* rgb,
                               const float* grad_out, float* grad_weights, float* grad_rgb) {
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    const float* g = grad_out + 3 * r;
    for (size_t i = r * n_samples; i < (r + 1) * n_samples; ++i) {
      grad_weights[i] += g[0] * rgb[3 * i] + g[1] * rgb[3 * i + 1] + g[2] * rgb[3 * i + 2];
      for (int c = 0; c < 3; ++c) grad_rgb[3 * i + c] += weights[i] * g[c];
    }
  }
}

void add_to(std::vector<float>* sum, const std::vector<float>& x) {
  for (size_t i = 0; i < x.size(); ++i) (*sum)[i] += x[i];
}

// Points [O][R,S,3] laid out per view [R,S,V,3], view v reading points[index[v]].
void per_view(size_t points, const float* moved, const std::vector<int>& index, float* out) {
  const size_t V = index.size();
  for (size_t p = 0; p < points; ++p) {
    for (size_t v = 0; v < V; ++v) {
      std::copy_n(moved + (size_t(index[v]) * points + p) * 3, 3, out + (p * V + v) * 3);
    }
  }
}

// The backward of per_view: grad_moved[index[v]] += grad_out's view v.
void per_view_backward(size_t points, const float* grad_out, const std::vector<int>& index,
                       float* grad_moved) {
  const size_t V = index.size();
  for (size_t p = 0; p < points; ++p) {
    for (size_t v = 0; v < V; ++v) {
      for (int a = 0; a < 3; ++a) {
        grad_moved[(size_t(index[v]) * points + p) * 3 + a] += grad_out[(p * V + v) * 3 + a];
      }
    }
  }
}

// What the gather and a network compute for one source set.
struct Branch {
  std::vector<float> moved;  // [R,S,V,3], where each view reads each sample
  std::vector<float> rgb_features, ray_diff, mask, network_mask;
  std::vector<float> src_rays;  // [R,S,V,6] (the static network)
  std::vector<float> rgb, sigma;
  nn::AggregatorWorkspace<float> workspace;
  // Backward scratch.
  std::vector<float> grad_rgb, grad_sigma, grad_rgb_features, grad_moved, grad_xyz;
};

// The motion MLP runs on fixed chunks of rays in parallel (it has no threads of its own), each
// with its own workspace and, in the backward, its own gradient slot; the slots are added in
// chunk order, so the sums are the same bits for any number of threads.
constexpr int kMotionChunks = 8;
using MotionChunks = std::vector<nn::DynibarMotionWorkspace<float>>;

// Rays [first, end) of chunk c of n_rays.
std::pair<int, int> motion_chunk(int n_rays, int c) {
  return {n_rays * c / kMotionChunks, n_rays * (c + 1) / kMotionChunks};
}

// Everything a micro-batch's forward computes, for its backward in end_step.
struct MicroBatch {
  int index = 0;  // in the step (the device keeps each one's activations apart)
  int n_rays = 0;
  DynibarPhase phase = DynibarPhase::kMain;
  std::vector<float> pixels, target_rgb, disparity, flows, flow_valid, motion_mask, static_mask;
  std::vector<float> origins, directions, view_dirs, target_rays, depths, s_vals, points;
  std::vector<float> time_ref, time_anchor;
  // Motion at the target's time: moved_ref [O,R,S,3] at frames first_frame .. first_frame+O-1.
  MotionChunks motion_ref;
  std::vector<float> moved_ref;
  // Cross time: the anchor samples' motion, moved_anchor [Oa,R,S,3] at the anchor set's frames.
  MotionChunks motion_anchor;
  std::vector<float> moved_anchor;
  std::vector<int> cycle_views;  // the anchor views within the target's reach: the cycle pairs
  Branch static_branch, dynamic_branch, anchor_branch;
  // Renders at the target's time: the composite with its components, and each component alone.
  std::vector<float> rgb, rgb_static, rgb_dynamic, depth, weights, weights_static, weights_dynamic;
  std::vector<float> dynamic_only_rgb, dynamic_only_weights, static_only_rgb;
  std::vector<float> flow_points, render_flows;  // [K,R,S,3], [K,R,2]
  // Renders across time.
  std::vector<float> cross_rgb, cross_weights, cross_weights_dynamic;
  std::vector<float> cross_dynamic_only_rgb, cross_dynamic_only_weights;
  std::vector<float> occlusion_weights, occlusion_map, dynamic_only_occlusion_map;
  std::vector<float> points_traj_ref, points_traj_anchor, scene_flow;  // [P|F,R,S,3]
  // Ray masks.
  std::vector<float> ray_mask, dynamic_only_mask, cross_mask, cross_dynamic_only_mask,
      static_only_mask;
  DynibarLossBatch<float> loss_batch;
};

// Set `index` of point sets [N][R,S,3] of `points` points each.
const float* point_set(const std::vector<float>& sets, size_t index, size_t points) {
  return sets.data() + index * points * 3;
}

}  // namespace

struct DynibarModel::State : WithStateCopies<DynibarModel::State> {
  TrainConfig config;
  DynibarScheduleOptions schedule;
  nn::ParameterSet parameters;
  nn::ResUNet feature_net, feature_net_st;
  nn::IbrnetAggregator net_st, net_dy;
  nn::MotionMlp motion_mlp;
  nn::Parameter basis;
  nn::DynibarMotion motion;
  nn::Adam adam;
  // The networks' device copies when the config's device is CUDA (null: all on the CPU).
  std::unique_ptr<DynibarDeviceNetworks> device;
  // The step's sample.
  const data::TrainingSample* sample = nullptr;
  int frame = 0, anchor_frame = -1;
  int first_frame = 0, n_ref_frames = 0;  // the target's trajectory frames t + lo .. t + hi
  SourceSet dynamic, anchor, statics;
  std::vector<int> flow_offsets;  // kFlowOffsets' index of each dynamic view
  // Where each dynamic view reads: its frame's set in a micro-batch's moved_ref; the anchor
  // views' sets in moved_anchor, in order.
  std::vector<int> dynamic_index, anchor_index;
  std::vector<float> dynamic_images, static_images;  // [V,H,W,3], the dynamic then anchor sets
  int height = 0, width = 0, map_height = 0, map_width = 0;
  std::vector<float> dynamic_maps, static_maps, grad_dynamic_maps, grad_static_maps;
  nn::ResUNet::Workspace dynamic_workspace, static_workspace;
  DynibarLossWeights weights;
  std::vector<MicroBatch> batches;
  size_t used_batches = 0;
  PhaseTimes times;
  PhaseLaps laps;

  explicit State(const TrainConfig& c)
      : config(c),
        schedule(dynibar_schedule_options(c)),
        feature_net(dynibar_feature_net_options(c), &parameters, "feature_net."),
        feature_net_st(static_feature_net_options(c), &parameters, "feature_net_st."),
        net_st(parameters, "net_coarse_st.",
               network_options(c, nn::AggregatorVariant::kDynibarStatic)),
        net_dy(parameters, "net_coarse_dy.",
               network_options(c, nn::AggregatorVariant::kDynibarDynamic)),
        motion_mlp(parameters, "motion_mlp.", motion_options(c)),
        basis(parameters.add("trajectory_basis", {c.num_frames, c.num_basis},
                             nn::ParameterGroup::kTrajectoryBasis)),
        motion(motion_mlp, c.num_frames),
        adam(parameters, dynibar_adam(c, adam_options(c, 1))) {
    if (runs_on_device(c)) {
      device = make_dynibar_device_networks(
          c, DynibarNetworks{feature_net, feature_net_st, net_st, net_dy, motion_mlp});
      copies = StateCopies(device.get(), &parameters, &adam);
    }
  }

  ParameterRange basis_range() const {
    return {parameters.info(basis).offset, parameters.info(basis).size};
  }

  static nn::MotionMlpOptions motion_options(const TrainConfig& c) {
    nn::MotionMlpOptions o;
    o.basis = c.num_basis;
    o.linear_operands = linear_operands(c);
    return o;
  }

  // DynibarMono's groups and schedule on top of `o`, whose rates (the trainer's, scaled for the
  // ranks when lr_scaling asks) the schedule decays.
  static nn::AdamOptions dynibar_adam(const TrainConfig& c, nn::AdamOptions o) {
    DynibarScheduleOptions schedule = dynibar_schedule_options(c);
    schedule.lrate_feature = o.lrate_feature;
    schedule.lrate_mlp = o.lrate_mlp;
    schedule.lrate_decay_factor = o.lrate_decay_factor;
    o.static_rate_multiplier = kDynibarStaticRateMultiplier;
    o.basis_rate_multiplier = kDynibarBasisRateMultiplier;
    o.schedule = [schedule](double initial, uint64_t completed) {
      return dynibar_learning_rate(initial, int64_t(completed), schedule);
    };
    return o;
  }

  const float* values(size_t offset) const { return parameters.values().data() + offset; }
  float* grads(size_t offset) { return parameters.grads().data() + offset; }
  const float* basis_values() const { return parameters.value(basis); }

  size_t map_size() const { return size_t(map_height) * map_width * config.coarse_feat_dim; }
  // The set's first map in its feature network's maps (or their gradients).
  size_t map_offset(const SourceSet& set) const { return size_t(set.first_map) * map_size(); }

  SourceViews<float> views(const SourceSet& set, bool static_set) const {
    SourceViews<float> v;
    v.n_views = int(set.positions.size());
    v.cameras = set.cameras.data();
    v.image_height = height;
    v.image_width = width;
    const size_t image = size_t(height) * width * 3;
    v.images = (static_set ? static_images : dynamic_images).data() + set.first_map * image;
    v.feature_height = map_height;
    v.feature_width = map_width;
    v.feature_channels = config.coarse_feat_dim;
    const std::vector<float>& maps = static_set ? static_maps : dynamic_maps;
    v.features = maps.empty() ? nullptr : maps.data() + map_offset(set);
    if (maps.empty()) v.feature_channels = 0;  // the bootstrap reads only where views see
    return v;
  }

  // The sample's source sets, images and feature maps; `training` keeps the feature networks'
  // workspaces and zeroes the gradients. `dynamic_features`: whether the dynamic sets need maps.
  void prepare(const data::TrainingSample& s, bool training, bool dynamic_features);

  // One micro-batch's forward (training: everything its backward needs) on `pixels`.
  void forward(MicroBatch* b, RandomKey key, uint32_t first_ray, bool training);
  void backward(MicroBatch* b, const DynibarLossFractions& whole);
  // Cross-time rendering at the anchor's frame and the cycle pairs; returns their count.
  int cross_time_forward(MicroBatch* b);
  // DynibarMotion on chunks of rays: points [R,S,3] -> moved [O,R,S,3], and the backward from
  // grad_moved [O,R,S,3] into the MLP's and the basis's gradients and grad_points (nullable).
  // `run` names the device's buffers for micro-batch `batch`.
  void motion_forward(int batch, DynibarMotionRun run, int n_rays, const float* points, float time,
                      int from_frame, const std::vector<int>& to_frames, float* moved,
                      MotionChunks* chunks);
  void motion_backward(int batch, DynibarMotionRun run, const MotionChunks& chunks, int n_rays,
                       const float* grad_moved, float* grad_points);

  // Rays, samples and, when training, the target's motion data at the pixels.
  void ray_inputs(MicroBatch* b, RandomKey key, uint32_t first_ray, bool training);
  // A branch's gather of `set` (br->moved filled) and, with `network`, its network on the
  // samples at `xyz` (and `time`, dynamic): br's rgb, sigma and mask.
  void run_branch(DynibarBranch which, Branch* br, MicroBatch* b, const SourceSet& set,
                  const float* xyz, const float* time, bool training, bool network);
  // Its backward from br's grad_rgb and grad_sigma into the parameters and the maps, and into
  // br->grad_moved and br->grad_xyz when asked.
  void branch_backward(DynibarBranch which, Branch* br, MicroBatch* b, const SourceSet& set,
                       bool moved_gradient, bool xyz_gradient);
  void gather(Branch* br, MicroBatch* b, const SourceSet& set, bool static_set);
  void run_network(const nn::IbrnetAggregator& net, Branch* br, MicroBatch* b, const float* xyz,
                   const float* time, bool training);
};

void DynibarModel::State::prepare(const data::TrainingSample& s, bool training,
                                  bool dynamic_features) {
  if (!s.dynibar) {
    throw InvalidArgument("model = dynibar: the sample of view " + s.target.name +
                          " has no DynIBaR source sets (a reader without dynibar_sources)");
  }
  if (training && s.target.motion.empty()) {
    throw InvalidArgument("model = dynibar: view " + s.target.name +
                          " has no motion data (flows, disparity, masks): prepare a dynamic scene");
  }
  const data::DynibarSourceSets& sets = *s.dynibar;
  frame = s.target.time_index;
  if (frame < 0 || frame >= config.num_frames) {
    throw InvalidArgument("model = dynibar: view " + s.target.name + " is frame " +
                          std::to_string(frame) +
                          ", outside num_frames = " + std::to_string(config.num_frames));
  }
  height = s.target.camera.height;
  width = s.target.camera.width;
  const auto fill = [&](SourceSet* set, const std::vector<int>& positions, int first_map) {
    set->positions = positions;
    set->frames.clear();
    set->cameras.clear();
    for (int p : positions) {
      const data::View& view = s.sources.at(size_t(p));
      if (view.time_index < 0 || view.time_index >= config.num_frames) {
        throw InvalidArgument("model = dynibar: source " + view.name + " is frame " +
                              std::to_string(view.time_index) +
                              ", outside num_frames = " + std::to_string(config.num_frames));
      }
      set->frames.push_back(view.time_index);
      set->cameras.push_back(camera_cast<float>(view.camera));
    }
    set->first_map = first_map;
  };
  std::vector<int> dynamic_positions;
  flow_offsets.clear();
  for (int k = 0; k < data::kFlowCount; ++k) {
    if (sets.dynamic[size_t(k)] < 0) continue;
    dynamic_positions.push_back(sets.dynamic[size_t(k)]);
    flow_offsets.push_back(k);
  }
  // Evaluation's frame at the target's own time reads the samples where they are; it has no flow.
  if (sets.same_time >= 0) dynamic_positions.push_back(sets.same_time);
  if (dynamic_positions.empty() || sets.static_views.empty()) {
    throw InvalidArgument("model = dynibar: view " + s.target.name +
                          " lacks dynamic or static sources (a video of too few frames)");
  }
  fill(&dynamic, dynamic_positions, 0);
  fill(&anchor, sets.anchor, int(dynamic_positions.size()));
  fill(&statics, sets.static_views, 0);
  // No anchor (its neighbours in time held out or past the video's ends): no cross-time pass.
  anchor_frame = sets.anchor.empty() ? -1 : sets.anchor_time;
  const int lo = std::max(-kMaxOffset, -frame),
            hi = std::min(kMaxOffset, config.num_frames - 1 - frame);
  first_frame = frame + lo;
  n_ref_frames = hi - lo + 1;
  dynamic_index.clear();
  for (int f : dynamic.frames) dynamic_index.push_back(f - first_frame);
  anchor_index.resize(anchor.frames.size());
  std::iota(anchor_index.begin(), anchor_index.end(), 0);
  // Images as floats; the static set's moving pixels black (DynIBaR's mask_src_view).
  const size_t pixels = size_t(height) * width;
  const auto load = [&](const SourceSet& set, bool black_out_motion, std::vector<float>* images,
                        size_t first) {
    for (size_t v = 0; v < set.positions.size(); ++v) {
      const data::View& view = s.sources[size_t(set.positions[v])];
      if (view.camera.height != height || view.camera.width != width) {
        throw InvalidArgument("model = dynibar: source " + view.name + " differs in size from " +
                              s.target.name);
      }
      if (black_out_motion && view.motion.motion_mask.size() != pixels) {
        throw InvalidArgument("model = dynibar: static source " + view.name +
                              " has no motion mask");
      }
      float* out = images->data() + (first + v) * pixels * 3;
      for (size_t i = 0; i < pixels; ++i) {
        const float keep = black_out_motion ? float(1 - view.motion.motion_mask[i]) : 1.0f;
        for (int c = 0; c < 3; ++c) out[3 * i + c] = float(view.rgb[3 * i + c]) / 255.0f * keep;
      }
    }
  };
  const size_t n_dynamic = dynamic.positions.size() + anchor.positions.size();
  dynamic_images.resize(n_dynamic * pixels * 3);
  load(dynamic, false, &dynamic_images, 0);
  load(anchor, false, &dynamic_images, dynamic.positions.size());
  static_images.resize(statics.positions.size() * pixels * 3);
  load(statics, true, &static_images, 0);
  std::tie(map_height, map_width) = nn::ResUNet::output_size(height, width, true);
  if (device) {
    copies.send();
    if (training) {
      device->zero_gradients();
      copies.stepped();
      // The one gradient the host computes, which end_step adds into the device's.
      std::fill_n(parameters.grad(basis), parameters.info(basis).size, 0.0f);
    }
    device->set_images(DynibarSet::kStatic, int(statics.positions.size()), height, width,
                       static_images.data());
    device->features(DynibarSet::kStatic, training);
    device->set_images(DynibarSet::kDynamic, int(n_dynamic), height, width, dynamic_images.data());
    if (dynamic_features) device->features(DynibarSet::kDynamic, training);
    return;
  }
  const size_t map = map_size();
  static_maps.resize(statics.positions.size() * map);
  feature_net_st.forward(int(statics.positions.size()), height, width, static_images.data(),
                         &static_workspace, static_maps.data(), nullptr);
  dynamic_maps.resize(dynamic_features ? n_dynamic * map : 0);
  if (dynamic_features) {
    feature_net.forward(int(n_dynamic), height, width, dynamic_images.data(), &dynamic_workspace,
                        dynamic_maps.data(), nullptr);
  }
  if (!training) return;
  parameters.zero_grads();
  grad_static_maps.assign(static_maps.size(), 0.0f);
  grad_dynamic_maps.assign(dynamic_maps.size(), 0.0f);
}

void DynibarModel::State::ray_inputs(MicroBatch* b, RandomKey key, uint32_t first_ray,
                                     bool training) {
  const data::View& target = sample->target;
  const int R = b->n_rays, S = config.N_samples;
  const size_t rays = size_t(R), pixels = size_t(height) * width;
  const data::FrameMotion& m = target.motion;
  const int K = int(flow_offsets.size());
  b->disparity.resize(rays);
  b->motion_mask.resize(rays);
  b->static_mask.resize(rays);
  b->flows.resize(size_t(K) * rays * 2);
  b->flow_valid.resize(size_t(K) * rays);
  for (size_t r = 0; r < rays && training; ++r) {
    const size_t i = size_t(b->pixels[2 * r + 1]) * width + size_t(b->pixels[2 * r]);
    b->disparity[r] = m.disparity[i];
    b->motion_mask[r] = float(m.motion_mask[i]);
    b->static_mask[r] = float(m.static_mask[i]);
    for (int k = 0; k < K; ++k) {
      const size_t at = size_t(flow_offsets[size_t(k)]) * pixels + i;
      b->flows[(size_t(k) * rays + r) * 2] = m.flow[2 * at];
      b->flows[(size_t(k) * rays + r) * 2 + 1] = m.flow[2 * at + 1];
      b->flow_valid[size_t(k) * rays + r] = float(m.flow_valid[at]);
    }
  }
  b->origins.resize(rays * 3);
  b->directions.resize(rays * 3);
  cpu::generate_rays(camera_cast<float>(target.camera), b->pixels.data(), R, b->origins.data(),
                     b->directions.data());
  b->view_dirs.resize(rays * 3);
  b->target_rays.resize(rays * 6);
  for (size_t r = 0; r < rays; ++r) {
    const Vec3<float> o{b->origins[3 * r], b->origins[3 * r + 1], b->origins[3 * r + 2]};
    const Vec3<float> d{b->directions[3 * r], b->directions[3 * r + 1], b->directions[3 * r + 2]};
    plucker_coordinates(o, d, b->target_rays.data() + 6 * r);
    std::copy_n(b->target_rays.data() + 6 * r, 3, b->view_dirs.data() + 3 * r);
  }
  const size_t samples = rays * S;
  b->depths.resize(samples);
  cpu::sample_coarse_depths(
      R, DepthSampling{target.near_depth, target.far_depth, S, config.inv_uniform, config.det}, key,
      first_ray, b->depths.data());
  // Mip-NeRF 360's normalised distance (render_ray.py's z_to_s), for the distortion loss.
  b->s_vals.resize(samples);
  const double inv_near = 1 / target.near_depth, inv_far = 1 / target.far_depth;
  for (size_t i = 0; i < samples; ++i) {
    b->s_vals[i] = float((1 / double(b->depths[i]) - inv_near) / (inv_far - inv_near));
  }
  b->points.resize(samples * 3);
  for (size_t r = 0; r < rays; ++r) {
    for (size_t s = 0; s < size_t(S); ++s) {
      const float z = b->depths[r * S + s];
      for (int a = 0; a < 3; ++a) {
        b->points[(r * S + s) * 3 + a] = b->origins[3 * r + a] + z * b->directions[3 * r + a];
      }
    }
  }
  const auto time_of = [&](int f) { return float(double(f) / double(config.num_frames)); };
  b->time_ref.assign(rays, time_of(frame));
  b->time_anchor.assign(rays, time_of(std::max(anchor_frame, 0)));
}

void DynibarModel::State::run_branch(DynibarBranch which, Branch* br, MicroBatch* b,
                                     const SourceSet& set, const float* xyz, const float* time,
                                     bool training, bool network) {
  const bool is_static = which == DynibarBranch::kStatic;
  if (!device) {
    gather(br, b, set, is_static);
    laps.to(&times.gather_forward);
    if (network) {
      run_network(is_static ? net_st : net_dy, br, b, xyz, time, training);
      laps.to(&times.aggregator_forward);
    }
    return;
  }
  const int R = b->n_rays, S = config.N_samples, V = int(set.positions.size());
  const size_t samples = size_t(R) * size_t(S);
  DynibarBranchInputs in;
  in.n_rays = R;
  in.n_samples = S;
  in.n_views = V;
  in.points = b->points.data();
  in.moved = br->moved.data();
  in.cameras = set.cameras.data();
  in.first_view = set.first_map;
  in.target_center = camera_cast<float>(sample->target.camera).center();
  in.network.xyz = xyz;
  in.network.src_rays = br->src_rays.data();
  in.network.target_rays = b->target_rays.data();
  in.network.time = time;
  in.network.view_dir = b->view_dirs.data();
  br->rgb.resize(network ? samples * 3 : 0);
  br->sigma.resize(network ? samples : 0);
  br->mask.resize(samples * size_t(V));
  device->branch_forward(b->index, which, in, training, network ? br->rgb.data() : nullptr,
                         network ? br->sigma.data() : nullptr, br->mask.data());
  laps.to(&times.aggregator_forward);
}

void DynibarModel::State::branch_backward(DynibarBranch which, Branch* br, MicroBatch* b,
                                          const SourceSet& set, bool moved_gradient,
                                          bool xyz_gradient) {
  const bool is_static = which == DynibarBranch::kStatic;
  br->grad_moved.resize(moved_gradient ? br->moved.size() : 0);
  br->grad_xyz.resize(xyz_gradient ? size_t(b->n_rays) * config.N_samples * 3 : 0);
  float* grad_moved = moved_gradient ? br->grad_moved.data() : nullptr;
  float* grad_xyz = xyz_gradient ? br->grad_xyz.data() : nullptr;
  if (device) {
    device->branch_backward(b->index, which, br->grad_rgb.data(), br->grad_sigma.data(), grad_moved,
                            grad_xyz);
    laps.to(&times.aggregator_backward);
    return;
  }
  br->grad_rgb_features.resize(br->rgb_features.size());
  (is_static ? net_st : net_dy)
      .backward(br->workspace, br->grad_rgb.data(), br->grad_sigma.data(),
                br->grad_rgb_features.data(), grad_xyz);
  laps.to(&times.aggregator_backward);
  std::vector<float>& maps = is_static ? grad_static_maps : grad_dynamic_maps;
  cpu::gather_moved_samples_backward(b->n_rays, config.N_samples, br->moved.data(),
                                     views(set, is_static), br->grad_rgb_features.data(),
                                     grad_moved, static_cast<float*>(nullptr),
                                     maps.empty() ? nullptr : maps.data() + map_offset(set));
  laps.to(&times.gather_backward);
}

void DynibarModel::State::gather(Branch* br, MicroBatch* b, const SourceSet& set, bool static_set) {
  const int R = b->n_rays, S = config.N_samples, V = int(set.positions.size());
  const SourceViews<float> v = views(set, static_set);
  const size_t rows = size_t(R) * S * V;
  br->rgb_features.resize(rows * (3 + v.feature_channels));
  br->ray_diff.resize(rows * 4);
  br->mask.resize(rows);
  const Vec3<float> center = camera_cast<float>(sample->target.camera).center();
  cpu::gather_moved_samples(
      R, S, b->points.data(), br->moved.data(), center, v,
      GatherOutputs<float>{br->rgb_features.data(), br->ray_diff.data(), br->mask.data()});
}

void DynibarModel::State::run_network(const nn::IbrnetAggregator& net, Branch* br, MicroBatch* b,
                                      const float* xyz, const float* time, bool training) {
  const int R = b->n_rays, S = config.N_samples;
  const int V = int(br->mask.size() / (size_t(R) * S));
  nn::AggregatorInputs<float> in;
  in.rgb_features = br->rgb_features.data();
  in.ray_diff = br->ray_diff.data();
  in.xyz = xyz;
  if (net.variant() == nn::AggregatorVariant::kDynibarStatic) {
    // DynIBaR's mask_rgb: black views (moving pixels blacked out) do not count.
    br->network_mask.resize(br->mask.size());
    cpu::mask_unseen_colours(br->mask.size(), 3 + config.coarse_feat_dim, br->rgb_features.data(),
                             br->mask.data(), br->network_mask.data());
    in.mask = br->network_mask.data();
    in.src_rays = br->src_rays.data();
    in.target_rays = b->target_rays.data();
  } else {
    in.mask = br->mask.data();
    in.time = time;
    in.view_dir = b->view_dirs.data();
  }
  br->rgb.resize(size_t(R) * S * 3);
  br->sigma.resize(size_t(R) * S);
  net.forward(R, S, V, in, training ? &br->workspace : nullptr, br->rgb.data(), br->sigma.data());
}

namespace {

// A branch's ray mask [R] under `rule`.
void ray_mask(int n_rays, int n_samples, const Branch& branch, RayMaskRule rule,
              std::vector<float>* out) {
  out->resize(size_t(n_rays));
  const int views = int(branch.mask.size() / (size_t(n_rays) * size_t(n_samples)));
  cpu::ray_mask(n_rays, n_samples, views, branch.mask.data(), rule, out->data());
}

// OR of two ray masks, into the first.
void either(std::vector<float>* a, const std::vector<float>& b) {
  for (size_t i = 0; i < a->size(); ++i) (*a)[i] = ((*a)[i] != 0 || b[i] != 0) ? 1.0f : 0.0f;
}

}  // namespace

void DynibarModel::State::forward(MicroBatch* b, RandomKey key, uint32_t first_ray, bool training) {
  const int R = b->n_rays, S = config.N_samples;
  const size_t rays = size_t(R), samples = rays * S, points = samples;
  const bool main = b->phase == DynibarPhase::kMain || !training;
  ray_inputs(b, key, first_ray, training);
  laps.to(&times.sampling);
  // The samples' motion at the target's time, to frames t + lo .. t + hi.
  std::vector<int> ref_frames;
  for (int o = 0; o < n_ref_frames; ++o) ref_frames.push_back(first_frame + o);
  b->moved_ref.resize(size_t(n_ref_frames) * points * 3);
  motion_forward(b->index, DynibarMotionRun::kReference, R, b->points.data(), b->time_ref[0], frame,
                 ref_frames, b->moved_ref.data(), &b->motion_ref);
  laps.to(&times.motion_forward);
  // The static branch: every static view reads the sample where it is.
  Branch& st = b->static_branch;
  const int Vs = int(statics.positions.size());
  st.moved.resize(points * Vs * 3);
  per_view(points, b->points.data(), std::vector<int>(size_t(Vs), 0), st.moved.data());
  st.src_rays.resize(points * Vs * 6);
  for (size_t p = 0; p < points; ++p) {
    const Vec3<float> x{b->points[3 * p], b->points[3 * p + 1], b->points[3 * p + 2]};
    for (int v = 0; v < Vs; ++v) {
      source_plucker_coordinates(statics.cameras[size_t(v)].center(), x,
                                 st.src_rays.data() + (p * Vs + v) * 6);
    }
  }
  // The dynamic branch: view v reads the sample where it has moved to by v's frame.
  Branch& dy = b->dynamic_branch;
  dy.moved.resize(points * dynamic_index.size() * 3);
  per_view(points, b->moved_ref.data(), dynamic_index, dy.moved.data());
  laps.to(&times.gather_forward);
  run_branch(DynibarBranch::kStatic, &st, b, statics, b->points.data(), nullptr, training, true);
  run_branch(DynibarBranch::kDynamic, &dy, b, dynamic, b->points.data(), b->time_ref.data(),
             training, main);
  // Ray masks: samples seen by two views, rays with more than 8 of them.
  ray_mask(R, S, st, kSeenTwice, &b->static_only_mask);
  ray_mask(R, S, dy, kSeenTwice, &b->dynamic_only_mask);
  b->ray_mask = b->dynamic_only_mask;
  either(&b->ray_mask, b->static_only_mask);
  DynibarLossBatch<float>& lb = b->loss_batch;
  lb = DynibarLossBatch<float>{};
  lb.n_rays = R;
  lb.n_samples = S;
  lb.target_rgb = b->target_rgb.data();
  lb.static_mask = b->static_mask.data();
  lb.ray_mask = b->ray_mask.data();
  b->static_only_rgb.resize(rays * 3);
  cpu::composite_dynamic_rays(
      R, S, DynamicComposite::kStaticOnly,
      DynamicSamples<const float>{st.sigma.data(), st.rgb.data(), nullptr, nullptr},
      b->depths.data(), DynamicRenders<float>{b->static_only_rgb.data()});
  lb.rendered.static_only_rgb = b->static_only_rgb.data();
  if (!main) {
    laps.to(&times.composite_loss);
    return;
  }
  // The composite at the target's time, its components and the dynamic component alone.
  b->rgb.resize(rays * 3);
  b->depth.resize(rays);
  b->weights.resize(samples);
  b->weights_static.resize(samples);
  b->weights_dynamic.resize(samples);
  const DynamicSamples<const float> both{st.sigma.data(), st.rgb.data(), dy.sigma.data(),
                                         dy.rgb.data()};
  cpu::composite_dynamic_rays(
      R, S, DynamicComposite::kBoth, both, b->depths.data(),
      DynamicRenders<float>{b->rgb.data(), b->depth.data(), b->weights.data(),
                            b->weights_static.data(), b->weights_dynamic.data()});
  b->rgb_static.resize(rays * 3);
  b->rgb_dynamic.resize(rays * 3);
  component_colour(R, S, b->weights_static.data(), st.rgb.data(), b->rgb_static.data());
  component_colour(R, S, b->weights_dynamic.data(), dy.rgb.data(), b->rgb_dynamic.data());
  b->dynamic_only_rgb.resize(rays * 3);
  b->dynamic_only_weights.resize(samples);
  cpu::composite_dynamic_rays(
      R, S, DynamicComposite::kDynamicOnly,
      DynamicSamples<const float>{nullptr, nullptr, dy.sigma.data(), dy.rgb.data()},
      b->depths.data(),
      DynamicRenders<float>{b->dynamic_only_rgb.data(), nullptr, b->dynamic_only_weights.data()});
  // The rendered flow to each dynamic view's frame.
  const int K = int(flow_offsets.size());
  b->flow_points.resize(size_t(K) * points * 3);
  for (int k = 0; k < K; ++k) {
    const float* from = point_set(b->moved_ref, size_t(dynamic_index[size_t(k)]), points);
    std::copy(from, from + points * 3, b->flow_points.data() + size_t(k) * points * 3);
  }
  b->render_flows.resize(size_t(K) * rays * 2);
  cpu::render_flows(R, S, K, b->weights.data(), b->flow_points.data(), dynamic.cameras.data(),
                    b->pixels.data(), b->render_flows.data());
  laps.to(&times.composite_loss);
  if (!training) return;
  const bool cross_time = anchor_frame >= 0;
  const int pairs = cross_time ? cross_time_forward(b) : 0;
  // The scene flow between consecutive frames of the target's reach.
  const int F = n_ref_frames - 1;
  b->scene_flow.resize(size_t(F) * points * 3);
  for (size_t f = 0; f < size_t(F); ++f) {
    for (size_t i = 0; i < points * 3; ++i) {
      b->scene_flow[f * points * 3 + i] =
          b->moved_ref[(f + 1) * points * 3 + i] - b->moved_ref[f * points * 3 + i];
    }
  }
  lb.n_flows = K;
  lb.n_cycle_pairs = pairs;
  lb.n_scene_flows = F;
  lb.target_disparity = b->disparity.data();
  lb.target_flows = b->flows.data();
  lb.flow_validity = b->flow_valid.data();
  lb.motion_mask = b->motion_mask.data();
  lb.dynamic_only_ray_mask = b->dynamic_only_mask.data();
  lb.s_vals = b->s_vals.data();
  lb.cross_time = cross_time;
  DynibarRendered<const float>& out = lb.rendered;
  out.rgb = b->rgb.data();
  out.rgb_static = b->rgb_static.data();
  out.rgb_dynamic = b->rgb_dynamic.data();
  out.depth = b->depth.data();
  out.weights = b->weights.data();
  out.weights_static = b->weights_static.data();
  out.weights_dynamic = b->weights_dynamic.data();
  out.render_flows = b->render_flows.data();
  out.dynamic_only_rgb = b->dynamic_only_rgb.data();
  out.scene_flow = b->scene_flow.data();
  if (cross_time) {
    lb.cross_time_ray_mask = b->cross_mask.data();
    lb.cross_time_dynamic_only_ray_mask = b->cross_dynamic_only_mask.data();
    lb.cross_time_occlusion_map = b->occlusion_map.data();
    lb.cross_time_dynamic_only_occlusion_map = b->dynamic_only_occlusion_map.data();
    lb.occlusion_weights = b->occlusion_weights.data();
    out.cross_time_rgb = b->cross_rgb.data();
    out.points_ref = b->points_traj_ref.data();
    out.points_anchor = b->points_traj_anchor.data();
    out.cross_time_dynamic_only_rgb = b->cross_dynamic_only_rgb.data();
  }
  laps.to(&times.composite_loss);
}

void DynibarModel::State::motion_forward(int batch, DynibarMotionRun run, int n_rays,
                                         const float* points, float time, int from_frame,
                                         const std::vector<int>& to_frames, float* moved,
                                         MotionChunks* chunks) {
  if (device) {  // one chunk: the whole batch at once
    chunks->resize(1);
    motion.forward(device->motion_mlp(batch, run), basis_values(), n_rays, config.N_samples, points,
                   time, from_frame, to_frames, moved, &chunks->front());
    return;
  }
  const size_t S = size_t(config.N_samples), O = to_frames.size();
  const size_t points_total = size_t(n_rays) * S;
  chunks->resize(kMotionChunks);
  const float* mlp = values(motion_mlp.parameter_offset());
  const nn::FrozenWeights frozen(mlp, motion_mlp.parameter_count());
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < kMotionChunks; ++c) {
    const auto [first, end] = motion_chunk(n_rays, c);
    const size_t n = size_t(end - first) * S, at = size_t(first) * S;
    std::vector<float> chunk_moved(O * n * 3);
    if (end == first) continue;
    motion.forward(mlp, basis_values(), end - first, int(S), points + 3 * at, time, from_frame,
                   to_frames, chunk_moved.data(), &(*chunks)[size_t(c)]);
    for (size_t o = 0; o < O; ++o) {
      std::copy_n(chunk_moved.data() + o * n * 3, n * 3, moved + (o * points_total + at) * 3);
    }
  }
}

void DynibarModel::State::motion_backward(int batch, DynibarMotionRun run,
                                          const MotionChunks& chunks, int n_rays,
                                          const float* grad_moved, float* grad_points) {
  if (device) {
    motion.backward(device->motion_mlp(batch, run), basis_values(), parameters.grad(basis),
                    chunks.front(), grad_moved, grad_points);
    return;
  }
  const size_t S = size_t(config.N_samples), points_total = size_t(n_rays) * S;
  const size_t mlp_count = motion_mlp.parameter_count();
  const size_t basis_count = parameters.info(basis).size, slot = mlp_count + basis_count;
  std::vector<float> slots(size_t(kMotionChunks) * slot, 0.0f);
  const float* mlp = values(motion_mlp.parameter_offset());
  const nn::FrozenWeights frozen(mlp, motion_mlp.parameter_count());
#pragma omp parallel for schedule(dynamic, 1)
  for (int c = 0; c < kMotionChunks; ++c) {
    const auto [first, end] = motion_chunk(n_rays, c);
    const size_t n = size_t(end - first) * S, at = size_t(first) * S;
    if (end == first) continue;
    const nn::DynibarMotionWorkspace<float>& ws = chunks[size_t(c)];
    const size_t O = ws.to_frames.size();
    std::vector<float> chunk_grad(O * n * 3);
    for (size_t o = 0; o < O; ++o) {
      std::copy_n(grad_moved + (o * points_total + at) * 3, n * 3, chunk_grad.data() + o * n * 3);
    }
    float* grads_c = slots.data() + size_t(c) * slot;
    motion.backward(mlp, grads_c, basis_values(), grads_c + mlp_count, ws, chunk_grad.data(),
                    grad_points ? grad_points + 3 * at : nullptr);
  }
  float* mlp_grads = grads(motion_mlp.parameter_offset());
  float* basis_grads = parameters.grad(basis);
  for (int c = 0; c < kMotionChunks; ++c) {
    const float* from = slots.data() + size_t(c) * slot;
    for (size_t i = 0; i < mlp_count; ++i) mlp_grads[i] += from[i];
    for (size_t i = 0; i < basis_count; ++i) basis_grads[i] += from[mlp_count + i];
  }
}

int DynibarModel::State::cross_time_forward(MicroBatch* b) {
  // The samples moved to the anchor's frame, their motion there, the
  // dynamic network at the anchor's time on the anchor's sources.
  const int R = b->n_rays, S = config.N_samples;
  const size_t rays = size_t(R), samples = rays * S, points = samples;
  const Branch& st = b->static_branch;
  const float* anchor_points = point_set(b->moved_ref, size_t(anchor_frame - first_frame), points);
  b->moved_anchor.resize(anchor.frames.size() * points * 3);
  motion_forward(b->index, DynibarMotionRun::kAnchor, R, anchor_points, b->time_anchor[0],
                 anchor_frame, anchor.frames, b->moved_anchor.data(), &b->motion_anchor);
  laps.to(&times.motion_forward);
  Branch& an = b->anchor_branch;
  an.moved.resize(points * anchor_index.size() * 3);
  per_view(points, b->moved_anchor.data(), anchor_index, an.moved.data());
  laps.to(&times.gather_forward);
  run_branch(DynibarBranch::kAnchor, &an, b, anchor, anchor_points, b->time_anchor.data(), true,
             true);
  b->cross_rgb.resize(rays * 3);
  b->cross_weights.resize(samples);
  b->cross_weights_dynamic.resize(samples);
  cpu::composite_dynamic_rays(
      R, S, DynamicComposite::kBoth,
      DynamicSamples<const float>{st.sigma.data(), st.rgb.data(), an.sigma.data(), an.rgb.data()},
      b->depths.data(),
      DynamicRenders<float>{b->cross_rgb.data(), nullptr, b->cross_weights.data(), nullptr,
                            b->cross_weights_dynamic.data()});
  b->cross_dynamic_only_rgb.resize(rays * 3);
  b->cross_dynamic_only_weights.resize(samples);
  cpu::composite_dynamic_rays(
      R, S, DynamicComposite::kDynamicOnly,
      DynamicSamples<const float>{nullptr, nullptr, an.sigma.data(), an.rgb.data()},
      b->depths.data(),
      DynamicRenders<float>{b->cross_dynamic_only_rgb.data(), nullptr,
                            b->cross_dynamic_only_weights.data()});
  ray_mask(R, S, an, kSeenOnce, &b->cross_dynamic_only_mask);
  b->cross_mask = b->cross_dynamic_only_mask;
  either(&b->cross_mask, b->static_only_mask);
  // Occlusion weights (no gradient; occ_weights_mode 0): across one frame the composites'
  // weights, across more the dynamic components'.
  const bool adjacent = std::abs(anchor_frame - frame) <= 1;
  const std::vector<float>& ref_w = adjacent ? b->weights : b->weights_dynamic;
  const std::vector<float>& cross_w = adjacent ? b->cross_weights : b->cross_weights_dynamic;
  b->occlusion_weights.resize(samples);
  b->occlusion_map.resize(rays);
  b->dynamic_only_occlusion_map.resize(rays);
  for (size_t r = 0; r < rays; ++r) {
    float sum = 0, dynamic_sum = 0;
    for (size_t i = r * S; i < (r + 1) * S; ++i) {
      const float score = ref_w[i] - cross_w[i];
      b->occlusion_weights[i] = 1 - std::abs(score);
      sum += score;
      dynamic_sum += b->dynamic_only_weights[i] - b->cross_dynamic_only_weights[i];
    }
    b->occlusion_map[r] = 1 - std::abs(sum);
    b->dynamic_only_occlusion_map[r] = 1 - std::abs(dynamic_sum);
  }
  // Cycle pairs: an anchor source's frame within the target's reach, where the anchor sample's
  // trajectory and the target sample's put the point.
  b->cycle_views.clear();
  b->points_traj_ref.clear();
  b->points_traj_anchor.clear();
  for (size_t v = 0; v < anchor.frames.size(); ++v) {
    const int f = anchor.frames[v];
    if (std::abs(f - frame) > kMaxOffset) continue;
    b->cycle_views.push_back(int(v));
    const float* ref = point_set(b->moved_ref, size_t(f - first_frame), points);
    const float* cross = point_set(b->moved_anchor, v, points);
    b->points_traj_ref.insert(b->points_traj_ref.end(), ref, ref + points * 3);
    b->points_traj_anchor.insert(b->points_traj_anchor.end(), cross, cross + points * 3);
  }
  laps.to(&times.composite_loss);
  return int(b->cycle_views.size());
}

void DynibarModel::State::backward(MicroBatch* b, const DynibarLossFractions& whole) {
  const int R = b->n_rays, S = config.N_samples;
  const size_t rays = size_t(R), samples = rays * S, points = samples;
  const bool main = b->phase == DynibarPhase::kMain;
  const DynibarLossBatch<float>& lb = b->loss_batch;
  // The loss's gradient into every render.
  std::vector<float> g_rgb(rays * 3), g_rgb_static(rays * 3), g_rgb_dynamic(rays * 3),
      g_depth(rays), g_weights(samples), g_weights_static(samples), g_weights_dynamic(samples),
      g_flows(b->render_flows.size()), g_dynamic_only(rays * 3), g_cross(rays * 3),
      g_traj_ref(b->points_traj_ref.size()), g_traj_anchor(b->points_traj_anchor.size()),
      g_scene_flow(b->scene_flow.size()), g_cross_dynamic_only(rays * 3), g_static_only(rays * 3);
  DynibarRendered<float> grad;
  grad.static_only_rgb = g_static_only.data();
  if (main) {
    grad.rgb = g_rgb.data();
    grad.rgb_static = g_rgb_static.data();
    grad.rgb_dynamic = g_rgb_dynamic.data();
    grad.depth = g_depth.data();
    grad.weights = g_weights.data();
    grad.weights_static = g_weights_static.data();
    grad.weights_dynamic = g_weights_dynamic.data();
    grad.render_flows = g_flows.data();
    grad.dynamic_only_rgb = g_dynamic_only.data();
    grad.cross_time_rgb = g_cross.data();
    grad.points_ref = g_traj_ref.data();
    grad.points_anchor = g_traj_anchor.data();
    grad.scene_flow = g_scene_flow.data();
    grad.cross_time_dynamic_only_rgb = g_cross_dynamic_only.data();
  }
  dynibar_losses(weights, lb, grad, whole);
  Branch& st = b->static_branch;
  Branch& dy = b->dynamic_branch;
  Branch& an = b->anchor_branch;
  st.grad_sigma.assign(samples, 0.0f);
  st.grad_rgb.assign(samples * 3, 0.0f);
  std::vector<float> g_sigma_a(samples), g_rgb_a(samples * 3), g_sigma_b(samples),
      g_rgb_b(samples * 3);
  // Each render's backward overwrites (g_sigma_a, g_rgb_a) for the static and (g_sigma_b,
  // g_rgb_b) for the dynamic component; the sums gather in the branches.
  const auto add_static = [&]() {
    add_to(&st.grad_sigma, g_sigma_a);
    add_to(&st.grad_rgb, g_rgb_a);
  };
  const auto add_dynamic = [&](Branch* br) {
    add_to(&br->grad_sigma, g_sigma_b);
    add_to(&br->grad_rgb, g_rgb_b);
  };
  cpu::composite_dynamic_rays_backward(
      R, S, DynamicComposite::kStaticOnly,
      DynamicSamples<const float>{st.sigma.data(), st.rgb.data(), nullptr, nullptr},
      b->depths.data(), DynamicRenders<const float>{g_static_only.data()},
      DynamicSamples<float>{g_sigma_a.data(), g_rgb_a.data(), nullptr, nullptr});
  add_static();
  std::vector<float> g_moved_ref(b->moved_ref.size(), 0.0f);
  if (main) {
    dy.grad_sigma.assign(samples, 0.0f);
    dy.grad_rgb.assign(samples * 3, 0.0f);
    an.grad_sigma.assign(samples, 0.0f);
    an.grad_rgb.assign(samples * 3, 0.0f);
    // The rendered flow: into the composite's weights and the moved samples.
    const int K = int(flow_offsets.size());
    std::vector<float> g_flow_points(b->flow_points.size());
    cpu::render_flows_backward(R, S, K, b->weights.data(), b->flow_points.data(),
                               dynamic.cameras.data(), g_flows.data(), g_weights.data(),
                               g_flow_points.data());
    for (int k = 0; k < K; ++k) {
      const size_t o = size_t(dynamic_index[size_t(k)]);
      for (size_t i = 0; i < points * 3; ++i) {
        g_moved_ref[o * points * 3 + i] += g_flow_points[size_t(k) * points * 3 + i];
      }
    }
    // The component colours, then the composite.
    component_colour_backward(R, S, b->weights_static.data(), st.rgb.data(), g_rgb_static.data(),
                              g_weights_static.data(), st.grad_rgb.data());
    component_colour_backward(R, S, b->weights_dynamic.data(), dy.rgb.data(), g_rgb_dynamic.data(),
                              g_weights_dynamic.data(), dy.grad_rgb.data());
    const DynamicSamples<const float> both{st.sigma.data(), st.rgb.data(), dy.sigma.data(),
                                           dy.rgb.data()};
    const DynamicSamples<float> grad_both{g_sigma_a.data(), g_rgb_a.data(), g_sigma_b.data(),
                                          g_rgb_b.data()};
    cpu::composite_dynamic_rays_backward(
        R, S, DynamicComposite::kBoth, both, b->depths.data(),
        DynamicRenders<const float>{g_rgb.data(), g_depth.data(), g_weights.data(),
                                    g_weights_static.data(), g_weights_dynamic.data()},
        grad_both);
    add_static();
    add_dynamic(&dy);
    cpu::composite_dynamic_rays_backward(
        R, S, DynamicComposite::kDynamicOnly, both, b->depths.data(),
        DynamicRenders<const float>{g_dynamic_only.data()},
        DynamicSamples<float>{nullptr, nullptr, g_sigma_b.data(), g_rgb_b.data()});
    add_dynamic(&dy);
    if (lb.cross_time) {
      // Across time.
      const DynamicSamples<const float> cross{st.sigma.data(), st.rgb.data(), an.sigma.data(),
                                              an.rgb.data()};
      cpu::composite_dynamic_rays_backward(R, S, DynamicComposite::kBoth, cross, b->depths.data(),
                                           DynamicRenders<const float>{g_cross.data()},
                                           DynamicSamples<float>{g_sigma_a.data(), g_rgb_a.data(),
                                                                 g_sigma_b.data(), g_rgb_b.data()});
      add_static();
      add_dynamic(&an);
      cpu::composite_dynamic_rays_backward(
          R, S, DynamicComposite::kDynamicOnly, cross, b->depths.data(),
          DynamicRenders<const float>{g_cross_dynamic_only.data()},
          DynamicSamples<float>{nullptr, nullptr, g_sigma_b.data(), g_rgb_b.data()});
      add_dynamic(&an);
    }
  }
  laps.to(&times.composite_backward);
  if (main) {
    if (lb.cross_time) {
      // The anchor's branch: the network, its gather, the anchor samples' motion.
      branch_backward(DynibarBranch::kAnchor, &an, b, anchor, true, true);
      const size_t n_anchor = anchor.frames.size();
      std::vector<float> g_moved_anchor(n_anchor * points * 3, 0.0f);
      per_view_backward(points, an.grad_moved.data(), anchor_index, g_moved_anchor.data());
      // The cycle pairs, into both trajectories.
      for (size_t pair = 0; pair < b->cycle_views.size(); ++pair) {
        const size_t v = size_t(b->cycle_views[pair]);
        const size_t o = size_t(anchor.frames[v] - first_frame);
        for (size_t i = 0; i < points * 3; ++i) {
          g_moved_ref[o * points * 3 + i] += g_traj_ref[pair * points * 3 + i];
          g_moved_anchor[v * points * 3 + i] += g_traj_anchor[pair * points * 3 + i];
        }
      }
      std::vector<float> g_points_anchor(points * 3);
      motion_backward(b->index, DynibarMotionRun::kAnchor, b->motion_anchor, R,
                      g_moved_anchor.data(), g_points_anchor.data());
      // The anchor samples are the target's moved to the anchor frame.
      const size_t o = size_t(anchor_frame - first_frame);
      for (size_t i = 0; i < points * 3; ++i) {
        g_moved_ref[o * points * 3 + i] += g_points_anchor[i] + an.grad_xyz[i];
      }
    }
    // The scene flow between consecutive frames: into both of its ends.
    const size_t F = size_t(n_ref_frames - 1);
    for (size_t f = 0; f < F; ++f) {
      for (size_t i = 0; i < points * 3; ++i) {
        const float g = g_scene_flow[f * points * 3 + i];
        g_moved_ref[(f + 1) * points * 3 + i] += g;
        g_moved_ref[f * points * 3 + i] -= g;
      }
    }
    laps.to(&times.motion_backward);
    // The dynamic branch at the target's time.
    branch_backward(DynibarBranch::kDynamic, &dy, b, dynamic, true, false);
    per_view_backward(points, dy.grad_moved.data(), dynamic_index, g_moved_ref.data());
    laps.to(&times.gather_backward);
    motion_backward(b->index, DynibarMotionRun::kReference, b->motion_ref, R, g_moved_ref.data(),
                    nullptr);
    laps.to(&times.motion_backward);
  }
  // The static branch.
  branch_backward(DynibarBranch::kStatic, &st, b, statics, false, false);
}

DynibarModel::DynibarModel(const TrainConfig& config) {
  if (config.num_frames <= config.num_basis) {
    throw InvalidArgument("model = dynibar: num_frames (" + std::to_string(config.num_frames) +
                          ") must exceed num_basis (" + std::to_string(config.num_basis) + ")");
  }
  if (!runs_on_device(config)) nn::check_linear_operands(linear_operands(config));
  if (config.N_importance != 0) {
    throw InvalidArgument("config key 'N_importance': " + std::to_string(config.N_importance) +
                          ", but DynIBaR's monocular model has no fine pass: set 0");
  }
  state_ = std::make_unique<State>(config);
}

DynibarModel::~DynibarModel() = default;

const nn::ParameterSet& DynibarModel::parameters() const {
  return state_->fetch().parameters;
}
nn::ParameterSet& DynibarModel::parameters() {
  return state_->edit().parameters;
}
const nn::Adam& DynibarModel::optimizer() const {
  return state_->fetch().adam;
}
nn::Adam& DynibarModel::optimizer() {
  return state_->edit().adam;
}

bool DynibarModel::on_device() const {
  return state_->device != nullptr;
}

void DynibarModel::configure_optimizer(const nn::AdamOptions& options) {
  State& s = state_->edit();
  s.adam = nn::Adam(s.parameters, State::dynibar_adam(s.config, options));
}

void DynibarModel::initialize(uint64_t seed) {
  State& s = state_->edit();
  nn::Initializer init(seed);
  s.feature_net.initialize(init);
  s.feature_net_st.initialize(init);
  s.net_st.initialize(init);
  s.net_dy.initialize(init);
  s.motion_mlp.initialize(init);
  const std::vector<double> dct = nn::dct_trajectory_basis(s.config.num_frames, s.config.num_basis);
  std::transform(dct.begin(), dct.end(), s.parameters.value(s.basis),
                 [](double x) { return float(x); });
}

uint64_t DynibarModel::updates() const {
  return state_->adam.steps();
}

double DynibarModel::learning_rate(nn::ParameterGroup group) const {
  return state_->adam.learning_rate(group);
}

size_t DynibarModel::loss_sums_size() const {
  return 2 * size_t(kDynibarTermCount) + 2;
}

std::vector<ParameterRange> DynibarModel::gradient_ready_order() const {
  const State& s = *state_;
  const size_t networks = s.net_st.parameter_offset();
  return {{networks, s.parameters.size() - networks}, {0, networks}};
}

void DynibarModel::set_loss_scale(double scale) {
  State& s = *state_;
  if (s.device) {
    s.device->set_gradient_scale(scale);
  } else if (scale != 1.0) {
    throw InvalidArgument("DynibarModel: the CPU step has no loss scale");
  }
}

void DynibarModel::begin_step(const data::TrainingSample& sample) {
  State& s = *state_;
  s.times = PhaseTimes{};
  s.laps.start();
  s.weights = dynibar_loss_weights(int64_t(s.adam.steps()), s.schedule);
  s.prepare(sample, true, s.weights.phase == DynibarPhase::kMain);
  s.sample = &sample;
  s.used_batches = 0;
  s.laps.to(&s.times.features_forward);
}

LossSums DynibarModel::accumulate(RandomKey key, int batch) {
  State& s = *state_;
  if (!s.sample) throw InvalidArgument("DynibarModel::accumulate before begin_step");
  const TrainConfig& c = s.config;
  const uint32_t first_ray = uint32_t(batch * c.N_rand);
  if (s.batches.size() <= s.used_batches) s.batches.emplace_back();
  MicroBatch& b = s.batches[s.used_batches];
  b.index = int(s.used_batches++);
  const RayBatch rays =
      select_rays(s.sample->target, c.N_rand, c.sample_mode, c.center_ratio, key, first_ray);
  b.n_rays = c.N_rand;
  b.phase = s.weights.phase;
  b.pixels = rays.pixels;
  b.target_rgb = rays.target_rgb;
  s.forward(&b, key, first_ray, true);
  LossSums sums;
  append_sums(dynibar_loss_fractions(s.weights, b.loss_batch), &sums);
  // The composite's squared error where it counts (the static-only render's in the bootstrap).
  const float* rgb = b.phase == DynibarPhase::kMain ? b.rgb.data() : b.static_only_rgb.data();
  double squared = 0, valid = 0;
  for (size_t r = 0; r < size_t(b.n_rays); ++r) {
    if (b.ray_mask[r] == 0) continue;
    for (size_t c3 = 3 * r; c3 < 3 * r + 3; ++c3) {
      const double d = double(rgb[c3]) - double(b.target_rgb[c3]);
      squared += d * d;
    }
    valid += 1;
  }
  sums.push_back(squared);
  sums.push_back(valid);
  return sums;
}

StepResult DynibarModel::end_step(const LossSums& global,
                                  const std::function<void(ParameterRange)>& ready) {
  State& s = *state_;
  if (global.size() != loss_sums_size()) {
    throw InvalidArgument("DynibarModel::end_step: " + std::to_string(global.size()) +
                          " loss sums, expected " + std::to_string(loss_sums_size()));
  }
  const DynibarLossFractions whole = fractions_from_sums(global.data());
  for (size_t i = 0; i < s.used_batches; ++i) s.backward(&s.batches[i], whole);
  const std::vector<ParameterRange> order = gradient_ready_order();
  if (s.device) {
    // The networks' gradients unscaled, and the trajectory basis's, which the host computed.
    s.device->unscale_gradients(order[0]);
    s.device->add_host_gradients(s.basis_range(), s.parameters.grads().data());
    s.device->synchronize();
  }
  if (ready) ready(order[0]);
  s.laps.start();
  if (s.device) {
    s.device->features_backward();
    s.device->unscale_gradients(order[1]);
    s.device->synchronize();
  } else {
    s.feature_net_st.backward(&s.static_workspace, s.grad_static_maps.data(), nullptr);
    if (!s.dynamic_maps.empty()) {
      s.feature_net.backward(&s.dynamic_workspace, s.grad_dynamic_maps.data(), nullptr);
    }
  }
  s.laps.to(&s.times.features_backward);
  if (ready) ready(order[1]);
  s.sample = nullptr;
  StepResult result;
  const DynibarLossTerms terms = dynibar_loss_terms(s.weights, whole);
  result.loss = terms.total;
  const double squared = global[global.size() - 2], valid = global.back();
  result.psnr = mse_to_psnr(squared / (3 * valid + kCharbonnierDenominatorEpsilon));
  result.valid_rays = int(valid);
  result.terms = {
      {"loss/static_bootstrap", "static_bootstrap", terms.static_bootstrap},
      {"loss/rgb", "rgb", terms.rgb},
      {"loss/composite", "composite", terms.composite},
      {"loss/cross_time", "cross_time", terms.cross_time},
      {"loss/dynamic_region", "dynamic_region", terms.dynamic_region},
      {"loss/dynamic_only", "dynamic_only", terms.dynamic_only},
      {"loss/cross_time_dynamic_only", "cross_time_dynamic_only", terms.cross_time_dynamic_only},
      {"loss/disparity", "disparity", terms.disparity},
      {"loss/flow", "flow", terms.flow},
      {"loss/cycle", "cycle", terms.cycle},
      {"loss/scene_flow_magnitude", "scene_flow_magnitude", terms.scene_flow_magnitude},
      {"loss/scene_flow_temporal", "scene_flow_temporal", terms.scene_flow_temporal},
      {"loss/scene_flow_spatial", "scene_flow_spatial", terms.scene_flow_spatial},
      {"loss/skew_entropy", "skew_entropy", terms.skew_entropy},
      {"loss/distortion", "distortion", terms.distortion},
      {"loss/static_region", "static_region", terms.static_region},
      {"loss/dynamic_weight_suppression", "dynamic_weight_suppression",
       terms.dynamic_weight_suppression}};
  result.times = s.times;
  return result;
}

StepWork DynibarModel::step_work() const {
  const TrainConfig& c = state_->config;
  return {"rays", uint64_t(c.N_rand) * uint64_t(c.accumulation_steps)};
}

float* DynibarModel::gradients() {
  return state_->step_gradients();
}

double DynibarModel::gradient_norm() {
  return state_->step_gradient_norm();
}

void DynibarModel::update(double gradient_norm) {
  State& s = *state_;
  // The bootstrap's loss reaches the static branch alone: the other groups have no gradient,
  // and torch's Adam skips them (their update counts start with the main loop).
  const uint32_t static_branch =
      1u << int(nn::ParameterGroup::kStaticFeature) | 1u << int(nn::ParameterGroup::kStaticMlp);
  s.step_update(gradient_norm,
                s.weights.phase == DynibarPhase::kMain ? nn::Adam::kAllGroups : static_branch);
  // The host's trajectories read the basis: its new values come back.
  if (s.device) s.device->read_values(s.basis_range(), s.parameters.values().data());
}

const PhaseTimes& DynibarModel::phase_times() const {
  return state_->times;
}

void DynibarModel::render(const data::TrainingSample& sample, const std::vector<float>& pixels,
                          RandomKey key, std::vector<float>* rgb, std::vector<float>* depth,
                          const std::function<void(int, int)>& on_chunk, RenderedParts* parts) {
  State& s = *state_;
  const int total = int(pixels.size() / 2);
  rgb->resize(size_t(total) * 3);
  depth->resize(total);
  if (parts) {
    parts->static_rgb.resize(size_t(total) * 3);
    parts->dynamic_rgb.resize(size_t(total) * 3);
  }
  s.prepare(sample, false, true);
  s.sample = &sample;
  MicroBatch b;
  for (int first = 0; first < total; first += s.config.chunk_size) {
    b.n_rays = std::min(s.config.chunk_size, total - first);
    b.pixels.assign(pixels.begin() + 2 * size_t(first),
                    pixels.begin() + 2 * size_t(first + b.n_rays));
    b.target_rgb.assign(size_t(b.n_rays) * 3, 0.0f);
    s.forward(&b, key, uint32_t(first), false);
    std::copy(b.rgb.begin(), b.rgb.end(), rgb->begin() + 3 * size_t(first));
    std::copy(b.depth.begin(), b.depth.end(), depth->begin() + first);
    if (parts) {
      std::copy(b.rgb_static.begin(), b.rgb_static.end(),
                parts->static_rgb.begin() + 3 * size_t(first));
      std::copy(b.rgb_dynamic.begin(), b.rgb_dynamic.end(),
                parts->dynamic_rgb.begin() + 3 * size_t(first));
    }
    if (on_chunk) on_chunk(first + b.n_rays, total);
  }
  s.sample = nullptr;
}

}  // namespace mvibr::train
