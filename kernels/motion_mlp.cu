// DynIBaR's motion network on the GPU (see nn/cuda_motion_mlp.h): the CPU network's sequence of
// layers on cuBLAS (nn::cuda::linear_forward / linear_backward, bias and ReLU fused), with the
// three small kernels it needs besides: the skip layer's input cat([embedding, h]), the split of
// that input's gradient, and the division by sf_mag_div. Memory-bound copies, one thread per
// value written, consecutive threads on consecutive addresses.
#include <utility>

#include "common.h"
#include "mvibr/nn/cuda_motion_mlp.h"

namespace mvibr::nn::cuda {

namespace {

// Thread e writes joined[e] of [rows, E + W]: the embedding's row, then h's.
__global__ void motion_skip_concat_kernel(size_t total, int embedded, int width,
                                          const float* embedding, const float* h, float* joined) {
  const size_t columns = size_t(embedded) + size_t(width);
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t row = e / columns, c = e % columns;
    joined[e] = c < size_t(embedded) ? embedding[row * size_t(embedded) + c]
                                     : h[row * size_t(width) + (c - size_t(embedded))];
  }
}

// Thread e reads grad_joined[e] of [rows, E + W]: the embedding's share goes to grad_embedding
// (overwritten, or added to when `accumulate`; null: dropped), h's to grad_h (overwritten).
__global__ void motion_skip_split_kernel(size_t total, int embedded, int width,
                                         const float* grad_joined, float* grad_embedding,
                                         bool accumulate, float* grad_h) {
  const size_t columns = size_t(embedded) + size_t(width);
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t row = e / columns, c = e % columns;
    const float g = grad_joined[e];
    if (c >= size_t(embedded)) {
      grad_h[row * size_t(width) + (c - size_t(embedded))] = g;
    } else if (grad_embedding) {
      float& target = grad_embedding[row * size_t(embedded) + c];
      target = accumulate ? __fadd_rn(target, g) : g;
    }
  }
}

// out[i] = in[i] / divisor, one rounding as the CPU's (in may be out).
__global__ void motion_divide_kernel(size_t count, float divisor, const float* in, float* out) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    out[i] = __fdiv_rn(in[i], divisor);
  }
}

LinearShape shape_of(const Linear& layer, size_t n) {
  return {n, layer.in(), layer.out()};
}

}  // namespace

MotionMlp::MotionMlp(const nn::MotionMlp& network)
    : options_(network.options()),
      embed_(network.embed()),
      hidden_(network.hidden_layers()),
      head_(network.head()) {}

void MotionMlp::forward(Context& context, const float* params, size_t n, const float* xyzt,
                        float* saved, float* coefficients) const {
  if (n == 0) return;
  const MotionMlpLayout l = layout(n);
  const StreamHandle stream = context.stream();
  const int E = embed_.width(), W = options_.width;
  float* embedding = saved + l.embedding;
  periodic_embed_forward(embed_, n, xyzt, embedding, stream);
  const float* x = embedding;
  for (int i = 0; i < options_.depth; ++i) {
    const Linear& layer = hidden_[size_t(i)];
    float* h = saved + l.hidden[size_t(i)];
    linear_forward(context, shape_of(layer, n), x, params + layer.weight_offset(),
                   params + layer.bias_offset(), Activation::kRelu, h);
    x = h;
    if (motion_mlp_skip_after(options_, i)) {
      float* joined = saved + l.concat[size_t(i)];
      launch_threads(n * size_t(E + W), stream, motion_skip_concat_kernel, n * size_t(E + W), E, W,
                     static_cast<const float*>(embedding), static_cast<const float*>(h), joined);
      x = joined;
    }
  }
  linear_forward(context, shape_of(head_, n), x, params + head_.weight_offset(),
                 params + head_.bias_offset(), Activation::kNone, coefficients);
  if (options_.sf_mag_div != 1.0) {
    const size_t count = n * size_t(outputs());
    launch_threads(count, stream, motion_divide_kernel, count, float(options_.sf_mag_div),
                   static_cast<const float*>(coefficients), coefficients);
  }
}

void MotionMlp::backward(Context& context, const float* params, float* grads, size_t n,
                         const float* saved, const float* grad_coefficients, float* grad_xyzt,
                         float* scratch) const {
  if (n == 0) return;
  const MotionMlpLayout l = layout(n);
  const StreamHandle stream = context.stream();
  const int E = embed_.width(), W = options_.width;
  const bool want_input = grad_xyzt != nullptr;
  // linear_backward takes a writable gradient (it leaves it alone without an activation): the
  // head's goes through scratch, divided by sf_mag_div (by 1 exactly when it is 1).
  float* grad_out = scratch + l.grad_output;
  const size_t outputs_count = n * size_t(outputs());
  launch_threads(outputs_count, stream, motion_divide_kernel, outputs_count,
                 float(options_.sf_mag_div), grad_coefficients, grad_out);
  const auto input_of = [&](int i) { return saved + l.input_of(i); };
  float* grad_h = scratch + l.grad_a;
  float* other = scratch + l.grad_b;
  float* grad_embedding = scratch + l.grad_embedding;
  bool embedding_written = false;
  linear_backward(context, shape_of(head_, n), Activation::kNone, nullptr, grad_out,
                  input_of(options_.depth), params + head_.weight_offset(), grad_h, false,
                  grads + head_.weight_offset(), grads + head_.bias_offset());
  for (int i = options_.depth - 1; i >= 0; --i) {
    const Linear& layer = hidden_[size_t(i)];
    const float* h = saved + l.hidden[size_t(i)];
    const float* weight = params + layer.weight_offset();
    float* grad_weight = grads + layer.weight_offset();
    float* grad_bias = grads + layer.bias_offset();
    if (i == 0) {
      // ReLU's slope from h_0 turns grad_h into the pre-activation's gradient in place.
      linear_backward(context, shape_of(layer, n), Activation::kRelu, h, grad_h, input_of(0),
                      weight, want_input ? grad_embedding : nullptr, embedding_written, grad_weight,
                      grad_bias);
      embedding_written = true;
    } else if (motion_mlp_skip_after(options_, i - 1)) {
      float* grad_joined = scratch + l.grad_concat;
      linear_backward(context, shape_of(layer, n), Activation::kRelu, h, grad_h, input_of(i),
                      weight, grad_joined, false, grad_weight, grad_bias);
      launch_threads(n * size_t(E + W), stream, motion_skip_split_kernel, n * size_t(E + W), E, W,
                     static_cast<const float*>(grad_joined), want_input ? grad_embedding : nullptr,
                     embedding_written, other);
      embedding_written = embedding_written || want_input;
      std::swap(grad_h, other);
    } else {
      linear_backward(context, shape_of(layer, n), Activation::kRelu, h, grad_h, input_of(i),
                      weight, other, false, grad_weight, grad_bias);
      std::swap(grad_h, other);
    }
  }
  if (want_input) {
    periodic_embed_backward(embed_, n, saved + l.embedding, grad_embedding, grad_xyzt, false,
                            stream);
  }
}

}  // namespace mvibr::nn::cuda
