// The training configuration under the names IBRNet and DynIBaR users know.
// - `key = value` lines, as in IBRNet's configs/*.txt, from a file and the command line (the
//   command line wins); unknown keys and bad values are errors naming the key.
// - One table of keys (config.cpp) drives parsing, checking, --help, to_text and so the
//   cross-rank comparison; enumerated options are enums, named once (core/enum_names.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/core/enum_names.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/render/volume_rendering.h"
#include "mvibr/train/ray_batch.h"

namespace mvibr::train {

// Where the step runs: auto is the rank's GPU (local rank % devices) when this build has CUDA
// and the process sees a device, else the CPU.
enum class Device { kAuto, kCpu, kCuda };
// The GPU step's dense-layer GEMMs (nn::cuda::GemmPrecision); parameters, activations and
// gradients stay fp32.
enum class Precision { kFp32, kBf16, kFp16 };
enum class LrScaling { kNone, kLinear, kSqrt };  // learning rates x 1, x ranks, x sqrt(ranks)
enum class AllreduceDtype { kFp32, kBf16 };      // how gradients travel
enum class NanPolicy { kSkip, kStop };           // on a non-finite loss or gradient
// What trains: IBRNet, DynIBaR on a video, or the multi-view pose model on a pose data set.
enum class ModelKind { kIbrnet, kDynibar, kPose };

struct TrainConfig {
  // Run
  std::string expname = "synthetic";
  std::string basedir = "runs";  // the run directory is basedir/expname
  std::string datadir;           // a folder written by `mvibr prep`
  uint64_t seed = 0;
  int n_iters = 250000;
  int i_print = 100, i_img = 500, i_weights = 10000;
  int keep_checkpoints = 3;
  std::string ckpt_path;   // resume from this checkpoint instead of the newest in the run
  bool no_reload = false;  // start fresh even when the run has checkpoints
  // A new run's initial weights (an imported IBRNet model, another run's checkpoint), with a
  // fresh optimiser at step 0; unused once the run has checkpoints of its own, so a requeued
  // fine-tuning job continues where it stopped.
  std::string init_ckpt;
  // Data
  int N_rand = 512;       // rays per step (per rank)
  int chunk_size = 4096;  // rays per forward chunk when rendering
  int num_source_views = 10;
  int source_pool = 20;  // sources are drawn from this many nearest views
  SampleMode sample_mode = SampleMode::kUniform;
  double center_ratio = 0.8;
  int queue_depth = 4;
  // Model
  ModelKind model = ModelKind::kIbrnet;
  nn::ResUNetPreset feature_net = nn::ResUNetPreset::kIbrnet;
  nn::ConvAlgorithm conv_algorithm = nn::ConvAlgorithm::kDirect;
  int coarse_feat_dim = 32, fine_feat_dim = 32;
  bool coarse_only = false;
  bool anti_alias_pooling = true;
  int N_samples = 64, N_importance = 64;
  bool inv_uniform = false, det = false, white_bkgd = false;
  DeltaMode delta = DeltaMode::kUnit;  // unit (IBRNet) | interval (NeRF)
  Device device = Device::kAuto;
  // fp16 scales the loss dynamically (loss_scale.h), from loss_scale, doubling after
  // loss_scale_window finite steps. The CPU step is fp32 only.
  Precision precision = Precision::kFp32;
  bool flush_subnormals = true;  // x86 FTZ and DAZ while training (core/subnormals.h)
  double loss_scale = 65536;
  int loss_scale_window = 2000;
  // Optimisation
  double lrate_feature = 1e-3, lrate_mlp = 5e-4;
  double lrate_decay_factor = 0.5;
  int lrate_decay_steps = 50000;
  double grad_clip = 0;  // max global gradient norm; 0 disables clipping
  // Adam (IBRNet's), AdamW or LAMB (nn/optimizer.h), with decoupled weight decay for the latter
  // two, sparing 1-D tensors (biases, norm scales) unless weight_decay_1d.
  nn::OptimizerKind optimizer = nn::OptimizerKind::kAdam;
  double weight_decay = 0;
  bool weight_decay_1d = false;
  // IBRNet's step decay, or a linear warm-up over warmup_steps then a cosine to
  // min_lr_ratio x the initial rates at n_iters (nn::cosine_learning_rate).
  nn::LrSchedule lr_schedule = nn::LrSchedule::kStep;
  int warmup_steps = 0;
  double min_lr_ratio = 0;
  // DynIBaR (model = dynibar), named and defaulted as its configs/train_kid-running.txt and
  // config.py. num_frames is the video's (the trajectory basis's rows; 0: taken from the data).
  int num_frames = 0, num_basis = 6, max_range = 42;
  int init_decay_epoch = 400;
  double decay_rate = 10, w_disp = 0.1, w_flow = 0.01, w_cycle = 0.1, cycle_factor = 0.1;
  bool anneal_cycle = true;
  double w_reg = 0.05, w_skew_entropy = 5e-4, w_distortion = 1e-3;
  // The pose model (model = pose; train/pose_model.h): instants per micro-batch, the backbone's
  // extra channels that feed the confidence head and its hidden width, the soft-argmax's
  // multiplier (learnable triangulation's heatmap_multiplier), the 2D term's weight, whether
  // the triangulation weighs views by confidence (else every view alike), whether each view's
  // heatmaps are fused with the other views' (nn/cross_view_fusion.h) before the soft-argmax,
  // and whether the backbone's activations are recomputed in the backward, an instant at a time.
  int pose_batch = 4;
  int confidence_channels = 16, confidence_hidden = 32;
  double heatmap_multiplier = 100;
  double w_joints_2d = 1;
  bool use_confidences = true;
  bool cross_view_fusion = false;
  // The fusion weights' own learning rate (ParameterGroup::kFusion). Each fused heatmap cell sums
  // P = 1024 cells through its weights, so Adam moving every weight by ~lr a step moves a fused
  // logit by ~P lr a step, times heatmap_multiplier in the soft-argmax: at lrate_mlp (1e-3) that
  // swamps the heatmaps (docs/features.md has the measurements).
  double lrate_fusion = 1e-5;
  // The fusion weights start at fusion_init_scale x the published U(0, 0.1) (1: as published).
  // The published weights sum a view's 1024 cells into every fused cell, a fixed random pattern
  // the heatmaps must first outgrow; from zeros the fused map starts as 0.4 of the view's own
  // and fusion grows in: on configs/pose_synthetic.txt at lrate_fusion 1e-5, 97.9 mm fused
  // (98.7 raw) from zeros against 152.4 (130.7) from the published init (docs/features.md).
  double fusion_init_scale = 0;
  bool recompute_backbone = false;
  // Data parallelism. A step's global batch is N_rand x accumulation_steps x ranks rays: each
  // rank takes its own target view and accumulates accumulation_steps micro-steps of N_rand of
  // its rays before the update (memory for N_rand rays, the batch of all of them).
  int accumulation_steps = 1;
  LrScaling lr_scaling = LrScaling::kNone;
  double bucket_mb = 25;          // gradient all-reduce bucket size
  bool overlap_allreduce = true;  // all-reduce buckets while the backward pass goes on
  AllreduceDtype allreduce_dtype = AllreduceDtype::kFp32;
  double watchdog_s = 300;  // longest wait for the other ranks before ending the job
  NanPolicy nan_policy = NanPolicy::kSkip;
  bool allow_shared_shards = false;  // fewer shards than ranks: share them round-robin

