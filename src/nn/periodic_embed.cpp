// DynIBaR's Fourier features (see periodic_embed.h): the frequencies as torch.linspace makes them
// in float32, and a row at a time through the blocks, cosines then sines.
#include "mvibr/nn/periodic_embed.h"

#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {

std::vector<float> periodic_embed_frequencies(FrequencySpacing spacing, int max_freq, int count) {
  if (count < 1 || count > kMaxEmbedFrequencies) {
    throw InvalidArgument("periodic embedding: needs 1 <= frequencies (" + std::to_string(count) +
                          ") <= " + std::to_string(kMaxEmbedFrequencies));
  }
  std::vector<float> f(size_t(count), 1.0f);
  if (spacing == FrequencySpacing::kLog) {
    for (int k = 0; k < count; ++k) f[size_t(k)] = std::ldexp(1.0f, k);  // exact powers of two
    return f;
  }
  if (count == 1) return f;  // linspace of one step is its start
  // torch.linspace's CPU kernel in float: step = (end - start) / (steps - 1); the first half
  // counts up from start (start + step k), the second down from end (end - step (steps - 1 - k)).
  // Each product is formed in double, where it is exact, and rounded once: float's own product,
  // and nothing for a compiler to fuse with the sum.
  const float start = 1.0f, end = float(max_freq + 1);
  const float step = (end - start) / float(count - 1);
  for (int k = 0; k < count; ++k) {
    f[size_t(k)] = k < count / 2 ? start + float(double(step) * double(k))
                                 : end - float(double(step) * double(count - 1 - k));
  }
  return f;
}

PeriodicEmbed::PeriodicEmbed(int dim, FrequencySpacing spacing, int max_freq, int count)
    : dim_(dim), frequencies_(periodic_embed_frequencies(spacing, max_freq, count)) {
  if (dim < 1) {
    throw InvalidArgument("periodic embedding: needs at least one input (dim " +
                          std::to_string(dim) + ")");
  }
}

template <typename T>
void PeriodicEmbed::forward(size_t n, const T* x, T* y) const {
  const size_t d = size_t(dim_), width = size_t(this->width()), count = frequencies_.size();
  for (size_t i = 0; i < n; ++i) {
    const T* in = x + i * d;
    T* out = y + i * width;
    for (size_t j = 0; j < d; ++j) out[j] = in[j];
    for (size_t k = 0; k < count; ++k) {
      const T f = T(frequencies_[k]);
      T* cosines = out + (1 + k) * d;
      T* sines = out + (1 + count + k) * d;
      for (size_t j = 0; j < d; ++j) {
        const T angle = f * in[j];  // rounded as the published module's freq * x
        cosines[j] = std::cos(angle);
        sines[j] = std::sin(angle);
      }
    }
  }
}

template <typename T>
void PeriodicEmbed::backward(size_t n, const T* y, const T* grad_y, T* grad_x,
                             bool accumulate) const {
  const size_t d = size_t(dim_), width = size_t(this->width());
  const int count = this->count();
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < d; ++j) {
      const T g = periodic_embed_input_gradient(dim_, count, frequencies_.data(), y + i * width,
                                                grad_y + i * width, int(j));
      grad_x[i * d + j] = accumulate ? grad_x[i * d + j] + g : g;
    }
  }
}

#define MVIBR_PERIODIC_EMBED(T)                                     \
  template void PeriodicEmbed::forward(size_t, const T*, T*) const; \
  template void PeriodicEmbed::backward(size_t, const T*, const T*, T*, bool) const;
MVIBR_PERIODIC_EMBED(float)
MVIBR_PERIODIC_EMBED(double)
#undef MVIBR_PERIODIC_EMBED

}  // namespace mvibr::nn
