// The multi-view pose model (see pose_model.h): the backbone, the two heads, the cross-view
// fusion, the triangulation and the loss, forward per micro-batch and backward at end_step, when
// the global loss sums are known. With device = cuda the network runs on the GPU
// (pose_device.h) and the loss, its gradients with respect to the joints and the optimiser stay
// here. Phases are charged as features (the backbone; on the GPU the whole network), aggregator
// (the heads, the fusion and the triangulation) and composite (the loss) forward and backward.
#include "mvibr/train/pose_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/nn/channel_mean.h"
#include "mvibr/nn/cross_view_fusion.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/layers.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/soft_argmax.h"
#include "phase_laps.h"
#include "pose_device.h"
#include "state_copies.h"

namespace mvibr::train {

nn::ResUNetOptions pose_backbone_options(const TrainConfig& c, int joints) {
  nn::ResUNetOptions o = nn::ResUNetOptions::preset(c.feature_net);
  o.conv_algorithm = c.conv_algorithm;
  o.conv_operands =
      c.precision == Precision::kBf16 ? nn::Operands::kBf16 : nn::Operands::kFp32;
  o.coarse_only = true;
  o.coarse_out_ch = joints + c.confidence_channels;
  // Channels last: oneDNN's convolutions read and write the maps as they are, with no transposes
  // around each (1.3x the step in bf16, 1.07x in fp32; the GPU's maps stay planar).
  o.map_layout = nn::MapLayout::kChannelsLast;
  return o;
}

LossSums PoseSums::values(bool fusion) const {
  LossSums sums = {joints_3d_l1, joints_3d, joints_2d_l1, joints_2d, joint_error};
  if (fusion) {
    sums.insert(sums.end(), {raw_joints_3d_l1, raw_joints_3d, raw_joints_2d_l1, raw_joint_error});
  }
  return sums;
}

nn::SoftArgmaxOptions pose_soft_argmax_options(const TrainConfig& config) {
  return nn::SoftArgmaxOptions::for_stride(4, config.heatmap_multiplier);
}

PoseSums PoseSums::from(const LossSums& sums) {
  if (sums.size() != 5 && sums.size() != 9) {
    throw InvalidArgument("pose loss sums: " + std::to_string(sums.size()) +
                          " values, expected 5 (9 with fusion)");
  }
  PoseSums s{sums[0], sums[1], sums[2], sums[3], sums[4]};
  if (sums.size() == 9) {
    s.raw_joints_3d_l1 = sums[5];
    s.raw_joints_3d = sums[6];
    s.raw_joints_2d_l1 = sums[7];
    s.raw_joint_error = sums[8];
  }
  return s;
}

PoseRig pose_rig(const data::Scene& scene) {
  for (size_t i = 0; i < scene.views.size(); ++i) {
    const data::View& v = scene.views[i];
    if (v.target) {
      return {int(scene.neighbours[i].size()) + 1, v.camera.width, v.camera.height};
    }
  }
  throw InvalidArgument("pose data set " + scene.name + " has no instant (no target view)");
}

namespace {

// A micro-batch: its instants' inputs and everything the backward needs.
struct MicroBatch {
  int instants = 0, views = 0;
  std::vector<float> images;          // [BV,H,W,3] in [0,1]
  std::vector<float> projections;     // [B,V,3,4]
  std::vector<double> joints_true;    // [B,J,3]
  std::vector<float> joints_2d_true;  // [BV,J,2]
  std::vector<uint8_t> visible;       // [BV,J]
  nn::ResUNet::Workspace workspace;
  std::vector<float> maps;            // [BV,Hf,Wf,J+K]
  std::vector<float> grad_maps;       // their gradient, kept: 2 MiB anew each step was page faults
  std::vector<float> points;          // [BV,J,2] pixels (with fusion, of the fused heatmaps)
  std::vector<float> moments;         // the soft-argmax's moments of maps, for its backward
  std::vector<float> pooled, hidden;  // [BV,K], [BV,hidden] after ReLU
  std::vector<float> confidences;     // [BV,J] after the sigmoid
  std::vector<float> weights;         // [B,V,J] normalised over views
  std::vector<float> joints;          // [B,J,3]
  std::vector<uint8_t> triangulated;  // [B,J]
  // With fusion: the J heatmaps as rows of cells [V,B,J,Hf Wf], their fusion, and the raw path:
  // the raw heatmaps' 2D joints [BV,J,2] and their triangulation [B,J,3], [B,J].
  std::vector<float> heatmap_rows, fused_rows;
  std::vector<float> raw_points, raw_joints;
  std::vector<uint8_t> raw_triangulated;
};

// One path's loss sums: from its 2D joints, 3D joints and which of them triangulated.
struct PathSums {
  double joints_3d_l1 = 0, joints_3d = 0, joints_2d_l1 = 0, joints_2d = 0, joint_error = 0;
};

// [B,V,J,2] and [V,B,J,2] into each other: `from` has `outer` x `inner` blocks of J points, `to`
// takes them transposed.
void transpose_points(size_t outer, size_t inner, size_t joints, const float* from, float* to) {
  const size_t block = 2 * joints;
  for (size_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < inner; ++i) {
      std::copy(from + (o * inner + i) * block, from + (o * inner + i + 1) * block,
                to + (i * outer + o) * block);
    }
  }
}

}  // namespace

