// The training configuration under the names IBRNet and DynIBaR users know (`key = value` lines,
// as in IBRNet's configs/*.txt), read from a file and the command line (the command line wins).
// Unknown keys and bad values are errors naming the key and where it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mvibr::train {

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
  int source_pool = 20;                 // sources are drawn from this many nearest views
  std::string sample_mode = "uniform";  // uniform | center
  double center_ratio = 0.8;
  int queue_depth = 4;
  // Model
  std::string feature_net = "ibrnet";  // ibrnet | small
  int coarse_feat_dim = 32, fine_feat_dim = 32;
  bool coarse_only = false;
  bool anti_alias_pooling = true;
  int N_samples = 64, N_importance = 64;
  bool inv_uniform = false, det = false, white_bkgd = false;
  std::string delta = "unit";  // unit (IBRNet) | interval (NeRF)
  // auto | cpu | cuda: where the step runs (auto: the rank's GPU, local rank % devices, when
  // this build has CUDA and the process sees a device; else the CPU).
  std::string device = "auto";
  // fp32 | bf16 | fp16: the GPU step's dense-layer GEMMs (nn::cuda::GemmPrecision); parameters,
  // activations and gradients stay fp32. fp16 scales the loss dynamically (loss_scale.h), from
  // loss_scale, doubling after loss_scale_window finite steps. The CPU step is fp32 only.
  std::string precision = "fp32";
  double loss_scale = 65536;
  int loss_scale_window = 2000;
  // Optimisation
  double lrate_feature = 1e-3, lrate_mlp = 5e-4;
  double lrate_decay_factor = 0.5;
  int lrate_decay_steps = 50000;
  double grad_clip = 0;  // max global gradient norm; 0 disables clipping
  // Data parallelism. A step's global batch is N_rand x accumulation_steps x ranks rays: each
  // rank takes its own target view and accumulates accumulation_steps micro-steps of N_rand of
  // its rays before the update (memory for N_rand rays, the batch of all of them).
  int accumulation_steps = 1;
  std::string lr_scaling = "none";       // none | linear | sqrt: rates x ranks or x sqrt(ranks)
  double bucket_mb = 25;                 // gradient all-reduce bucket size
  bool overlap_allreduce = true;         // all-reduce buckets while the backward pass goes on
  std::string allreduce_dtype = "fp32";  // fp32 | bf16: how gradients travel
  double watchdog_s = 300;               // longest wait for the other ranks before ending the job
  std::string nan_policy = "skip";       // skip | stop on a non-finite loss or gradient
  bool allow_shared_shards = false;      // fewer shards than ranks: share them round-robin

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

}  // namespace mvibr::train
