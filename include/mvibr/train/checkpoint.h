// Training checkpoints: everything a run needs to continue exactly where it stopped, in one HDF5
// file that other tools can read by name. Each parameter is its own float32 dataset named by its
// PyTorch module path in PyTorch's shape ("model/net_coarse.base_fc.0.weight"), so h5py and a
// PyTorch converter need nothing of mvibr; Adam's moments mirror that under
// "optimizer/exp_avg/<name>" and "optimizer/exp_avg_sq/<name>". Root attributes: format
// "mvibr-checkpoint", format_version 1, step, mvibr_version, config, random_seed, lr_feature and
// lr_mlp (the rates of the next update); dataset data_cursors [ranks, 2] (epoch, position), or
// [0, 2] in a file of weights alone (tools/torch_checkpoint.py imports published ones so), whose
// training starts the data from the beginning.
//
// A checkpoint is written under a temporary name, flushed, fsynced and renamed, so a crash leaves
// the previous file or the new one, never a half-written one under the final name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/nn/parameters.h"

namespace mvibr::train {

// What a checkpoint holds besides the parameters and Adam (whose step count is the run's step).
struct TrainingState {
  std::string config;                       // the run's configuration, as text
  std::vector<data::ReaderCursor> cursors;  // every rank's data stream, by rank (none: weights)
  uint64_t random_seed = 0;                 // RandomKey::seed; the key's step is the run's step
};

inline constexpr long long kCheckpointFormatVersion = 1;

// Whether a file name is a temporary that save_checkpoint writes before its rename
// ("ckpt-00001000.h5.tmp-<pid>"): what a writer killed mid-write leaves behind.
bool is_checkpoint_temporary(const std::string& file_name);

// "<run_dir>/checkpoints/ckpt-00001000.h5" for step 1000.
std::string checkpoint_path(const std::string& run_dir, uint64_t step);

// The complete checkpoint of `run_dir` with the highest step, or "" when there is none
// (temporaries and other files are ignored).
std::string latest_checkpoint(const std::string& run_dir);

// Writes the checkpoint of step adam.steps() atomically and returns its path; then deletes all
// but the `keep_last` newest checkpoints (0 keeps all; the one just written is always kept).
// A non-finite value is an InvalidArgument naming the parameter, and leaves any existing file
// untouched; disk failures are RuntimeFailure.
std::string save_checkpoint(const std::string& run_dir, const nn::ParameterSet& params,
                            const nn::Adam& adam, const TrainingState& state, int keep_last);

// Restores parameter values, Adam's moments and step, and `state` from `path`. The file must hold
// exactly the parameters of `params`, each with its shape, and finite values; everything is
// validated before anything is modified. Errors are one-line InvalidArguments naming the file
// and, where one is at fault, the parameter.
void load_checkpoint(const std::string& path, nn::ParameterSet* params, nn::Adam* adam,
                     TrainingState* state);

// The parameters of `path` alone, checked as load_checkpoint checks them (Adam's state and the
// training state are read and dropped); returns the checkpoint's step.
uint64_t load_weights(const std::string& path, nn::ParameterSet* params);

// What a checkpoint holds, read and checked without a model (`mvibr inspect`): every header,
// every parameter and both of Adam's moments under the same names and shapes, every value finite
// and exp_avg_sq >= 0. Errors are one-line InvalidArguments naming the file and the dataset.
struct CheckpointSummary {
  uint64_t step = 0, random_seed = 0;
  std::string mvibr_version, config;
  double lr_feature = 0, lr_mlp = 0;
  size_t ranks = 0;  // data cursors (0: weights alone)
  struct Tensor {
    std::string name;
    std::vector<size_t> shape;
    size_t count = 0;
  };
  std::vector<Tensor> parameters;  // in name order
};
CheckpointSummary inspect_checkpoint(const std::string& path);

}  // namespace mvibr::train