struct PoseModel::State : WithStateCopies<PoseModel::State> {
  TrainConfig config;
  int joints;
  nn::ParameterSet parameters;
  nn::ResUNet backbone;
  nn::ParameterBlock head_block;
  nn::Linear head_hidden, head_out;
  PoseRig rig;
  nn::ParameterBlock fusion_block;
  std::optional<nn::CrossViewFusion> fusion;
  nn::Adam adam;
  std::unique_ptr<PoseDeviceNetwork> device;  // device = cuda: the network and its state
  std::vector<MicroBatch> batches;
  // recompute_backbone: the one workspace every instant's backbone pass goes through.
  nn::ResUNet::Workspace recompute_workspace;
  size_t used_batches = 0;
  // Between begin_step and end_step: the caller's samples (or one_sample, a step of one), and
  // how many a micro-batch takes.
  const std::vector<data::TrainingSample>* step_samples = nullptr;
  std::vector<data::TrainingSample> one_sample;
  size_t per_batch = 0;
  int height = 0, width = 0, map_height = 0, map_width = 0;
  PhaseTimes times;
  PhaseLaps laps;
  double step_mpjpe_mm = std::nan("");  // of the last step's instants

  State(const TrainConfig& c, int j, const PoseRig& r)
      : config(c),
        joints(j),
        backbone(pose_backbone_options(c, j), &parameters, "backbone."),
        head_block(parameters, "confidence.", nn::ParameterGroup::kMlp),
        head_hidden(head_block, "0", c.confidence_channels, c.confidence_hidden),
        head_out(head_block, "2", c.confidence_hidden, j),
        rig(r),
        fusion_block(parameters, "fusion.", nn::ParameterGroup::kFusion),
        fusion(make_fusion(c, r, fusion_block)),
        adam(parameters, nn::AdamOptions{}) {
    if (rig.width > 0 && rig.height > 0) {
      height = rig.height;
      width = rig.width;
      std::tie(map_height, map_width) = nn::ResUNet::output_size(height, width);
    }
    if (runs_on_device(c)) {
      device = make_pose_device_network(c, PoseNetworks{backbone, head_block, head_hidden, head_out,
                                                        fusion_block, fusion ? &*fusion : nullptr});
      copies = StateCopies(device.get(), &parameters, &adam);
    } else {
      nn::check_conv_operands(backbone.graph().conv_operands);
    }
  }

  static std::optional<nn::CrossViewFusion> make_fusion(const TrainConfig& c, const PoseRig& rig,
                                                        nn::ParameterBlock& block) {
    if (!c.cross_view_fusion) return std::nullopt;
    if (rig.cameras < 2 || rig.width < 1 || rig.height < 1) {
      throw InvalidArgument(
          "cross_view_fusion needs the data set's camera rig: two or more cameras and their "
          "image size");
    }
    const auto [map_height, map_width] = nn::ResUNet::output_size(rig.height, rig.width);
    return nn::CrossViewFusion(block, rig.cameras, map_height * map_width);
  }

  int channels() const { return joints + config.confidence_channels; }
  nn::SoftArgmaxOptions soft_argmax_options() const { return pose_soft_argmax_options(config); }

