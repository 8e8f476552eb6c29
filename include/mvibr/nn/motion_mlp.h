// DynIBaR's motion network (its MotionMLP) on the CPU, forward and hand-written backward.
// - A point and a time (x, y, z, t) to its trajectory's coefficients on the learnable basis of
//   trajectory.h. The GPU version (cuda_motion_mlp.h) uses the same parameter and buffer layouts.
// - The published module, read in google/dynibar ibrnet/mlp_network.py: PeriodicEmbed of the
//   input with max_freq = N_freq = num_freqs, linear spacing (4 + 4 x 2 x 16 = 132 values);
//   pts_linears: Linear(132, 256), then Linear(256, 256) seven times, except that the layer after
//   each of `skips` = [4] takes cat([embedding, h]) (the embedding first: 132 + 256 = 388
//   inputs), a ReLU after every one; coeff_linear Linear(256, 3 K), weight and bias zero at
//   initialisation; the output divided by sf_mag_div. No other initialisation: the hidden layers
//   keep nn.Linear's defaults (DynIBaR never applies its weights_init to this module).
// - The model (ibrnet/model.py) builds MotionMLP(num_basis=args.num_basis) alone: sf_mag_div 1,
//   D 8, W 256, skips [4], num_freqs 16, and K from config.py's --num_basis, 6 (the monocular
//   config, train_kid-running.txt, keeps it; the class's own default, 4, is never used).
//   533,010 parameters.
// - Its input (render_ray.py): world-space sample positions and t = frame / num_frames
//   (monocular.py's ref_time); its output [n, 3 K] is [x's K | y's K | z's K], the
//   coefficients' layout in trajectory.h.
// - Parameters under PyTorch's names, "<prefix>pts_linears.<i>.weight" / ".bias" and
//   "<prefix>coeff_linear.weight" / ".bias", prefix "motion_mlp." for DynIBaR's checkpoint key
//   of that name, all in ParameterGroup::kMlp (lrate_mlp).
// - Callers own the buffers, as layers.h's: the forward fills `saved` (saved_size(n) values) for
//   the backward, which works in `scratch` (scratch_size(n)). No threads of its own, like
//   Linear (relu_backward's element-wise team aside, outside parallel regions): a model runs
//   chunks of points in parallel around it, each with its own gradient slot.
// - Memory at the published size: `saved` holds 2,568 floats a point (10 KiB: the embedding, the
//   eight h_i and the skip's cat([embedding, h_4]), whose copy keeps layer 5 one GEMM), `scratch`
//   1,050.
// - The gradient of the input is computed only when asked for (grad_xyzt not null): cross-time
//   rendering moves points by the trajectories, and their positions may need it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/nn/layers.h"
#include "mvibr/nn/parameters.h"
#include "mvibr/nn/periodic_embed.h"

namespace mvibr::nn {

struct MotionMlpOptions {
  int basis = 6;                 // K, coefficients per axis (num_basis)
  int depth = 8;                 // D, hidden layers (pts_linears)
  int width = 256;               // W
  int inputs = 4;                // input_ch: x, y, z, t
  int frequencies = 16;          // num_freqs: the embedding's max_freq and count, linear spacing
  std::vector<int> skips = {4};  // after these layers the embedding joins: cat([embedding, h])
  double sf_mag_div = 1.0;       // the output is divided by it
  Operands linear_operands = Operands::kFp32;  // every layer's
};

// Where the forward's buffers sit in `saved`, and the backward's in `scratch`, for n points (the
// GPU version uses the same layout). Every buffer is row-major [n, columns].
struct MotionMlpLayout {
  size_t embedding = 0;        // [n, E], E = the embedding's width
  std::vector<size_t> hidden;  // per layer i: its output h_i [n, W] after the ReLU
  std::vector<size_t> concat;  // per layer i: cat([embedding, h_i]) [n, E + W] when i is a
                               // skip, else SIZE_MAX
  size_t saved_size = 0;
  // scratch
  size_t grad_output = 0;         // [n, 3 K]: grad_coefficients / sf_mag_div
  size_t grad_a = 0, grad_b = 0;  // [n, W] each, in turns: dL/dh_i
  size_t grad_concat = 0;         // [n, E + W]: the gradient of a skip layer's input
  size_t grad_embedding = 0;      // [n, E]: dL/d(embedding), summed over its consumers
  size_t scratch_size = 0;

  // Where the input of hidden layer `layer` sits in `saved` (layer = depth: the head's): the
  // embedding, h_{layer-1}, or their concatenation after a skip.
  size_t input_of(int layer) const {
    if (layer == 0) return embedding;
    const size_t joined = concat[size_t(layer - 1)];
    return joined != SIZE_MAX ? joined : hidden[size_t(layer - 1)];
  }
};

// The layout for n points of a network with these options (`embedded`: the embedding's width).
MotionMlpLayout motion_mlp_layout(const MotionMlpOptions& options, int embedded, size_t n);
// Whether the embedding joins h after hidden layer `layer` (it is one of `skips`).
bool motion_mlp_skip_after(const MotionMlpOptions& options, int layer);

class MotionMlp {
 public:
  // Registers the parameters under `prefix` (e.g. "motion_mlp."), back to back, in kMlp. The set
  // must outlive this. InvalidArgument on a non-positive size or a skip outside [0, depth - 2].
  MotionMlp(ParameterSet& set, const std::string& prefix, MotionMlpOptions options = {});

  // nn.Linear's defaults for pts_linears, zeros for coeff_linear (weight and bias).
  void initialize(Initializer& init);

  const MotionMlpOptions& options() const { return options_; }
  const PeriodicEmbed& embed() const { return embed_; }
  int outputs() const { return 3 * options_.basis; }
  size_t parameter_offset() const { return block_.offset(); }
  size_t parameter_count() const { return block_.size(); }
  // The layers (where each one's parameters sit in this network's run), for the GPU version.
  const std::vector<Linear>& hidden_layers() const { return hidden_; }
  const Linear& head() const { return head_; }
  bool skip_after(int layer) const { return motion_mlp_skip_after(options_, layer); }

  MotionMlpLayout layout(size_t n) const { return motion_mlp_layout(options_, embed_.width(), n); }
  size_t saved_size(size_t n) const { return layout(n).saved_size; }
  size_t scratch_size(size_t n) const { return layout(n).scratch_size; }

  // xyzt [n, inputs] -> coefficients [n, 3 K] (overwritten); fills `saved` for the backward.
  // `params` is this network's run (parameter_count() values from parameter_offset()).
  template <typename T>
  void forward(const T* params, size_t n, const T* xyzt, T* saved, T* coefficients) const;
  // From the forward's `saved` and grad_coefficients [n, 3 K]: accumulates (+=) the parameter
  // gradients into `grads` (the run's layout) and overwrites grad_xyzt [n, inputs] (nullable:
  // then the input's gradient is not computed at all). The forward's input is not needed: the
  // embedding holds it.
  template <typename T>
  void backward(const T* params, T* grads, size_t n, const T* saved, const T* grad_coefficients,
                T* grad_xyzt, T* scratch) const;

  // The same on the set's float values, accumulating into its grads.
  void forward(size_t n, const float* xyzt, float* saved, float* coefficients) const;
  void backward(size_t n, const float* saved, const float* grad_coefficients, float* grad_xyzt,
                float* scratch) const;

 private:
  MotionMlpOptions options_;
  ParameterBlock block_;
  PeriodicEmbed embed_;
  std::vector<Linear> hidden_;
  Linear head_;
};

}  // namespace mvibr::nn
