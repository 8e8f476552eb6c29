// DynIBaR's compositing of a static and a dynamic component along one ray, and its backward.
// - Per component: alpha = 1 - exp(-softplus(sigma) delta), delta 1, but 1e10 at the last
//   sample (render_ray.py's raw2outputs: IBRNet's unit intervals, an opaque far end).
// - Combined: alpha = 1 - (1 - alpha_static)(1 - alpha_dynamic), T_i = prod_{j<i} (1 - alpha_j +
//   1e-10), w_i = alpha_i T_i, w_static = alpha_static T, w_dynamic = alpha_dynamic T,
//   rgb = sum w_dynamic c_dynamic + w_static c_static, depth = sum w z.
// - One component alone (raw2outputs_vanilla, the losses' "vanilla" renders): the other's alpha
//   is 0, so w = w_component, with its own transmittance.
// - Backward in O(S) without division, as volume_rendering.h: with H_i = dL/dT_i, the suffix
//   B_{i-1} = H_i + (1 - alpha_i + 1e-10) B_i gives dL/dalpha_i (through T) = -T_i B_i.
#pragma once

#include <cmath>
#include <cstddef>

#include "mvibr/core/hd.h"
#include "mvibr/render/volume_rendering.h"

namespace mvibr {

enum class DynamicComposite { kBoth, kStaticOnly, kDynamicOnly };

// PyTorch's Softplus (beta 1, threshold 20: the identity above 20) and its derivative.
template <typename T>
MVIBR_HD T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}
template <typename T>
MVIBR_HD T softplus_derivative(T x) {
  return x > T(20) ? T(1) : T(1) / (T(1) + std::exp(-x));
}

template <typename T>
MVIBR_HD T dynibar_delta(int i, int n_samples) {
  return i + 1 < n_samples ? T(1) : T(kLastIntervalLength);
}

// One ray's inputs: raw densities [S] and colours [S, 3] of each component, depths [S]. The
// component a mode leaves out is not read (may be null).
template <typename T>
struct DynamicRay {
  const T* sigma_static;
  const T* rgb_static;
  const T* sigma_dynamic;
  const T* rgb_dynamic;
  const T* z;
  int n_samples;
  DynamicComposite mode;

  MVIBR_HD T alpha_static(int i) const {
    if (mode == DynamicComposite::kDynamicOnly) return T(0);
    return T(1) - std::exp(-softplus(sigma_static[i]) * dynibar_delta<T>(i, n_samples));
  }
  MVIBR_HD T alpha_dynamic(int i) const {
    if (mode == DynamicComposite::kStaticOnly) return T(0);
    return T(1) - std::exp(-softplus(sigma_dynamic[i]) * dynibar_delta<T>(i, n_samples));
  }
};

// Outputs, each nullable: rgb_map [3], depth [1], weights (combined), weights_static and
// weights_dynamic [S].
template <typename T>
MVIBR_HD void composite_dynamic_ray(const DynamicRay<T>& ray, T* rgb_map, T* depth, T* weights,
                                    T* weights_static, T* weights_dynamic) {
  T transmittance = T(1), r = T(0), g = T(0), b = T(0), d = T(0);
  for (int i = 0; i < ray.n_samples; ++i) {
    const T a_s = ray.alpha_static(i), a_d = ray.alpha_dynamic(i);
    const T alpha = T(1) - (T(1) - a_s) * (T(1) - a_d);
    const T w_s = a_s * transmittance, w_d = a_d * transmittance, w = alpha * transmittance;
    if (a_s != T(0)) {
      r += w_s * ray.rgb_static[3 * i];
      g += w_s * ray.rgb_static[3 * i + 1];
      b += w_s * ray.rgb_static[3 * i + 2];
    }
    if (a_d != T(0)) {
      r += w_d * ray.rgb_dynamic[3 * i];
      g += w_d * ray.rgb_dynamic[3 * i + 1];
      b += w_d * ray.rgb_dynamic[3 * i + 2];
    }
    d += w * ray.z[i];
    if (weights) weights[i] = w;
    if (weights_static) weights_static[i] = w_s;
    if (weights_dynamic) weights_dynamic[i] = w_d;
    transmittance *= T(1) - alpha + T(kTransmittanceEpsilon);
  }
  if (rgb_map) rgb_map[0] = r, rgb_map[1] = g, rgb_map[2] = b;
  if (depth) *depth = d;
}