  // The instants' images, cameras and labels into `b`, checking that they agree in size,
  // cameras and joints (and with fusion, with the rig).
  void load(const data::TrainingSample* samples, size_t count, MicroBatch* b) {
    b->instants = int(count);
    b->views = int(samples[0].sources.size()) + 1;
    const data::View& first = samples[0].target;
    if (fusion && b->views != rig.cameras) {
      throw InvalidArgument("pose sample of " + first.name + " has " + std::to_string(b->views) +
                            " cameras, the fusion's rig " + std::to_string(rig.cameras));
    }
    if (height == 0) {
      height = first.camera.height;
      width = first.camera.width;
      std::tie(map_height, map_width) = nn::ResUNet::output_size(height, width);
    }
    const size_t J = size_t(joints), pixels = size_t(height) * size_t(width) * 3;
    b->images.resize(count * size_t(b->views) * pixels);
    b->projections.clear();
    b->joints_true.clear();
    b->joints_2d_true.clear();
    b->visible.clear();
    for (size_t i = 0; i < count; ++i) {
      const data::TrainingSample& s = samples[i];
      if (int(s.sources.size()) + 1 != b->views) {
        throw InvalidArgument("pose sample of " + s.target.name + " has " +
                              std::to_string(s.sources.size() + 1) + " cameras, " + first.name +
                              " has " + std::to_string(b->views) +
                              ": a micro-batch needs one camera count");
      }
      for (int v = 0; v < b->views; ++v) {
        const data::View& view = v == 0 ? s.target : s.sources[size_t(v - 1)];
        if (view.camera.width != width || view.camera.height != height) {
          throw InvalidArgument("pose view " + view.name + " is " +
                                std::to_string(view.camera.width) + "x" +
                                std::to_string(view.camera.height) + ", the model's images are " +
                                std::to_string(width) + "x" + std::to_string(height));
        }
        if (view.pose.joints_world.size() != 3 * J) {
          throw InvalidArgument("pose view " + view.name + " has " +
                                std::to_string(view.pose.joints_world.size() / 3) +
                                " labelled joints, the model " + std::to_string(J));
        }
        float* image = &b->images[(i * size_t(b->views) + size_t(v)) * pixels];
        for (size_t k = 0; k < pixels; ++k) image[k] = float(view.rgb[k]) / 255.0f;
        float p[12];
        projection_matrix(camera_cast<float>(view.camera), p);
        b->projections.insert(b->projections.end(), p, p + 12);
        b->joints_2d_true.insert(b->joints_2d_true.end(), view.pose.joints_image.begin(),
                                 view.pose.joints_image.end());
        b->visible.insert(b->visible.end(), view.pose.visible.begin(), view.pose.visible.end());
      }
      b->joints_true.insert(b->joints_true.end(), s.target.pose.joints_world.begin(),
                            s.target.pose.joints_world.end());
    }
  }

  // f(m, r) for every heatmap cell: m its index in the maps [BV,Hf,Wf,C], r in the heatmap rows
  // [V,B,J,Hf Wf].
  template <typename Visit>
  void for_each_heatmap_cell(const MicroBatch& b, Visit f) const {
    const size_t B = size_t(b.instants), V = size_t(b.views), J = size_t(joints);
    const size_t C = size_t(channels()), cells = size_t(map_height) * size_t(map_width);
    for (size_t i = 0; i < B; ++i) {
      for (size_t v = 0; v < V; ++v) {
        for (size_t j = 0; j < J; ++j) {
          const size_t map = (i * V + v) * cells * C + j, row = ((v * B + i) * J + j) * cells;
          for (size_t cell = 0; cell < cells; ++cell) f(map + cell * C, row + cell);
        }
      }
    }
  }

  // The fusion of the raw heatmaps and the fused heatmaps' 2D joints into b->points.
  void fuse(MicroBatch* b) {
    const int BJ = b->instants * joints, cells = map_height * map_width;
    const size_t rows = size_t(b->views) * size_t(BJ) * size_t(cells);
    b->heatmap_rows.resize(rows);
    b->fused_rows.resize(rows);
    for_each_heatmap_cell(*b, [&](size_t m, size_t r) { b->heatmap_rows[r] = b->maps[m]; });
    fusion->forward(fusion_block.values(), b->views, BJ, cells, b->heatmap_rows.data(),
                    b->fused_rows.data());
    std::vector<float> points(b->points.size());  // [V,B,J,2]
    nn::soft_argmax_forward(b->views * BJ, map_height, map_width, 1, 1, b->fused_rows.data(),
                            soft_argmax_options(), points.data());
    transpose_points(size_t(b->views), size_t(b->instants), size_t(joints), points.data(),
                     b->points.data());
  }

  // The backbone over instant i's views of `b` (into its maps) through `workspace`.
  void backbone_instant(MicroBatch& b, int i, nn::ResUNet::Workspace* workspace) {
    const size_t V = size_t(b.views), image = size_t(height) * size_t(width) * 3;
    const size_t map = size_t(map_height) * size_t(map_width) * size_t(channels());
    backbone.forward(b.views, height, width, b.images.data() + size_t(i) * V * image, workspace,
                     b.maps.data() + size_t(i) * V * map, nullptr);
  }

