// Masked multi-head self-attention (see layers.h). The sequences are short (IBRNet: the samples
// of one ray, 16-wide tokens, 4 heads of 4), so the score matrices are formed explicitly, one
// sequence per OpenMP iteration, while the four projections are batched GEMMs over every token.
// Each head's keys and values are first transposed into [d, len] rows, so that the loops over
// keys run along contiguous memory and vectorise, exponential and reductions included
// (vector_math.h). The forward saves q, k, v, the probabilities, the concatenated heads and the
// LayerNorm's xhat and rstd; the backward needs nothing else.
#include <algorithm>
#include <cmath>

#include "mvibr/nn/layers.h"
#include "parallel.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

// Where each saved tensor starts in the `saved` buffer.
struct SavedLayout {
  size_t q, k, v, probs, heads, xhat, rstd, end;
};

SavedLayout saved_layout(size_t batch, size_t len, int n_head, int d_model, int d_k, int d_v) {
  const size_t tokens = batch * len;
  SavedLayout s;
  s.q = 0;
  s.k = s.q + tokens * n_head * d_k;
  s.v = s.k + tokens * n_head * d_k;
  s.probs = s.v + tokens * n_head * d_v;
  s.heads = s.probs + batch * n_head * len * len;
  s.xhat = s.heads + tokens * n_head * d_v;
  s.rstd = s.xhat + tokens * d_model;
  s.end = s.rstd + tokens;
  return s;
}

// IBRNet fills masked scores with -1e9 (not -inf), so a fully masked row is uniform.
constexpr double kMaskedScore = -1e9;

// One head of one sequence, [len, stride] rows from column `first`, into [width, len].
template <typename T>
void transpose_head(const T* rows, size_t stride, size_t first, size_t len, int width, T* out) {
  for (size_t j = 0; j < len; ++j) {
    for (int c = 0; c < width; ++c) out[c * len + j] = rows[j * stride + first + c];
  }
}