// Gradients of the outputs (null: zero) to gradients of the inputs, overwritten: grad_sigma_*
// [S] and grad_rgb_* [S, 3]; those of a component the mode leaves out may be null (else they
// get zeros). The rendered component's grad_sigma doubles as scratch for B.
template <typename T>
MVIBR_HD void composite_dynamic_ray_backward(const DynamicRay<T>& ray, const T* grad_rgb_map,
                                             T grad_depth, const T* grad_weights,
                                             const T* grad_weights_static,
                                             const T* grad_weights_dynamic, T* grad_sigma_static,
                                             T* grad_rgb_static, T* grad_sigma_dynamic,
                                             T* grad_rgb_dynamic) {
  const int n = ray.n_samples;
  const bool has_static = ray.mode != DynamicComposite::kDynamicOnly;
  const bool has_dynamic = ray.mode != DynamicComposite::kStaticOnly;
  const T zero[3] = {T(0), T(0), T(0)};
  const T* grad_rgb = grad_rgb_map ? grad_rgb_map : zero;
  const auto colour_gradient = [&](const T* rgb, int i) {
    return grad_rgb[0] * rgb[3 * i] + grad_rgb[1] * rgb[3 * i + 1] + grad_rgb[2] * rgb[3 * i + 2];
  };
  // dL/dw_static, dL/dw_dynamic and dL/dw of sample i, from every output that reads them.
  const auto gradients = [&](int i, T* g_s, T* g_d, T* g_w) {
    *g_s = has_static ? colour_gradient(ray.rgb_static, i) +
                            (grad_weights_static ? grad_weights_static[i] : T(0))
                      : T(0);
    *g_d = has_dynamic ? colour_gradient(ray.rgb_dynamic, i) +
                             (grad_weights_dynamic ? grad_weights_dynamic[i] : T(0))
                       : T(0);
    *g_w = grad_depth * ray.z[i] + (grad_weights ? grad_weights[i] : T(0));
  };
  T* suffix_of = has_static ? grad_sigma_static : grad_sigma_dynamic;
  T suffix = T(0);  // B_i
  for (int i = n - 1; i >= 0; --i) {
    suffix_of[i] = suffix;
    const T a_s = ray.alpha_static(i), a_d = ray.alpha_dynamic(i);
    const T alpha = T(1) - (T(1) - a_s) * (T(1) - a_d);
    T g_s, g_d, g_w;
    gradients(i, &g_s, &g_d, &g_w);
    suffix =
        g_s * a_s + g_d * a_d + g_w * alpha + (T(1) - alpha + T(kTransmittanceEpsilon)) * suffix;
  }
  T transmittance = T(1);
  for (int i = 0; i < n; ++i) {
    const T a_s = ray.alpha_static(i), a_d = ray.alpha_dynamic(i);
    const T alpha = T(1) - (T(1) - a_s) * (T(1) - a_d);
    T g_s, g_d, g_w;
    gradients(i, &g_s, &g_d, &g_w);
    const T grad_alpha = transmittance * (g_w - suffix_of[i]);
    const T delta = dynibar_delta<T>(i, n);
    // One component's gradients, with the other's alpha: d alpha / d sigma = delta
    // exp(-softplus(sigma) delta) softplus'(sigma), the 1e10 last interval's exp(...) = 0
    // guarded against 0 * inf.
    const auto component = [&](T sigma, T a, T a_other, T g, T* grad_sigma, T* grad_rgb_out) {
      const T grad_a = g * transmittance + grad_alpha * (T(1) - a_other);
      const T survival = T(1) - a;
      *grad_sigma =
          survival == T(0) ? T(0) : grad_a * delta * survival * softplus_derivative(sigma);
      for (int c = 0; c < 3; ++c) grad_rgb_out[c] = a * transmittance * grad_rgb[c];
    };
    if (has_static) {
      component(ray.sigma_static[i], a_s, a_d, g_s, grad_sigma_static + i, grad_rgb_static + 3 * i);
    }
    if (has_dynamic) {
      component(ray.sigma_dynamic[i], a_d, a_s, g_d, grad_sigma_dynamic + i,
                grad_rgb_dynamic + 3 * i);
    }
    transmittance *= T(1) - alpha + T(kTransmittanceEpsilon);
  }
  // The component the mode leaves out gets zeros where its gradients are asked for.
  for (int i = 0; i < n; ++i) {
    if (!has_static && grad_sigma_static) grad_sigma_static[i] = T(0);
    if (!has_static && grad_rgb_static)
      grad_rgb_static[3 * i] = grad_rgb_static[3 * i + 1] = grad_rgb_static[3 * i + 2] = T(0);
    if (!has_dynamic && grad_sigma_dynamic) grad_sigma_dynamic[i] = T(0);
    if (!has_dynamic && grad_rgb_dynamic)
      grad_rgb_dynamic[3 * i] = grad_rgb_dynamic[3 * i + 1] = grad_rgb_dynamic[3 * i + 2] = T(0);
  }
}