  // The backbone, the heads, the fusion and the triangulation of loaded micro-batch `index`.
  void forward(MicroBatch* b, int index) {
    const size_t BV = size_t(b->instants) * size_t(b->views), J = size_t(joints);
    const size_t K = size_t(config.confidence_channels), C = size_t(channels());
    const size_t cells = size_t(map_height) * size_t(map_width);
    laps.start();
    if (device) {
      b->points.resize(BV * J * 2);
      b->weights.resize(BV * J);
      b->joints.resize(size_t(b->instants) * J * 3);
      b->triangulated.resize(size_t(b->instants) * J);
      if (fusion) {
        b->raw_points.resize(b->points.size());
        b->raw_joints.resize(b->joints.size());
        b->raw_triangulated.resize(b->triangulated.size());
      }
      device->forward(
          index, {b->instants, b->views, height, width, b->images.data(), b->projections.data()},
          {b->points.data(), b->weights.data(), b->joints.data(), b->triangulated.data(),
           b->raw_points.data(), b->raw_joints.data(), b->raw_triangulated.data()});
      laps.to(&times.features_forward);
      return;
    }
    b->maps.resize(BV * cells * C);
    if (config.recompute_backbone) {
      for (int i = 0; i < b->instants; ++i) backbone_instant(*b, i, &recompute_workspace);
    } else {
      backbone.forward(int(BV), height, width, b->images.data(), &b->workspace, b->maps.data(),
                       nullptr);
    }
    laps.to(&times.features_forward);
    b->points.resize(BV * J * 2);
    std::vector<float>& raw_points = fusion ? b->raw_points : b->points;
    raw_points.resize(BV * J * 2);
    b->moments.resize(BV * J * nn::kSoftArgmaxMoments);
    nn::soft_argmax_forward(int(BV), map_height, map_width, int(C), int(J), b->maps.data(),
                            soft_argmax_options(), raw_points.data(), b->moments.data());
    if (fusion) fuse(b);
    b->weights.resize(BV * J);
    if (config.use_confidences) {
      // The confidence head: the mean of each extra channel over the map, then the MLP.
      b->pooled.resize(BV * K);
      nn::channel_mean_forward(int(BV), int(cells), int(C), int(J), int(K), b->maps.data(),
                               b->pooled.data());
      const float* head = head_block.values();
      b->hidden.resize(BV * size_t(config.confidence_hidden));
      head_hidden.forward(head, BV, b->pooled.data(), b->hidden.data(), nn::Activation::kRelu);
      b->confidences.resize(BV * J);
      head_out.forward(head, BV, b->hidden.data(), b->confidences.data());
      nn::sigmoid(BV * J, b->confidences.data());
      cpu::triangulation_weights(b->instants, b->views, int(J), b->confidences.data(),
                                 b->weights.data());
    } else {
      std::fill(b->weights.begin(), b->weights.end(), 1.0f);
    }
    b->joints.resize(size_t(b->instants) * J * 3);
    b->triangulated.resize(size_t(b->instants) * J);
    cpu::triangulate_joints(b->instants, b->views, int(J), b->projections.data(), b->points.data(),
                            b->weights.data(), b->joints.data(), b->triangulated.data());
    if (fusion) {
      b->raw_joints.resize(b->joints.size());
      b->raw_triangulated.resize(b->triangulated.size());
      cpu::triangulate_joints(b->instants, b->views, int(J), b->projections.data(),
                              b->raw_points.data(), b->weights.data(), b->raw_joints.data(),
                              b->raw_triangulated.data());
    }
    laps.to(&times.aggregator_forward);
  }

  // One path's sums: its 2D joints [BV,J,2], 3D joints [B,J,3] and which triangulated [B,J].
  PathSums path_sums(const MicroBatch& b, const std::vector<float>& points,
                     const std::vector<float>& joints_3d,
                     const std::vector<uint8_t>& triangulated) const {
    PathSums s;
    const size_t J = size_t(joints);
    for (size_t i = 0; i < size_t(b.instants) * J; ++i) {
      if (!triangulated[i]) continue;
      double squared = 0;
      for (size_t k = 3 * i; k < 3 * i + 3; ++k) {
        const double d = double(joints_3d[k]) - b.joints_true[k];
        s.joints_3d_l1 += std::abs(d);
        squared += d * d;
      }
      s.joint_error += std::sqrt(squared);
      s.joints_3d += 1;
    }
    for (size_t i = 0; i < b.visible.size(); ++i) {
      if (!b.visible[i]) continue;
      for (size_t k = 2 * i; k < 2 * i + 2; ++k) {
        s.joints_2d_l1 += std::abs(double(points[k]) - double(b.joints_2d_true[k])) / width;
      }
      s.joints_2d += 1;
    }
    return s;
  }

