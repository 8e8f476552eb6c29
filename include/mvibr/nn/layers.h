// CPU layers with hand-written backward passes: Linear (its own float GEMM, BLAS in double), ELU /
// ReLU / Sigmoid, LayerNorm and masked multi-head self-attention, enough to build IBRNet's
// networks.
//
// Layers hold no activations and no parameter values, only where their parameters sit inside a
// ParameterBlock (one module's contiguous run of the ParameterSet). Every call takes that run as
// a pointer: the set's float values in training, a double copy in tests (the finite-difference
// oracle), or a small per-chunk gradient slot, all with the same code. Callers own the buffers
// a backward pass needs (the forward inputs, and outputs where the derivative is cheaper from
// them), so a network can keep, or recompute, exactly what it wants.
//
// Rows are row-major [n, features]. Backward passes accumulate (+=) parameter gradients and
// overwrite the gradient of the input unless they say otherwise. float and double are
// instantiated. Large element-wise and per-sequence work runs in parallel with OpenMP when called
// outside a parallel region, and serially inside one, with the same results for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/nn/parameters.h"

namespace mvibr::nn {

// Registers one module's parameters back to back in a ParameterSet, under "<prefix><name>", and
// hands out their offsets within the run. Throws InvalidArgument if anything else registers in
// between (the run must stay contiguous).
class ParameterBlock {
 public:
  ParameterBlock(ParameterSet& set, std::string prefix, ParameterGroup group);

  size_t add(const std::string& name, std::vector<int> shape);  // offset within the block
  size_t offset() const { return offset_; }                     // of the block within the set
  size_t size() const { return size_; }
  ParameterSet& set() const { return *set_; }
  float* values() const { return set_->values().data() + offset_; }
  float* grads() const { return set_->grads().data() + offset_; }

 private:
  ParameterSet* set_;
  std::string prefix_;
  ParameterGroup group_;
  size_t offset_ = 0, size_ = 0;
};

// What follows a layer, where a caller fuses it into the layer's pass (Linear::forward, the
// feature network's instance norm).
enum class Activation { kNone, kRelu, kElu };

// What a CPU layer multiplies (Linear, and the convolutions above 1x1):
// - kFp32: its operands as the callers hold them;
// - kBf16: inputs, weights and output gradients rounded to bfloat16 (to nearest even), products
//   summed in fp32; outputs, biases and every gradient stay fp32.
enum class Operands { kFp32, kBf16 };

// InvalidArgument, in one line, unless this CPU runs Linear layers with these operands (bf16
// needs AVX-512).
void check_linear_operands(Operands operands);

// Declares the floats [values, values + count) unchanging while it lives: a network's weights
// over a pass. Linear layers with bf16 operands then round weights there once per thread and
// scope, where otherwise each call compares them with the values it last rounded. Made and ended
// outside parallel regions.
class FrozenWeights {
 public:
  FrozenWeights(const float* values, size_t count);
  ~FrozenWeights();
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;

 private:
  uint64_t generation_;
};

// y[n,out] = x[n,in] W^T + b with PyTorch's weight layout W[out,in] ("<name>.weight", and
// "<name>.bias" when it has one). Its GEMMs multiply `operands` (bf16: bf16_gemm.h), in float and
// in double alike; the bias and its gradient are summed unrounded.
class Linear {
 public:
  Linear(ParameterBlock& block, const std::string& name, int in, int out, bool bias = true,
         Operands operands = Operands::kFp32);

  int in() const { return in_; }
  int out() const { return out_; }
  // Where the weight and the bias (when it has one) sit in the block's run, for the GPU versions
  // of the networks, which read the same layout.
  size_t weight_offset() const { return weight_; }
  size_t bias_offset() const { return bias_; }
  bool has_bias() const { return has_bias_; }
  // nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  void init_default(float* params, Initializer& init) const;
  // IBRNet's weights_init: kaiming_normal_ (fan_in) weight, zero bias.
  void init_kaiming(float* params, Initializer& init) const;

  // y = activation(x W^T + b), the bias and the activation in one pass over the GEMM's output.
  template <typename T>
  void forward(const T* params, size_t n, const T* x, T* y,
               Activation activation = Activation::kNone) const;
  // grad_x (nullable) is overwritten, or accumulated into when `accumulate`.
  template <typename T>
  void backward(const T* params, T* grads, size_t n, const T* x, const T* grad_y, T* grad_x,
                bool accumulate = false) const;

