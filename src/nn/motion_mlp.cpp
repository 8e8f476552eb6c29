// DynIBaR's motion network (see motion_mlp.h) on Linear's fused GEMM + bias + ReLU. The skip
// layer's input is copied into one [n, E + W] buffer so that it stays a single GEMM with the
// published weight's column order; the backward splits that input's gradient back into the
// embedding's share and h's.
#include "mvibr/nn/motion_mlp.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {
namespace {

const MotionMlpOptions& validated(const MotionMlpOptions& o, const std::string& prefix) {
  if (o.basis < 1 || o.depth < 1 || o.width < 1 || o.inputs < 1 || o.frequencies < 1 ||
      !(o.sf_mag_div != 0.0)) {
    throw InvalidArgument("motion MLP '" + prefix +
                          "': basis, depth, width, inputs and frequencies must be positive and "
                          "sf_mag_div non-zero");
  }
  for (int s : o.skips) {
    if (s < 0 || s > o.depth - 2) {
      throw InvalidArgument("motion MLP '" + prefix + "': skip after layer " + std::to_string(s) +
                            " is outside 0.." + std::to_string(o.depth - 2) +
                            " (the layer after it must be a hidden layer)");
    }
  }
  return o;
}

// pts_linears in the published order: layer i + 1 takes the embedding too when i is a skip.
std::vector<Linear> make_hidden_layers(ParameterBlock& block, const MotionMlpOptions& o,
                                       int embedded) {
  std::vector<Linear> layers;
  for (int i = 0; i < o.depth; ++i) {
    const bool after_skip = i > 0 && motion_mlp_skip_after(o, i - 1);
    const int in = i == 0 ? embedded : after_skip ? o.width + embedded : o.width;
    layers.emplace_back(block, "pts_linears." + std::to_string(i), in, o.width, true,
                        o.linear_operands);
  }
  return layers;
}

// out[i] = [a[i] (wa values), b[i] (wb values)] for n rows.
template <typename T>
void concat_rows(size_t n, size_t wa, const T* a, size_t wb, const T* b, T* out) {
  for (size_t i = 0; i < n; ++i) {
    std::copy(a + i * wa, a + (i + 1) * wa, out + i * (wa + wb));
    std::copy(b + i * wb, b + (i + 1) * wb, out + i * (wa + wb) + wa);
  }
}

}  // namespace

bool motion_mlp_skip_after(const MotionMlpOptions& options, int layer) {
  return std::find(options.skips.begin(), options.skips.end(), layer) != options.skips.end();
}

MotionMlpLayout motion_mlp_layout(const MotionMlpOptions& options, int embedded, size_t n) {
  const size_t E = size_t(embedded), W = size_t(options.width);
  const bool any_skip = !options.skips.empty();
  MotionMlpLayout l;
  size_t at = 0;
  l.embedding = at;
  at += n * E;
  for (int i = 0; i < options.depth; ++i) {
    l.hidden.push_back(at);
    at += n * W;
  }
  for (int i = 0; i < options.depth; ++i) {
    const bool skip = motion_mlp_skip_after(options, i);
    l.concat.push_back(skip ? at : SIZE_MAX);
    if (skip) at += n * (E + W);
  }
  l.saved_size = at;
  at = 0;
  l.grad_output = at;
  at += n * size_t(3 * options.basis);
  l.grad_a = at;
  at += n * W;
  l.grad_b = at;
  at += n * W;
  l.grad_concat = at;
  if (any_skip) at += n * (E + W);
  l.grad_embedding = at;
  at += n * E;
  l.scratch_size = at;
  return l;
}

MotionMlp::MotionMlp(ParameterSet& set, const std::string& prefix, MotionMlpOptions options)
    : options_(validated(options, prefix)),
      block_(set, prefix, ParameterGroup::kMlp),
      embed_(options.inputs, FrequencySpacing::kLinear, options.frequencies, options.frequencies),
      hidden_(make_hidden_layers(block_, options_, embed_.width())),
      head_(block_, "coeff_linear", options.width, 3 * options.basis, true,
            options.linear_operands) {}

void MotionMlp::initialize(Initializer& init) {
  float* params = block_.values();
  for (const Linear& layer : hidden_) layer.init_default(params, init);
  init.constant(params + head_.weight_offset(), size_t(head_.out()) * size_t(head_.in()), 0.0f);
  init.constant(params + head_.bias_offset(), size_t(head_.out()), 0.0f);
}