// ---- Batches of rays, as the backends of ops/render_ops.h call them ----

// DynIBaR's two components per sample: raw densities [R,S] and colours [R,S,3]; `const T` for
// inputs, `T` for their gradients. A component the mode leaves out may be null.
template <typename T>
struct DynamicSamples {
  T* sigma_static = nullptr;
  T* rgb_static = nullptr;
  T* sigma_dynamic = nullptr;
  T* rgb_dynamic = nullptr;
};
// What compositing them gives, each nullable: rgb_map [R,3], depth_map [R], weights (combined),
// weights_static, weights_dynamic [R,S]; `const T` for their gradients.
template <typename T>
struct DynamicRenders {
  T* rgb_map = nullptr;
  T* depth_map = nullptr;
  T* weights = nullptr;
  T* weights_static = nullptr;
  T* weights_dynamic = nullptr;
};

template <typename P>
MVIBR_HD P* ray_slice(P* batch, size_t offset) {
  return batch ? batch + offset : nullptr;
}

// Ray r of a batch of n_samples per ray.
template <typename T>
MVIBR_HD DynamicRay<T> batch_ray(size_t r, int n_samples, DynamicComposite mode,
                                 const DynamicSamples<const T>& in, const T* depths) {
  const size_t base = r * size_t(n_samples);
  return {ray_slice(in.sigma_static, base),
          ray_slice(in.rgb_static, 3 * base),
          ray_slice(in.sigma_dynamic, base),
          ray_slice(in.rgb_dynamic, 3 * base),
          depths + base,
          n_samples,
          mode};
}

template <typename T>
MVIBR_HD void composite_dynamic_batch_ray(size_t r, int n_samples, DynamicComposite mode,
                                          const DynamicSamples<const T>& in, const T* depths,
                                          const DynamicRenders<T>& out) {
  const size_t base = r * size_t(n_samples);
  const DynamicRay<T> ray = batch_ray(r, n_samples, mode, in, depths);
  composite_dynamic_ray(ray, ray_slice(out.rgb_map, 3 * r), ray_slice(out.depth_map, r),
                        ray_slice(out.weights, base), ray_slice(out.weights_static, base),
                        ray_slice(out.weights_dynamic, base));
}

template <typename T>
MVIBR_HD void composite_dynamic_batch_ray_backward(size_t r, int n_samples, DynamicComposite mode,
                                                   const DynamicSamples<const T>& in,
                                                   const T* depths,
                                                   const DynamicRenders<const T>& grad_out,
                                                   const DynamicSamples<T>& grad_in) {
  const size_t base = r * size_t(n_samples);
  const DynamicRay<T> ray = batch_ray(r, n_samples, mode, in, depths);
  composite_dynamic_ray_backward(
      ray, ray_slice(grad_out.rgb_map, 3 * r), grad_out.depth_map ? grad_out.depth_map[r] : T(0),
      ray_slice(grad_out.weights, base), ray_slice(grad_out.weights_static, base),
      ray_slice(grad_out.weights_dynamic, base), ray_slice(grad_in.sigma_static, base),
      ray_slice(grad_in.rgb_static, 3 * base), ray_slice(grad_in.sigma_dynamic, base),
      ray_slice(grad_in.rgb_dynamic, 3 * base));
}

}  // namespace mvibr