  // The layer on the input columns [first, first + count) alone, x [n, count]: y = x
  // W[:, first:first+count]^T, plus b when `with_bias` (and then b's gradient too). A network
  // whose input concatenates parts of different multiplicity applies each part on its own rows:
  // IBRNet's base_fc sees one mean and variance per sample next to the features of each view.
  template <typename T>
  void forward_slice(const T* params, size_t n, int first, int count, bool with_bias, const T* x,
                     T* y) const;
  template <typename T>
  void backward_slice(const T* params, T* grads, size_t n, int first, int count, bool with_bias,
                      const T* x, const T* grad_y, T* grad_x) const;

 private:
  int in_, out_;
  size_t weight_, bias_;
  bool has_bias_;
  Operands operands_;
};

// In place. The backward passes take the activation's output (all three derivatives are cheap
// from it, so the pre-activation need not be kept) and scale the gradient in place.
template <typename T>
void elu(size_t n, T* x);  // alpha 1
template <typename T>
void elu_backward(size_t n, const T* y, T* grad);
template <typename T>
void relu(size_t n, T* x);
template <typename T>
void relu_backward(size_t n, const T* y, T* grad);
template <typename T>
void sigmoid(size_t n, T* x);
template <typename T>
void sigmoid_backward(size_t n, const T* y, T* grad);

// Over the last dimension, biased variance, PyTorch's nn.LayerNorm ("<name>.weight", ".bias").
class LayerNorm {
 public:
  LayerNorm(ParameterBlock& block, const std::string& name, int dim, double eps);

  int dim() const { return dim_; }
  double eps() const { return eps_; }
  size_t weight_offset() const { return weight_; }
  size_t bias_offset() const { return bias_; }
  void init(float* params) const;  // weight 1, bias 0

  // Saves the normalised input xhat[n,dim] and 1/sqrt(var + eps) rstd[n] for the backward.
  template <typename T>
  void forward(const T* params, size_t n, const T* x, T* y, T* xhat, T* rstd) const;
  template <typename T>
  void backward(const T* params, T* grads, size_t n, const T* xhat, const T* rstd, const T* grad_y,
                T* grad_x) const;

 private:
  int dim_;
  double eps_;
  size_t weight_, bias_;
};

// Which side of the score matrix a 0 in the validity mask fills with -1e9.
enum class AttentionMask {
  kKeys,     // invalid keys get no attention (the usual transformer key-padding mask)
  kQueries,  // invalid queries attend uniformly to every key: what IBRNet's code does, as its
             // [B,L,1] mask broadcasts over the key axis
};

// Self-attention along sequences of `len` tokens, `batch` sequences: bias-free projections
// w_qs, w_ks, w_vs, fc, scores q/sqrt(d_k) . k masked_fill(-1e9) where invalid, softmax over keys,
// fc(concat heads) + residual, then layer_norm (eps 1e-6). The module of "Attention Is All You
// Need" as IBRNet's ray transformer uses it (no dropout, no feed-forward).
class MultiHeadAttention {
 public:
  // Its projections multiply `operands` (Linear); the scores and their weighted sums are fp32.
  MultiHeadAttention(ParameterBlock& block, const std::string& name, int n_head, int d_model,
                     int d_k, int d_v, AttentionMask mask, Operands operands = Operands::kFp32);

  int d_model() const { return d_model_; }
  int n_head() const { return n_head_; }
  int d_k() const { return d_k_; }
  int d_v() const { return d_v_; }
  AttentionMask mask() const { return mask_; }
  // The sublayers, for the GPU version of the network that holds this module.
  const Linear& w_qs() const { return w_qs_; }
  const Linear& w_ks() const { return w_ks_; }
  const Linear& w_vs() const { return w_vs_; }
  const Linear& fc() const { return fc_; }
  const LayerNorm& layer_norm() const { return layer_norm_; }
  void init_default(float* params, Initializer& init) const;  // nn.Linear defaults, LayerNorm 1/0

  // Elements of the `saved` buffer the forward fills and the backward reads, and of the
  // backward's scratch buffer.
  size_t saved_size(size_t batch, size_t len) const;
  size_t scratch_size(size_t batch, size_t len) const;

  // x, y [batch*len, d_model]; valid [batch*len] is 1 for a valid token and 0 otherwise.
  template <typename T>
  void forward(const T* params, size_t batch, size_t len, const T* x, const T* valid, T* saved,
               T* y) const;
  template <typename T>
  void backward(const T* params, T* grads, size_t batch, size_t len, const T* x, const T* valid,
                const T* saved, const T* grad_y, T* grad_x, T* scratch) const;

 private:
  int n_head_, d_model_, d_k_, d_v_;
  AttentionMask mask_;
  Linear w_qs_, w_ks_, w_vs_, fc_;
  LayerNorm layer_norm_;
};

}  // namespace mvibr::nn