  // The config as `key = value` lines in a fixed order, every key except ckpt_path, no_reload
  // and init_ckpt (they say where a run starts, not what it trains): stored in checkpoints and
  // compared across ranks; parsing it gives this config back.
  std::string to_text() const;
};

// Parses `args` (the command line after the subcommand: `--config FILE` and `--key value`
// pairs). Throws InvalidArgument naming the key and the file or "command line" on unknown keys,
// bad values and violated constraints (N_rand >= 1, N_samples >= 1, ...). Returns false and
// prints the option list when --help is given.
bool parse_train_config(const std::vector<std::string>& args, TrainConfig* config);

// The whole option list, for `mvibr train --help`.
std::string train_config_help();

// The keys of the table, in its order, and whether to_text carries each.
struct ConfigKeyName {
  std::string name;
  bool in_text;
};
std::vector<ConfigKeyName> train_config_keys();

}  // namespace mvibr::train

namespace mvibr {
template <>
struct EnumNames<DeltaMode> {
  static constexpr std::pair<DeltaMode, const char*> values[] = {
      {DeltaMode::kUnit, "unit"}, {DeltaMode::kInterval, "interval"}};
};
template <>
struct EnumNames<nn::OptimizerKind> {
  static constexpr std::pair<nn::OptimizerKind, const char*> values[] = {
      {nn::OptimizerKind::kAdam, "adam"},
      {nn::OptimizerKind::kAdamW, "adamw"},
      {nn::OptimizerKind::kLamb, "lamb"}};
};
template <>
struct EnumNames<nn::LrSchedule> {
  static constexpr std::pair<nn::LrSchedule, const char*> values[] = {
      {nn::LrSchedule::kStep, "step"}, {nn::LrSchedule::kCosine, "cosine"}};
};
template <>
struct EnumNames<train::Device> {
  static constexpr std::pair<train::Device, const char*> values[] = {
      {train::Device::kAuto, "auto"}, {train::Device::kCpu, "cpu"}, {train::Device::kCuda, "cuda"}};
};
template <>
struct EnumNames<train::Precision> {
  static constexpr std::pair<train::Precision, const char*> values[] = {
      {train::Precision::kFp32, "fp32"},
      {train::Precision::kBf16, "bf16"},
      {train::Precision::kFp16, "fp16"}};
};
template <>
struct EnumNames<train::LrScaling> {
  static constexpr std::pair<train::LrScaling, const char*> values[] = {
      {train::LrScaling::kNone, "none"},
      {train::LrScaling::kLinear, "linear"},
      {train::LrScaling::kSqrt, "sqrt"}};
};
template <>
struct EnumNames<train::AllreduceDtype> {
  static constexpr std::pair<train::AllreduceDtype, const char*> values[] = {
      {train::AllreduceDtype::kFp32, "fp32"}, {train::AllreduceDtype::kBf16, "bf16"}};
};
template <>
struct EnumNames<train::ModelKind> {
  static constexpr std::pair<train::ModelKind, const char*> values[] = {
      {train::ModelKind::kIbrnet, "ibrnet"},
      {train::ModelKind::kDynibar, "dynibar"},
      {train::ModelKind::kPose, "pose"}};
};
template <>
struct EnumNames<train::NanPolicy> {
  static constexpr std::pair<train::NanPolicy, const char*> values[] = {
      {train::NanPolicy::kSkip, "skip"}, {train::NanPolicy::kStop, "stop"}};
};
}  // namespace mvibr