// Head h of sequence b of k and v ([len, n_head * d] rows each), as [d_k, len] and [d_v, len].
template <typename T>
void transpose_keys_values(const T* k, const T* v, size_t b, int h, size_t len, int n_head, int d_k,
                           int d_v, T* keys, T* values) {
  const size_t qk = size_t(n_head) * d_k, vw = size_t(n_head) * d_v;
  transpose_head(k + b * len * qk, qk, size_t(h) * d_k, len, d_k, keys);
  transpose_head(v + b * len * vw, vw, size_t(h) * d_v, len, d_v, values);
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(ParameterBlock& block, const std::string& name, int n_head,
                                       int d_model, int d_k, int d_v, AttentionMask mask,
                                       Operands operands)
    : n_head_(n_head),
      d_model_(d_model),
      d_k_(d_k),
      d_v_(d_v),
      mask_(mask),
      w_qs_(block, name + ".w_qs", d_model, n_head * d_k, false, operands),
      w_ks_(block, name + ".w_ks", d_model, n_head * d_k, false, operands),
      w_vs_(block, name + ".w_vs", d_model, n_head * d_v, false, operands),
      fc_(block, name + ".fc", n_head * d_v, d_model, false, operands),
      layer_norm_(block, name + ".layer_norm", d_model, 1e-6) {}

void MultiHeadAttention::init_default(float* params, Initializer& init) const {
  w_qs_.init_default(params, init);
  w_ks_.init_default(params, init);
  w_vs_.init_default(params, init);
  fc_.init_default(params, init);
  layer_norm_.init(params);
}

size_t MultiHeadAttention::saved_size(size_t batch, size_t len) const {
  return saved_layout(batch, len, n_head_, d_model_, d_k_, d_v_).end;
}

size_t MultiHeadAttention::scratch_size(size_t batch, size_t len) const {
  // grad of the residual sum, of the concatenated heads, and of q, k, v.
  return batch * len * (d_model_ + 2 * size_t(n_head_) * (d_k_ + d_v_));
}

template <typename T>
void MultiHeadAttention::forward(const T* params, size_t batch, size_t len, const T* x,
                                 const T* valid, T* saved, T* y) const {
  const size_t tokens = batch * len;
  const SavedLayout at = saved_layout(batch, len, n_head_, d_model_, d_k_, d_v_);
  const T* q = saved + at.q;
  const T* k = saved + at.k;
  const T* v = saved + at.v;
  T* probs = saved + at.probs;
  T* heads = saved + at.heads;
  w_qs_.forward(params, tokens, x, saved + at.q);
  w_ks_.forward(params, tokens, x, saved + at.k);
  w_vs_.forward(params, tokens, x, saved + at.v);

  const size_t qk = size_t(n_head_) * d_k_, vw = size_t(n_head_) * d_v_;
  const T inv_temperature = T(1) / std::sqrt(T(d_k_));
#pragma omp parallel if (worth_parallel(tokens * len * n_head_))
  {
    std::vector<T> keys(d_k_ * len), values(d_v_ * len);
#pragma omp for schedule(static)
    for (size_t b = 0; b < batch; ++b) {
      const T* valid_b = valid + b * len;
      for (int h = 0; h < n_head_; ++h) {
        transpose_keys_values(k, v, b, h, len, n_head_, d_k_, d_v_, keys.data(), values.data());
        for (size_t i = 0; i < len; ++i) {
          const T* qi = q + (b * len + i) * qk + h * d_k_;
          T* p = probs + ((b * n_head_ + h) * len + i) * len;
          std::fill(p, p + len, T(0));
          for (int c = 0; c < d_k_; ++c) {
            const T qc = qi[c] * inv_temperature;
            const T* kc = keys.data() + c * len;
            for (size_t j = 0; j < len; ++j) p[j] += qc * kc[j];
          }
          if (mask_ == AttentionMask::kKeys) {
            for (size_t j = 0; j < len; ++j) p[j] = valid_b[j] == T(0) ? T(kMaskedScore) : p[j];
          } else if (valid_b[i] == T(0)) {
            std::fill(p, p + len, T(kMaskedScore));
          }
          const T top = max_of(p, len);
          for (size_t j = 0; j < len; ++j) p[j] = exp_nonpositive(p[j] - top);
          const T total = sum(p, len);
          for (size_t j = 0; j < len; ++j) p[j] /= total;
          T* out = heads + (b * len + i) * vw + h * d_v_;
          for (int c = 0; c < d_v_; ++c) out[c] = dot(p, values.data() + c * len, len);
        }
      }
    }
  }

  // fc(heads) + residual, normalised in place.
  fc_.forward(params, tokens, heads, y);
  for (size_t i = 0; i < tokens * d_model_; ++i) y[i] += x[i];
  layer_norm_.forward(params, tokens, y, y, saved + at.xhat, saved + at.rstd);
}

template <typename T>
void MultiHeadAttention::backward(const T* params, T* grads, size_t batch, size_t len, const T* x,
                                  const T* valid, const T* saved, const T* grad_y, T* grad_x,
                                  T* scratch) const {
  const size_t tokens = batch * len;
  const SavedLayout at = saved_layout(batch, len, n_head_, d_model_, d_k_, d_v_);
  const T* q = saved + at.q;
  const T* k = saved + at.k;
  const T* v = saved + at.v;
  const T* probs = saved + at.probs;
  const size_t qk = size_t(n_head_) * d_k_, vw = size_t(n_head_) * d_v_;
  T* grad_sum = scratch;
  T* grad_heads = grad_sum + tokens * d_model_;
  T* grad_q = grad_heads + tokens * vw;
  T* grad_k = grad_q + tokens * qk;
  T* grad_v = grad_k + tokens * qk;

  layer_norm_.backward(params, grads, tokens, saved + at.xhat, saved + at.rstd, grad_y, grad_sum);
  std::copy(grad_sum, grad_sum + tokens * d_model_, grad_x);  // the residual
  fc_.backward(params, grads, tokens, saved + at.heads, grad_sum, grad_heads);

  const T inv_temperature = T(1) / std::sqrt(T(d_k_));
#pragma omp parallel if (worth_parallel(tokens * len * n_head_))
  {
    // One head of one sequence, transposed to [d, len]: keys, values and their gradients.
    std::vector<T> keys(d_k_ * len), values(d_v_ * len), grad_keys(d_k_ * len),
        grad_values(d_v_ * len), grad_score(len);
#pragma omp for schedule(static)
    for (size_t b = 0; b < batch; ++b) {
      const T* valid_b = valid + b * len;
      for (int h = 0; h < n_head_; ++h) {
        transpose_keys_values(k, v, b, h, len, n_head_, d_k_, d_v_, keys.data(), values.data());
        std::fill(grad_keys.begin(), grad_keys.end(), T(0));
        std::fill(grad_values.begin(), grad_values.end(), T(0));
        T* gs = grad_score.data();
        for (size_t i = 0; i < len; ++i) {
          const size_t ti = b * len + i;
          const T* p = probs + ((b * n_head_ + h) * len + i) * len;
          const T* go = grad_heads + ti * vw + h * d_v_;
          const T* qi = q + ti * qk + h * d_k_;
          // grad_p = grad_out . v_j, then the softmax: grad_score = p (grad_p - p . grad_p).
          std::fill(gs, gs + len, T(0));
          for (int c = 0; c < d_v_; ++c) {
            const T* vc = values.data() + c * len;
            T* gvc = grad_values.data() + c * len;
            for (size_t j = 0; j < len; ++j) {
              gs[j] += go[c] * vc[j];
              gvc[j] += p[j] * go[c];
            }
          }
          const T weighted = dot(p, gs, len);
          for (size_t j = 0; j < len; ++j) gs[j] = p[j] * (gs[j] - weighted) * inv_temperature;
          // masked_fill passes no gradient to the scores it replaced.
          if (mask_ == AttentionMask::kKeys) {
            for (size_t j = 0; j < len; ++j) gs[j] = valid_b[j] == T(0) ? T(0) : gs[j];
          } else if (valid_b[i] == T(0)) {
            std::fill(gs, gs + len, T(0));
          }
          for (int c = 0; c < d_k_; ++c) {
            T* gkc = grad_keys.data() + c * len;
            for (size_t j = 0; j < len; ++j) gkc[j] += gs[j] * qi[c];
            grad_q[ti * qk + h * d_k_ + c] = dot(gs, keys.data() + c * len, len);
          }
        }
        for (size_t j = 0; j < len; ++j) {
          const size_t tj = b * len + j;
          for (int c = 0; c < d_k_; ++c) grad_k[tj * qk + h * d_k_ + c] = grad_keys[c * len + j];
          for (int c = 0; c < d_v_; ++c) grad_v[tj * vw + h * d_v_ + c] = grad_values[c * len + j];
        }
      }
    }
  }

  w_qs_.backward(params, grads, tokens, x, grad_q, grad_x, true);
  w_ks_.backward(params, grads, tokens, x, grad_k, grad_x, true);
  w_vs_.backward(params, grads, tokens, x, grad_v, grad_x, true);
}

#define MVIBR_ATTENTION(T)                                                                        \
  template void MultiHeadAttention::forward(const T*, size_t, size_t, const T*, const T*, T*, T*) \
      const;                                                                                      \
  template void MultiHeadAttention::backward(const T*, T*, size_t, size_t, const T*, const T*,    \
                                             const T*, const T*, T*, T*) const;
MVIBR_ATTENTION(float)
MVIBR_ATTENTION(double)
#undef MVIBR_ATTENTION

}  // namespace mvibr::nn