  PoseSums sums(const MicroBatch& b) const {
    const PathSums main = path_sums(b, b.points, b.joints, b.triangulated);
    PoseSums s{main.joints_3d_l1, main.joints_3d, main.joints_2d_l1, main.joints_2d,
               main.joint_error};
    if (fusion) {
      const PathSums raw = path_sums(b, b.raw_points, b.raw_joints, b.raw_triangulated);
      s.raw_joints_3d_l1 = raw.joints_3d_l1;
      s.raw_joints_3d = raw.joints_3d;
      s.raw_joints_2d_l1 = raw.joints_2d_l1;
      s.raw_joint_error = raw.joint_error;
    }
    return s;
  }

  // One path's part of the loss, 3D L1 / joints_3d + w_joints_2d * 2D L1 / joints_2d (the global
  // counts): its gradients with respect to the 3D joints [B,J,3] and, the 2D term's, the 2D
  // joints [BV,J,2] (both overwritten).
  void path_loss_gradients(const MicroBatch& b, const std::vector<float>& points,
                           const std::vector<float>& joints_3d,
                           const std::vector<uint8_t>& triangulated, double global_joints_3d,
                           double global_joints_2d, std::vector<float>* grad_joints,
                           std::vector<float>* grad_points_2d) const {
    const auto sign = [](double d) { return double((d > 0) - (d < 0)); };
    grad_joints->assign(joints_3d.size(), 0.0f);
    const double per_joint = global_joints_3d > 0 ? 1.0 / global_joints_3d : 0.0;
    for (size_t i = 0; i < triangulated.size(); ++i) {
      if (!triangulated[i]) continue;
      for (size_t k = 3 * i; k < 3 * i + 3; ++k) {
        (*grad_joints)[k] = float(per_joint * sign(double(joints_3d[k]) - b.joints_true[k]));
      }
    }
    grad_points_2d->assign(points.size(), 0.0f);
    const double per_visible =
        global_joints_2d > 0 ? config.w_joints_2d / (global_joints_2d * width) : 0.0;
    for (size_t i = 0; i < b.visible.size(); ++i) {
      if (!b.visible[i]) continue;
      for (size_t k = 2 * i; k < 2 * i + 2; ++k) {
        (*grad_points_2d)[k] =
            float(per_visible * sign(double(points[k]) - double(b.joints_2d_true[k])));
      }
    }
  }

  // One path's loss back to its 2D joints and the triangulation weights (both overwritten).
  void path_backward(const MicroBatch& b, const std::vector<float>& points,
                     const std::vector<float>& joints_3d, const std::vector<uint8_t>& triangulated,
                     double global_joints_3d, double global_joints_2d, float* grad_points,
                     float* grad_weights) {
    laps.to(&times.aggregator_backward);  // what the backward did before this path
    std::vector<float> grad_joints, grad_points_2d;
    path_loss_gradients(b, points, joints_3d, triangulated, global_joints_3d, global_joints_2d,
                        &grad_joints, &grad_points_2d);
    laps.to(&times.composite_backward);
    cpu::triangulate_joints_backward(b.instants, b.views, joints, b.projections.data(),
                                     points.data(), b.weights.data(), grad_joints.data(),
                                     grad_points, grad_weights);
    for (size_t k = 0; k < grad_points_2d.size(); ++k) grad_points[k] += grad_points_2d[k];
  }

  // The fused path's 2D joint gradients [BV,J,2] back through the soft-argmax and the fusion,
  // added into the maps' gradients.
  void fuse_backward(const MicroBatch& b, const float* grad_points, float* grad_maps) {
    const int BJ = b.instants * joints, cells = map_height * map_width;
    std::vector<float> grad_rows_points(b.points.size());  // [V,B,J,2]
    transpose_points(size_t(b.instants), size_t(b.views), size_t(joints), grad_points,
                     grad_rows_points.data());
    std::vector<float> grad_fused(b.fused_rows.size()), grad_rows(b.heatmap_rows.size());
    nn::soft_argmax_backward(b.views * BJ, map_height, map_width, 1, 1, b.fused_rows.data(),
                             soft_argmax_options(), grad_rows_points.data(), grad_fused.data());
    fusion->backward(fusion_block.values(), fusion_block.grads(), b.views, BJ, cells,
                     b.heatmap_rows.data(), grad_fused.data(), grad_rows.data());
    for_each_heatmap_cell(b, [&](size_t m, size_t r) { grad_maps[m] += grad_rows[r]; });
  }

