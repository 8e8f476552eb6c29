// Masked multi-head self-attention (see layers.h). The sequences are short (IBRNet: the samples
// of one ray, 16-wide tokens, 4 heads of 4), so the score matrices are formed explicitly, one
// batch entry per OpenMP iteration, while the four projections are batched GEMMs over every
// token. The forward saves q, k, v, the probabilities, the concatenated heads and the
// LayerNorm's xhat and rstd; the backward needs nothing else.
#include <algorithm>
#include <cmath>

#include "mvibr/nn/layers.h"
#include "parallel.h"

namespace mvibr::nn {
namespace {

// The offsets of the saved tensors for `tokens` tokens.
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

}  // namespace

MultiHeadAttention::MultiHeadAttention(ParameterBlock& block, const std::string& name, int n_head,
                                       int d_model, int d_k, int d_v, AttentionMask mask)
    : n_head_(n_head),
      d_model_(d_model),
      d_k_(d_k),
      d_v_(d_v),
      mask_(mask),
      w_qs_(block, name + ".w_qs", d_model, n_head * d_k, false),
      w_ks_(block, name + ".w_ks", d_model, n_head * d_k, false),
      w_vs_(block, name + ".w_vs", d_model, n_head * d_v, false),
      fc_(block, name + ".fc", n_head * d_v, d_model, false),
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
#pragma omp parallel for schedule(static) if (worth_parallel(tokens * len * n_head_))
  for (size_t b = 0; b < batch; ++b) {
    for (int h = 0; h < n_head_; ++h) {
      for (size_t i = 0; i < len; ++i) {
        const size_t ti = b * len + i;
        const T* qi = q + ti * qk + h * d_k_;
        T* p = probs + ((b * n_head_ + h) * len + i) * len;
        for (size_t j = 0; j < len; ++j) {
          const size_t tj = b * len + j;
          const T* kj = k + tj * qk + h * d_k_;
          T score = 0;
          for (int c = 0; c < d_k_; ++c) score += qi[c] * inv_temperature * kj[c];
          p[j] = valid[mask_ == AttentionMask::kKeys ? tj : ti] == T(0) ? T(kMaskedScore) : score;
        }
        const T top = *std::max_element(p, p + len);
        T sum = 0;
        for (size_t j = 0; j < len; ++j) {
          p[j] = std::exp(p[j] - top);
          sum += p[j];
        }
        T* out = heads + ti * vw + h * d_v_;
        std::fill(out, out + d_v_, T(0));
        for (size_t j = 0; j < len; ++j) {
          p[j] /= sum;
          const T* vj = v + (b * len + j) * vw + h * d_v_;
          for (int c = 0; c < d_v_; ++c) out[c] += p[j] * vj[c];
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

  std::fill(grad_q, grad_q + tokens * (2 * qk + vw), T(0));
  const T inv_temperature = T(1) / std::sqrt(T(d_k_));
#pragma omp parallel for schedule(static) if (worth_parallel(tokens * len * n_head_))
  for (size_t b = 0; b < batch; ++b) {
    for (int h = 0; h < n_head_; ++h) {
      for (size_t i = 0; i < len; ++i) {
        const size_t ti = b * len + i;
        const T* p = probs + ((b * n_head_ + h) * len + i) * len;
        const T* go = grad_heads + ti * vw + h * d_v_;
        // Softmax backward: grad_score_j = p_j (grad_p_j - sum_l p_l grad_p_l), with
        // grad_p_j = grad_out . v_j (formed twice rather than stored: d_v is tiny).
        T weighted = 0;
        for (size_t j = 0; j < len; ++j) {
          const T* vj = v + (b * len + j) * vw + h * d_v_;
          T gp = 0;
          for (int c = 0; c < d_v_; ++c) gp += go[c] * vj[c];
          weighted += p[j] * gp;
        }
        const T* qi = q + ti * qk + h * d_k_;
        T* gqi = grad_q + ti * qk + h * d_k_;
        for (size_t j = 0; j < len; ++j) {
          const size_t tj = b * len + j;
          const T* vj = v + tj * vw + h * d_v_;
          T* gvj = grad_v + tj * vw + h * d_v_;
          T gp = 0;
          for (int c = 0; c < d_v_; ++c) {
            gp += go[c] * vj[c];
            gvj[c] += p[j] * go[c];
          }
          // masked_fill passes no gradient to the scores it replaced.
          if (valid[mask_ == AttentionMask::kKeys ? tj : ti] == T(0)) continue;
          const T grad_score = p[j] * (gp - weighted) * inv_temperature;
          const T* kj = k + tj * qk + h * d_k_;
          T* gkj = grad_k + tj * qk + h * d_k_;
          for (int c = 0; c < d_k_; ++c) {
            gqi[c] += grad_score * kj[c];
            gkj[c] += grad_score * qi[c];
          }
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