template <typename T>
void MotionMlp::forward(const T* params, size_t n, const T* xyzt, T* saved, T* coefficients) const {
  const MotionMlpLayout l = layout(n);
  const size_t E = size_t(embed_.width()), W = size_t(options_.width);
  embed_.forward(n, xyzt, saved + l.embedding);
  const T* x = saved + l.embedding;
  for (int i = 0; i < options_.depth; ++i) {
    T* h = saved + l.hidden[size_t(i)];
    hidden_[size_t(i)].forward(params, n, x, h, Activation::kRelu);
    x = h;
    if (skip_after(i)) {
      T* joined = saved + l.concat[size_t(i)];
      concat_rows(n, E, saved + l.embedding, W, h, joined);
      x = joined;
    }
  }
  head_.forward(params, n, x, coefficients);
  const T divisor = T(options_.sf_mag_div);
  if (divisor != T(1)) {
    for (size_t i = 0; i < n * size_t(outputs()); ++i) coefficients[i] /= divisor;
  }
}

template <typename T>
void MotionMlp::backward(const T* params, T* grads, size_t n, const T* saved,
                         const T* grad_coefficients, T* grad_xyzt, T* scratch) const {
  const MotionMlpLayout l = layout(n);
  const size_t E = size_t(embed_.width()), W = size_t(options_.width);
  const bool want_input = grad_xyzt != nullptr;
  const T divisor = T(options_.sf_mag_div);
  const T* grad_out = grad_coefficients;
  if (divisor != T(1)) {
    T* scaled = scratch + l.grad_output;
    for (size_t i = 0; i < n * size_t(outputs()); ++i) scaled[i] = grad_coefficients[i] / divisor;
    grad_out = scaled;
  }
  const auto input_of = [&](int i) { return saved + l.input_of(i); };
  T* grad_h = scratch + l.grad_a;  // dL/dh_i, then the pre-activation's in place
  T* other = scratch + l.grad_b;
  T* grad_embedding = scratch + l.grad_embedding;
  bool embedding_written = false;  // the first contribution overwrites, later ones add
  head_.backward(params, grads, n, input_of(options_.depth), grad_out, grad_h);
  for (int i = options_.depth - 1; i >= 0; --i) {
    relu_backward(n * W, saved + l.hidden[size_t(i)], grad_h);
    const T* x = input_of(i);
    if (i == 0) {
      hidden_[0].backward(params, grads, n, x, grad_h, want_input ? grad_embedding : nullptr,
                          embedding_written);
      embedding_written = true;
    } else if (skip_after(i - 1)) {
      T* grad_joined = scratch + l.grad_concat;
      hidden_[size_t(i)].backward(params, grads, n, x, grad_h, grad_joined);
      for (size_t r = 0; r < n; ++r) {
        const T* row = grad_joined + r * (E + W);
        if (want_input) {
          T* ge = grad_embedding + r * E;
          for (size_t c = 0; c < E; ++c) ge[c] = embedding_written ? ge[c] + row[c] : row[c];
        }
        std::copy(row + E, row + E + W, other + r * W);
      }
      embedding_written = embedding_written || want_input;
      std::swap(grad_h, other);
    } else {
      hidden_[size_t(i)].backward(params, grads, n, x, grad_h, other);
      std::swap(grad_h, other);
    }
  }
  if (want_input) embed_.backward(n, saved + l.embedding, grad_embedding, grad_xyzt);
}

void MotionMlp::forward(size_t n, const float* xyzt, float* saved, float* coefficients) const {
  forward(static_cast<const float*>(block_.values()), n, xyzt, saved, coefficients);
}

void MotionMlp::backward(size_t n, const float* saved, const float* grad_coefficients,
                         float* grad_xyzt, float* scratch) const {
  backward(static_cast<const float*>(block_.values()), block_.grads(), n, saved, grad_coefficients,
           grad_xyzt, scratch);
}

#define MVIBR_MOTION_MLP(T)                                                   \
  template void MotionMlp::forward(const T*, size_t, const T*, T*, T*) const; \
  template void MotionMlp::backward(const T*, T*, size_t, const T*, const T*, T*, T*) const;
MVIBR_MOTION_MLP(float)
MVIBR_MOTION_MLP(double)
#undef MVIBR_MOTION_MLP

}  // namespace mvibr::nn