  // The gradients of the loss (pose_model.h; with fusion, both paths') through the micro-batch
  // into the parameters.
  void backward(MicroBatch* b, int index, const PoseSums& global) {
    const size_t BV = size_t(b->instants) * size_t(b->views), J = size_t(joints);
    const size_t K = size_t(config.confidence_channels), C = size_t(channels());
    const size_t cells = size_t(map_height) * size_t(map_width);
    laps.start();
    if (device) {
      std::vector<float> grad_joints, grad_points_2d, grad_raw_joints, grad_raw_points_2d;
      path_loss_gradients(*b, b->points, b->joints, b->triangulated, global.joints_3d,
                          global.joints_2d, &grad_joints, &grad_points_2d);
      if (fusion) {
        path_loss_gradients(*b, b->raw_points, b->raw_joints, b->raw_triangulated,
                            global.raw_joints_3d, global.joints_2d, &grad_raw_joints,
                            &grad_raw_points_2d);
      }
      laps.to(&times.composite_backward);
      device->backward(index, {grad_joints.data(), grad_points_2d.data(), grad_raw_joints.data(),
                               grad_raw_points_2d.data()});
      laps.to(&times.features_backward);
      return;
    }
    std::vector<float> grad_points(b->points.size()), grad_weights(b->weights.size());
    path_backward(*b, b->points, b->joints, b->triangulated, global.joints_3d, global.joints_2d,
                  grad_points.data(), grad_weights.data());
    // The soft-argmax writes the J heatmaps' gradient and the confidence head the K channels';
    // without the head those are zeros.
    std::vector<float>& grad_maps = b->grad_maps;
    if (config.use_confidences || K == 0) {
      grad_maps.resize(BV * cells * C);
    } else {
      grad_maps.assign(BV * cells * C, 0.0f);
    }
    if (fusion) {
      std::vector<float> grad_raw_points(b->raw_points.size()),
          grad_raw_weights(grad_weights.size());
      path_backward(*b, b->raw_points, b->raw_joints, b->raw_triangulated, global.raw_joints_3d,
                    global.joints_2d, grad_raw_points.data(), grad_raw_weights.data());
      for (size_t i = 0; i < grad_weights.size(); ++i) grad_weights[i] += grad_raw_weights[i];
      nn::soft_argmax_backward(int(BV), map_height, map_width, int(C), int(J), b->maps.data(),
                               soft_argmax_options(), grad_raw_points.data(), grad_maps.data(),
                               b->moments.data());
      fuse_backward(*b, grad_points.data(), grad_maps.data());
    } else {
      nn::soft_argmax_backward(int(BV), map_height, map_width, int(C), int(J), b->maps.data(),
                               soft_argmax_options(), grad_points.data(), grad_maps.data(),
                               b->moments.data());
    }
    if (config.use_confidences) {
      std::vector<float> grad_logits(BV * J);
      cpu::triangulation_weights_backward(b->instants, b->views, int(J), b->confidences.data(),
                                          grad_weights.data(), grad_logits.data());
      nn::sigmoid_backward(BV * J, b->confidences.data(), grad_logits.data());
      const float* head = head_block.values();
      float* head_grads = head_block.grads();
      std::vector<float> grad_hidden(b->hidden.size()), grad_pooled(b->pooled.size());
      head_out.backward(head, head_grads, BV, b->hidden.data(), grad_logits.data(),
                        grad_hidden.data());
      nn::relu_backward(b->hidden.size(), b->hidden.data(), grad_hidden.data());
      head_hidden.backward(head, head_grads, BV, b->pooled.data(), grad_hidden.data(),
                           grad_pooled.data());
      nn::channel_mean_backward(int(BV), int(cells), int(C), int(J), int(K), grad_pooled.data(),
                                grad_maps.data());
    }
    laps.to(&times.aggregator_backward);
    if (config.recompute_backbone) {
      // Each instant's activations again (the same maps, rewritten), then its backward.
      const size_t instant_maps = size_t(b->views) * cells * C;
      for (int i = 0; i < b->instants; ++i) {
        backbone_instant(*b, i, &recompute_workspace);
        backbone.backward(&recompute_workspace, grad_maps.data() + size_t(i) * instant_maps,
                          nullptr);
      }
    } else {
      backbone.backward(&b->workspace, grad_maps.data(), nullptr);
    }
    laps.to(&times.features_backward);
  }
};

PoseModel::PoseModel(const TrainConfig& config, int joints, const PoseRig& rig) {
  if (joints < 1) throw InvalidArgument("the pose model needs a skeleton of at least one joint");
  state_ = std::make_unique<State>(config, joints, rig);
}
PoseModel::~PoseModel() = default;

const nn::ParameterSet& PoseModel::parameters() const {
  return state_->fetch().parameters;
}
nn::ParameterSet& PoseModel::parameters() {
  return state_->edit().parameters;
}
const nn::Adam& PoseModel::optimizer() const {
  return state_->fetch().adam;
}
nn::Adam& PoseModel::optimizer() {
  return state_->edit().adam;
}
void PoseModel::configure_optimizer(const nn::AdamOptions& options) {
  State& s = state_->edit();
  s.adam = nn::Adam(s.parameters, options);
}

bool PoseModel::on_device() const {
  return state_->device != nullptr;
}

void PoseModel::initialize(uint64_t seed) {
  State& s = state_->edit();
  nn::Initializer init(seed);
  s.backbone.initialize(init);
  s.head_hidden.init_default(s.head_block.values(), init);
  s.head_out.init_default(s.head_block.values(), init);
  if (s.fusion) {
    s.fusion->initialize(s.fusion_block.values(), init);
    const float scale = float(s.config.fusion_init_scale);
    float* weights = s.fusion_block.values();
    for (size_t i = 0; i < s.fusion_block.size(); ++i) weights[i] *= scale;
  }
}

uint64_t PoseModel::updates() const {
  return state_->adam.steps();
}
double PoseModel::learning_rate(nn::ParameterGroup group) const {
  return state_->adam.learning_rate(group);
}

size_t PoseModel::samples_per_step() const {
  return size_t(state_->config.pose_batch) * size_t(state_->config.accumulation_steps);
}

std::vector<ParameterRange> PoseModel::gradient_ready_order() const {
  const State& s = *state_;
  // The heads and the fusion, registered after the backbone, then the backbone.
  const size_t head = s.head_block.offset();
  return {{head, s.parameters.size() - head}, {0, head}};
}

bool PoseModel::cross_view_fusion() const {
  return state_->fusion.has_value();
}

size_t PoseModel::loss_sums_size() const {
  return state_->fusion ? 9 : 5;
}

void PoseModel::set_loss_scale(double scale) {
  if (scale != 1.0) throw InvalidArgument("PoseModel: the step is fp32, without a loss scale");
}

void PoseModel::begin_step(const data::TrainingSample& sample) {
  state_->one_sample = {sample};
  begin_step(state_->one_sample);
}

void PoseModel::begin_step(const std::vector<data::TrainingSample>& samples) {
  State& s = *state_;
  if (samples.empty()) throw InvalidArgument("PoseModel::begin_step: no samples");
  s.times = PhaseTimes{};
  s.times.labels = &kPosePhases;
  s.step_samples = &samples;
  s.per_batch = std::min(size_t(s.config.pose_batch), samples.size());
  s.used_batches = 0;
  if (s.device) {
    s.copies.send();
    s.device->zero_gradients();
    s.copies.stepped();
  } else {
    std::fill(s.parameters.grads().begin(), s.parameters.grads().end(), 0.0f);
  }
}

LossSums PoseModel::accumulate(RandomKey, int) {
  State& s = *state_;
  if (!s.step_samples) throw InvalidArgument("PoseModel::accumulate before begin_step");
  const std::vector<data::TrainingSample>& samples = *s.step_samples;
  const size_t first = s.used_batches * s.per_batch;
  if (first >= samples.size()) {
    throw InvalidArgument("PoseModel::accumulate: the step's " + std::to_string(samples.size()) +
                          " samples are used up");
  }
  if (s.batches.size() <= s.used_batches) s.batches.emplace_back();
  MicroBatch& b = s.batches[s.used_batches++];
  s.load(&samples[first], std::min(s.per_batch, samples.size() - first), &b);
  s.forward(&b, int(s.used_batches - 1));
  s.laps.start();
  const PoseSums sums = s.sums(b);
  s.laps.to(&s.times.composite_loss);
  return sums.values(bool(s.fusion));
}

StepResult PoseModel::end_step(const LossSums& global,
                               const std::function<void(ParameterRange)>& ready) {
  State& s = *state_;
  const PoseSums whole = PoseSums::from(global);
  for (size_t i = 0; i < s.used_batches; ++i) s.backward(&s.batches[i], int(i), whole);
  if (s.device) s.device->synchronize();  // the gradients are final before NCCL reads them
  // The heads' and the fusion's gradients are final after the first micro-batch's backward only
  // when there is one; hand both ranges over once every micro-batch is done.
  const std::vector<ParameterRange> order = gradient_ready_order();
  if (ready) {
    for (const ParameterRange& range : order) ready(range);
  }
  s.step_samples = nullptr;
  StepResult result;
  const auto mean = [](double sum, double count) { return count > 0 ? sum / count : 0.0; };
  const double loss_3d = mean(whole.joints_3d_l1, whole.joints_3d);
  const double loss_2d = mean(whole.joints_2d_l1, whole.joints_2d);
  result.loss = loss_3d + s.config.w_joints_2d * loss_2d;
  result.valid_rays = int(whole.joints_3d);
  const double mpjpe_mm = 1000 * mean(whole.joint_error, whole.joints_3d);
  result.terms = {{"loss/joints_3d", "joints_3d", loss_3d},
                  {"loss/joints_2d", "joints_2d", loss_2d}};
  if (s.fusion) {
    const double raw_3d = mean(whole.raw_joints_3d_l1, whole.raw_joints_3d);
    const double raw_2d = mean(whole.raw_joints_2d_l1, whole.joints_2d);
    result.loss += raw_3d + s.config.w_joints_2d * raw_2d;
    result.terms.push_back({"loss/raw_joints_3d", "raw_joints_3d", raw_3d});
    result.terms.push_back({"loss/raw_joints_2d", "raw_joints_2d", raw_2d});
  }
  s.step_mpjpe_mm = mpjpe_mm;
  result.psnr = std::nan("");  // no colour
  result.times = s.times;
  return result;
}

size_t PoseModel::activation_bytes() const {
  const State& s = *state_;
  if (s.device) return s.device->activation_bytes();
  size_t bytes = s.recompute_workspace.bytes();
  for (const MicroBatch& b : s.batches) bytes += b.workspace.bytes();
  return bytes;
}

float* PoseModel::gradients() {
  return state_->step_gradients();
}

double PoseModel::gradient_norm() {
  return state_->step_gradient_norm();
}

void PoseModel::update(double gradient_norm) {
  state_->step_update(gradient_norm, nn::Adam::kAllGroups);
}

const PhaseTimes& PoseModel::phase_times() const {
  return state_->times;
}

StepWork PoseModel::step_work() const {
  return {"instants", samples_per_step()};
}

Scalar PoseModel::quality(const StepResult&) const {
  return {"train/mpjpe_mm", "mpjpe_mm", state_->step_mpjpe_mm};
}

void PoseModel::render(const data::TrainingSample&, const std::vector<float>&, RandomKey,
                       std::vector<float>*, std::vector<float>*,
                       const std::function<void(int, int)>&, RenderedParts*) {
  throw InvalidArgument(
      "the pose model draws no pixels: mvibr eval reports its joint errors and mvibr render "
      "draws its skeletons");
}

std::vector<PosePrediction> PoseModel::predict(const std::vector<data::TrainingSample>& samples) {
  State& s = *state_;
  std::vector<PosePrediction> predictions;
  MicroBatch b;
  const size_t J = size_t(s.joints);
  s.copies.send();
  for (size_t first = 0; first < samples.size(); first += size_t(s.config.pose_batch)) {
    const size_t count = std::min(size_t(s.config.pose_batch), samples.size() - first);
    s.load(&samples[first], count, &b);
    s.forward(&b, 0);
    const size_t V = size_t(b.views);
    for (size_t i = 0; i < count; ++i) {
      PosePrediction p;
      p.joints_world.assign(b.joints.begin() + long(i * J * 3),
                            b.joints.begin() + long((i + 1) * J * 3));
      p.joints_image.assign(b.points.begin() + long(i * V * J * 2),
                            b.points.begin() + long((i + 1) * V * J * 2));
      p.confidences.assign(b.weights.begin() + long(i * V * J),
                           b.weights.begin() + long((i + 1) * V * J));
      p.triangulated.assign(b.triangulated.begin() + long(i * J),
                            b.triangulated.begin() + long((i + 1) * J));
      if (s.fusion) {
        p.raw_joints_world.assign(b.raw_joints.begin() + long(i * J * 3),
                                  b.raw_joints.begin() + long((i + 1) * J * 3));
        p.raw_joints_image.assign(b.raw_points.begin() + long(i * V * J * 2),
                                  b.raw_points.begin() + long((i + 1) * V * J * 2));
        p.raw_triangulated.assign(b.raw_triangulated.begin() + long(i * J),
                                  b.raw_triangulated.begin() + long((i + 1) * J));
      }
      predictions.push_back(std::move(p));
    }
  }
  return predictions;
}

StepResult PoseModel::train_step(const std::vector<data::TrainingSample>& samples) {
  begin_step(samples);
  state_->per_batch = samples.size();  // one micro-batch of them all
  return end_step(accumulate(RandomKey{}, 0), {});
}

}  // namespace mvibr::train
