// DynIBaR's loss terms and their gradients on the CPU (see dynibar_losses.h). Each term is a
// serial pass that sums in double, then a pass that writes its gradients, each element once:
// the same bits on every run, at a cost that is small beside the networks'.
#include "mvibr/render/dynibar_losses.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "mvibr/core/error.h"

namespace mvibr {

double LossFraction::value() const {
  return numerator == 0 ? 0 : numerator / (denominator + epsilon);
}

namespace cpu {
namespace {

// d|x|/dx as autograd takes it: 0 at 0.
double sign(double x) {
  return double(x > 0) - double(x < 0);
}

template <typename T>
void add(T* grad, size_t i, double value) {
  grad[i] = T(double(grad[i]) + value);
}

// What a term's gradient divides by: the whole batch's denominator where given, its own
// otherwise.
double gradient_divisor(const LossFraction& own, const LossFraction* whole) {
  const LossFraction& f = whole ? *whole : own;
  return f.denominator + f.epsilon;
}

// sum_r w_r sum_c sqrt((p - g)^2 + eps^2) / (3 sum_r w_r + epsilon), w_r = ray_weight(r).
template <typename T, typename RayWeight>
LossFraction weighted_charbonnier(int n_rays, const T* predicted, const T* target,
                                  RayWeight ray_weight, double epsilon, double weight,
                                  T* grad_predicted, const LossFraction* whole) {
  const double eps2 = kCharbonnierEpsilon * kCharbonnierEpsilon;
  LossFraction f{0, 0, epsilon};
  double weight_sum = 0;
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    const double w = ray_weight(r);
    for (size_t c = 3 * r; c < 3 * r + 3; ++c) {
      const double d = double(predicted[c]) - double(target[c]);
      f.numerator += std::sqrt(d * d + eps2) * w;
    }
    weight_sum += w;
  }
  f.denominator = 3 * weight_sum;
  if (grad_predicted) {
    const double scale = weight / gradient_divisor(f, whole);
    for (size_t r = 0; r < size_t(n_rays); ++r) {
      const double w = ray_weight(r);
      for (size_t c = 3 * r; c < 3 * r + 3; ++c) {
        const double d = double(predicted[c]) - double(target[c]);
        add(grad_predicted, c, scale * w * d / std::sqrt(d * d + eps2));
      }
    }
  }
  return f;
}

}  // namespace

template <typename T>
LossFraction charbonnier_loss(int n_rays, const T* predicted, const T* target, const T* ray_mask,
                              double weight, T* grad_predicted, const LossFraction* whole) {
  return weighted_charbonnier(
      n_rays, predicted, target, [&](size_t r) { return double(ray_mask[r]); },
      kCharbonnierDenominatorEpsilon, weight, grad_predicted, whole);
}

template <typename T>
LossFraction occlusion_weighted_charbonnier_loss(int n_rays, const T* predicted, const T* target,
                                                 const T* ray_mask, const T* occlusion_map,
                                                 double weight, T* grad_predicted,
                                                 const LossFraction* whole) {
  return weighted_charbonnier(
      n_rays, predicted, target,
      [&](size_t r) { return double(ray_mask[r]) * double(occlusion_map[r]); }, kDynibarLossEpsilon,
      weight, grad_predicted, whole);
}

template <typename T>
LossFraction disparity_l1_loss(int n_rays, const T* depth, const T* target_disparity,
                               const T* ray_mask, double weight, T* grad_depth,
                               const LossFraction* whole) {
  const auto disparity = [&](size_t r) {
    const double d = double(depth[r]);
    return 1 / (d < kDisparityDepthFloor ? kDisparityDepthFloor : d);
  };
  LossFraction f{0, 0, kDynibarLossEpsilon};
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    f.numerator += std::abs(disparity(r) - double(target_disparity[r])) * double(ray_mask[r]);
    f.denominator += double(ray_mask[r]);
  }
  if (grad_depth) {
    const double denominator = gradient_divisor(f, whole);
    for (size_t r = 0; r < size_t(n_rays); ++r) {
      const double d = double(depth[r]);
      if (d < kDisparityDepthFloor) continue;  // the clamp passes no gradient below its floor
      const double slope = sign(disparity(r) - double(target_disparity[r])) * -1 / (d * d);
      add(grad_depth, r, weight * double(ray_mask[r]) * slope / denominator);
    }
  }
  return f;
}

template <typename T>
LossFraction flow_l1_loss(int n_flows, int n_rays, const T* flows, const T* target_flows,
                          const T* flow_mask, double weight, T* grad_flows,
                          const LossFraction* whole) {
  const size_t n = size_t(n_flows) * size_t(n_rays);
  LossFraction f{0, 0, kDynibarLossEpsilon};
  double mask_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double m = double(flow_mask[i]);
    for (size_t c = 2 * i; c < 2 * i + 2; ++c) {
      f.numerator += std::abs(double(flows[c]) - double(target_flows[c])) * m;
    }
    mask_sum += m;
  }
  f.denominator = 2 * mask_sum;
  if (grad_flows) {
    const double denominator = gradient_divisor(f, whole);
    for (size_t i = 0; i < n; ++i) {
      const double scale = weight * double(flow_mask[i]) / denominator;
      for (size_t c = 2 * i; c < 2 * i + 2; ++c) {
        add(grad_flows, c, scale * sign(double(flows[c]) - double(target_flows[c])));
      }
    }
  }
  return f;
}

template <typename T>
LossFraction trajectory_cycle_loss(int n_pairs, int n_rays, int n_samples, const T* points_ref,
                                   const T* points_anchor, const T* occlusion_weights,
                                   double weight, T* grad_points_ref, T* grad_points_anchor,
                                   const LossFraction* whole) {
  const size_t samples = size_t(n_rays) * size_t(n_samples);
  LossFraction f{0, 0, kDynibarLossEpsilon};
  double weight_sum = 0;
  for (size_t i = 0; i < samples; ++i) weight_sum += double(occlusion_weights[i]);
  for (size_t k = 0; k < size_t(n_pairs); ++k) {
    for (size_t i = 0; i < samples; ++i) {
      const double o = double(occlusion_weights[i]);
      const size_t at = 3 * (k * samples + i);
      for (size_t c = at; c < at + 3; ++c) {
        f.numerator += std::abs(double(points_ref[c]) - double(points_anchor[c])) * o;
      }
    }
  }
  f.denominator = 3 * double(n_pairs) * weight_sum;
  if (grad_points_ref || grad_points_anchor) {
    const double denominator = gradient_divisor(f, whole);
    for (size_t k = 0; k < size_t(n_pairs); ++k) {
      for (size_t i = 0; i < samples; ++i) {
        const double scale = weight * double(occlusion_weights[i]) / denominator;
        const size_t at = 3 * (k * samples + i);
        for (size_t c = at; c < at + 3; ++c) {
          const double g = scale * sign(double(points_ref[c]) - double(points_anchor[c]));
          if (grad_points_ref) add(grad_points_ref, c, g);
          if (grad_points_anchor) add(grad_points_anchor, c, -g);
        }
      }
    }
  }
  return f;
}

template <typename T>
SceneFlowRegularizers scene_flow_regularizers(int n_steps, int n_rays, int n_samples,
                                              const T* scene_flow, double weight,
                                              T* grad_scene_flow,
                                              const SceneFlowRegularizers* whole) {
  const size_t rays = size_t(n_rays), samples = size_t(n_samples), steps = size_t(n_steps);
  const size_t per_step = rays * samples * 3;  // one step's [R,S,3]
  const size_t n = steps * per_step;
  const auto at = [&](size_t f, size_t r, size_t s, size_t c) {
    return ((f * rays + r) * samples + s) * 3 + c;
  };
  SceneFlowRegularizers out;
  out.magnitude.denominator = double(n);
  out.temporal.denominator = double((steps - 1) * per_step);
  out.spatial.denominator = double(steps * rays * (samples - 1) * 3);
  for (size_t i = 0; i < n; ++i) out.magnitude.numerator += std::abs(double(scene_flow[i]));
  double squares = 0;
  for (size_t i = 0; i + per_step < n; ++i) {
    const double d = double(scene_flow[i]) - double(scene_flow[i + per_step]);
    squares += d * d;
  }
  out.temporal.numerator = 0.5 * squares;
  for (size_t f = 0; f < steps; ++f) {
    for (size_t r = 0; r < rays; ++r) {
      for (size_t s = 0; s + 1 < samples; ++s) {
        for (size_t c = 0; c < 3; ++c) {
          out.spatial.numerator +=
              std::abs(double(scene_flow[at(f, r, s + 1, c)]) - double(scene_flow[at(f, r, s, c)]));
        }
      }
    }
  }
  if (grad_scene_flow) {
    const double n_magnitude = gradient_divisor(out.magnitude, whole ? &whole->magnitude : nullptr);
    const double n_temporal = gradient_divisor(out.temporal, whole ? &whole->temporal : nullptr);
    const double n_spatial = gradient_divisor(out.spatial, whole ? &whole->spatial : nullptr);
    // Each element gathers its own gradient from the pairs it is in: no element is written
    // twice. (Scattering +g and -g into the neighbours instead, a dependence 3 elements apart,
    // is what GCC 12.2's partial PRE miscompiles at -O3; CMakeLists.txt turns it off too.)
    for (size_t f = 0; f < steps; ++f) {
      for (size_t r = 0; r < rays; ++r) {
        for (size_t s = 0; s < samples; ++s) {
          for (size_t c = 0; c < 3; ++c) {
            const size_t i = at(f, r, s, c);
            const double x = double(scene_flow[i]);
            double g = sign(x) / n_magnitude;
            if (f + 1 < steps) g += (x - double(scene_flow[i + per_step])) / n_temporal;
            if (f > 0) g -= (double(scene_flow[i - per_step]) - x) / n_temporal;
            if (s + 1 < samples) g -= sign(double(scene_flow[at(f, r, s + 1, c)]) - x) / n_spatial;
            if (s > 0) g += sign(x - double(scene_flow[at(f, r, s - 1, c)])) / n_spatial;
            add(grad_scene_flow, i, weight * g);
          }
        }
      }
    }
  }
  return out;
}

namespace {

// sum_s of one ray's weights.
template <typename T>
double ray_sum(const T* weights, size_t r, size_t n_samples) {
  double sum = 0;
  for (size_t s = r * n_samples; s < (r + 1) * n_samples; ++s) sum += double(weights[s]);
  return sum;
}

}  // namespace

template <typename T>
void dynamic_weight_ratio(int n_rays, int n_samples, const T* weights_dynamic,
                          const T* weights_static, double* ratio) {
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    const double a = ray_sum(weights_dynamic, r, size_t(n_samples));
    const double b = ray_sum(weights_static, r, size_t(n_samples));
    ratio[r] = a / std::max(a + b, kWeightRatioFloor);
  }
}

template <typename T>
LossFraction skew_entropy_loss(int n_rays, int n_samples, const T* weights_dynamic,
                               const T* weights_static, double weight, T* grad_weights_dynamic,
                               T* grad_weights_static, const LossFraction* whole) {
  const size_t samples = size_t(n_samples);
  const double eps = kSkewEntropyEpsilon;
  LossFraction f{0, double(n_rays), 0};
  const double denominator = gradient_divisor(f, whole);
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    const double a = ray_sum(weights_dynamic, r, samples);
    const double b = ray_sum(weights_static, r, samples);
    const bool clamped = a + b < kWeightRatioFloor;
    const double total = clamped ? kWeightRatioFloor : a + b;
    const double q = a / total;
    f.numerator += -(q * std::log(q + eps) + (1 - q) * std::log(1 - q + eps));
    if (!grad_weights_dynamic && !grad_weights_static) continue;
    const double grad_q =
        -weight / denominator *
        (std::log(q + eps) + q / (q + eps) - std::log(1 - q + eps) - (1 - q) / (1 - q + eps));
    // q = a / max(a + b, floor): the clamp passes the total's gradient only at or above it.
    const double through_total = clamped ? 0 : -a / (total * total);
    for (size_t s = r * samples; s < (r + 1) * samples; ++s) {
      if (grad_weights_dynamic) add(grad_weights_dynamic, s, grad_q * (1 / total + through_total));
      if (grad_weights_static) add(grad_weights_static, s, grad_q * through_total);
    }
  }
  return f;
}

template <typename T>
LossFraction distortion_loss(int n_rays, int n_samples, const T* weights, const T* s_vals,
                             double weight, T* grad_weights, const LossFraction* whole) {
  const size_t samples = size_t(n_samples), used = samples - 1;
  LossFraction f{0, double(n_rays), 0};
  const double scale = weight / gradient_divisor(f, whole);
  double uniform = 0, pairwise = 0;
  std::vector<double> w(used), m(used), interval(used);
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    const size_t base = r * samples;
    for (size_t i = 0; i < used; ++i) {
      w[i] = double(weights[base + i]);
      m[i] = (double(s_vals[base + i + 1]) + double(s_vals[base + i])) * 0.5;
      interval[i] = double(s_vals[base + i + 1]) - double(s_vals[base + i]);
    }
    // eff_distloss_native: w_i against the prefix sums of w and w m before it.
    double w_prefix = 0, wm_prefix = 0, ray_uniform = 0, ray_pairwise = 0;
    for (size_t i = 0; i < used; ++i) {
      ray_uniform += interval[i] * w[i] * w[i];
      ray_pairwise += w[i] * m[i] * w_prefix - w[i] * wm_prefix;
      w_prefix += w[i];
      wm_prefix += w[i] * m[i];
    }
    uniform += ray_uniform;
    pairwise += ray_pairwise;
    if (!grad_weights) continue;
    // d/dw_k = 2/3 I_k w_k + 2 (m_k (prefix_k - suffix_k) + (wm suffix_k - wm prefix_k)).
    const double w_total = w_prefix, wm_total = wm_prefix;
    w_prefix = wm_prefix = 0;
    for (size_t i = 0; i < used; ++i) {
      const double w_suffix = w_total - w_prefix - w[i];
      const double wm_suffix = wm_total - wm_prefix - w[i] * m[i];
      const double g = 2.0 / 3.0 * interval[i] * w[i] +
                       2 * (m[i] * (w_prefix - w_suffix) + (wm_suffix - wm_prefix));
      add(grad_weights, base + i, scale * g);
      w_prefix += w[i];
      wm_prefix += w[i] * m[i];
    }
  }
  f.numerator = 2 * pairwise + uniform / 3;
  return f;
}

template <typename T>
LossFraction dynamic_weight_suppression_loss(int n_rays, int n_samples, const T* weights_dynamic,
                                             const T* mask, double weight, T* grad_weights_dynamic,
                                             const LossFraction* whole) {
  const size_t samples = size_t(n_samples);
  LossFraction f;
  for (size_t r = 0; r < size_t(n_rays); ++r) {
    f.numerator += std::abs(ray_sum(weights_dynamic, r, samples) * double(mask[r]));
    f.denominator += double(mask[r]) + kDynibarLossEpsilon;
  }
  if (grad_weights_dynamic) {
    const double denominator = gradient_divisor(f, whole);
    for (size_t r = 0; r < size_t(n_rays); ++r) {
      const double m = double(mask[r]);
      const double g = weight * sign(ray_sum(weights_dynamic, r, samples) * m) * m / denominator;
      for (size_t s = r * samples; s < (r + 1) * samples; ++s) add(grad_weights_dynamic, s, g);
    }
  }
  return f;
}

}  // namespace cpu

namespace {

template <typename P>
void require(P* pointer, const char* name) {
  if (!pointer) throw InvalidArgument(std::string("DynIBaR losses: ") + name + " is missing");
}

// Zeros every gradient that is asked for.
template <typename T>
void zero_gradients(const DynibarLossBatch<T>& b, const DynibarRendered<T>& g) {
  const size_t rays = size_t(b.n_rays), samples = rays * size_t(b.n_samples);
  const auto zero = [](T* p, size_t n) {
    if (p) std::fill(p, p + n, T(0));
  };
  zero(g.rgb, 3 * rays);
  zero(g.rgb_static, 3 * rays);
  zero(g.rgb_dynamic, 3 * rays);
  zero(g.depth, rays);
  zero(g.weights, samples);
  zero(g.weights_static, samples);
  zero(g.weights_dynamic, samples);
  zero(g.render_flows, 2 * size_t(b.n_flows) * rays);
  zero(g.dynamic_only_rgb, 3 * rays);
  zero(g.cross_time_rgb, 3 * rays);
  zero(g.points_ref, 3 * size_t(b.n_cycle_pairs) * samples);
  zero(g.points_anchor, 3 * size_t(b.n_cycle_pairs) * samples);
  zero(g.scene_flow, 3 * size_t(b.n_scene_flows) * samples);
  zero(g.cross_time_dynamic_only_rgb, 3 * rays);
  zero(g.static_only_rgb, 3 * rays);
}

// The published `loss`: rgb_loss + cycle + flow + disp + reg + entropy + distortion + static.
void sum_terms(DynibarLossTerms* t) {
  t->rgb = t->composite + t->cross_time + t->dynamic_region + t->dynamic_only +
           t->cross_time_dynamic_only;
  t->static_loss = t->static_region + t->dynamic_weight_suppression;
  const double regularizers =
      t->scene_flow_magnitude + t->scene_flow_temporal + t->scene_flow_spatial;
  t->total = t->static_bootstrap + t->rgb + t->cycle + t->flow + t->disparity + regularizers +
             t->skew_entropy + t->distortion + t->static_loss;
}

template <typename T>
void validate(const DynibarLossWeights& w, const DynibarLossBatch<T>& b) {
  const bool main = w.phase == DynibarPhase::kMain;
  if (b.n_rays < 1 || b.n_samples < (main ? 2 : 1) ||
      (main && (b.n_flows < 1 || (b.cross_time && b.n_cycle_pairs < 1) || b.n_scene_flows < 2))) {
    throw InvalidArgument("DynIBaR losses: needs rays (" + std::to_string(b.n_rays) +
                          ") >= 1, samples (" + std::to_string(b.n_samples) + ") >= 2, flows (" +
                          std::to_string(b.n_flows) + ") >= 1, cycle pairs (" +
                          std::to_string(b.n_cycle_pairs) + ") >= 1, scene flows (" +
                          std::to_string(b.n_scene_flows) + ") >= 2");
  }
  require(b.target_rgb, "target_rgb");
  require(b.static_mask, "static_mask");
  require(b.ray_mask, "ray_mask");
  if (!main) {
    require(b.rendered.static_only_rgb, "static_only_rgb");
    return;
  }
  require(b.target_disparity, "target_disparity");
  require(b.target_flows, "target_flows");
  require(b.flow_validity, "flow_validity");
  require(b.motion_mask, "motion_mask");
  require(b.dynamic_only_ray_mask, "dynamic_only_ray_mask");
  require(b.s_vals, "s_vals");
  const DynibarRendered<const T>& r = b.rendered;
  require(r.rgb, "rgb");
  require(r.rgb_static, "rgb_static");
  require(r.rgb_dynamic, "rgb_dynamic");
  require(r.depth, "depth");
  require(r.weights, "weights");
  require(r.weights_static, "weights_static");
  require(r.weights_dynamic, "weights_dynamic");
  require(r.render_flows, "render_flows");
  require(r.dynamic_only_rgb, "dynamic_only_rgb");
  require(r.scene_flow, "scene_flow");
  if (!b.cross_time) return;
  require(b.cross_time_ray_mask, "cross_time_ray_mask");
  require(b.cross_time_dynamic_only_ray_mask, "cross_time_dynamic_only_ray_mask");
  require(b.cross_time_occlusion_map, "cross_time_occlusion_map");
  require(b.cross_time_dynamic_only_occlusion_map, "cross_time_dynamic_only_occlusion_map");
  require(b.occlusion_weights, "occlusion_weights");
  require(r.cross_time_rgb, "cross_time_rgb");
  require(r.points_ref, "points_ref");
  require(r.points_anchor, "points_anchor");
  require(r.cross_time_dynamic_only_rgb, "cross_time_dynamic_only_rgb");
}

// Each term's epsilon: the Charbonnier terms' 1e-6 and the other ratios' 1e-8; none for the
// means, nor for the suppression, whose 1e-8s are in its denominator.
double term_epsilon(DynibarTerm term) {
  switch (term) {
    case DynibarTerm::kStaticBootstrap:
    case DynibarTerm::kComposite:
    case DynibarTerm::kDynamicRegion:
    case DynibarTerm::kDynamicOnly:
    case DynibarTerm::kStaticRegion:
      return kCharbonnierDenominatorEpsilon;
    case DynibarTerm::kCrossTime:
    case DynibarTerm::kCrossTimeDynamicOnly:
    case DynibarTerm::kDisparity:
    case DynibarTerm::kFlow:
    case DynibarTerm::kCycle:
      return kDynibarLossEpsilon;
    case DynibarTerm::kSceneFlowMagnitude:
    case DynibarTerm::kSceneFlowTemporal:
    case DynibarTerm::kSceneFlowSpatial:
    case DynibarTerm::kSkewEntropy:
    case DynibarTerm::kDistortion:
    case DynibarTerm::kDynamicWeightSuppression:
      return 0;
  }
  return 0;
}

// Every term at {0, 0, its epsilon}: what a term the phase does not compute keeps.
DynibarLossFractions uncomputed_fractions() {
  DynibarLossFractions fractions;
  for (size_t i = 0; i < kDynibarTermCount; ++i)
    fractions[i].epsilon = term_epsilon(DynibarTerm(i));
  return fractions;
}

// Every step entry point: this batch's fractions, and the gradient into `g`'s non-null pointers
// with each term's numerator over whole's denominator (this batch's own where whole is null).
template <typename T>
DynibarLossFractions step_fractions(const DynibarLossWeights& w, const DynibarLossBatch<T>& b,
                                    const DynibarRendered<T>& g,
                                    const DynibarLossFractions* whole) {
  validate(w, b);
  zero_gradients(b, g);
  using Term = DynibarTerm;
  DynibarLossFractions f = uncomputed_fractions();
  const auto of = [&](Term term) -> LossFraction& { return f[size_t(term)]; };
  const auto whole_of = [&](Term term) { return whole ? &(*whole)[size_t(term)] : nullptr; };
  const int R = b.n_rays, S = b.n_samples;
  const size_t rays = size_t(R);
  const DynibarRendered<const T>& in = b.rendered;
  // The static pixels' mask, (1 - static_mask) * ray mask, and products of masks as T.
  std::vector<T> mask(rays);
  const auto static_pixels = [&](size_t r) {
    return (1 - double(b.static_mask[r])) * double(b.ray_mask[r]);
  };
  if (w.phase == DynibarPhase::kStaticBootstrap) {
    for (size_t r = 0; r < rays; ++r) mask[r] = T(static_pixels(r));
    of(Term::kStaticBootstrap) =
        cpu::charbonnier_loss(R, in.static_only_rgb, b.target_rgb, mask.data(), w.static_bootstrap,
                              g.static_only_rgb, whole_of(Term::kStaticBootstrap));
    return f;
  }
  const auto with_motion = [&](const T* ray_mask) {
    for (size_t r = 0; r < rays; ++r) mask[r] = T(double(ray_mask[r]) * double(b.motion_mask[r]));
    return mask.data();
  };
  of(Term::kComposite) = cpu::charbonnier_loss(R, in.rgb, b.target_rgb, b.ray_mask, w.composite,
                                               g.rgb, whole_of(Term::kComposite));
  if (b.cross_time) {
    of(Term::kCrossTime) = cpu::occlusion_weighted_charbonnier_loss(
        R, in.cross_time_rgb, b.target_rgb, b.cross_time_ray_mask, b.cross_time_occlusion_map,
        w.cross_time, g.cross_time_rgb, whole_of(Term::kCrossTime));
    of(Term::kCrossTimeDynamicOnly) = cpu::occlusion_weighted_charbonnier_loss(
        R, in.cross_time_dynamic_only_rgb, b.target_rgb,
        with_motion(b.cross_time_dynamic_only_ray_mask), b.cross_time_dynamic_only_occlusion_map,
        w.cross_time_dynamic_only, g.cross_time_dynamic_only_rgb,
        whole_of(Term::kCrossTimeDynamicOnly));
    of(Term::kCycle) = cpu::trajectory_cycle_loss(
        b.n_cycle_pairs, R, S, in.points_ref, in.points_anchor, b.occlusion_weights, w.cycle,
        g.points_ref, g.points_anchor, whole_of(Term::kCycle));
  }
  if (w.dynamic_region != 0) {
    of(Term::kDynamicRegion) =
        cpu::charbonnier_loss(R, in.rgb_dynamic, b.target_rgb, with_motion(b.ray_mask),
                              w.dynamic_region, g.rgb_dynamic, whole_of(Term::kDynamicRegion));
  }
  of(Term::kDynamicOnly) = cpu::charbonnier_loss(
      R, in.dynamic_only_rgb, b.target_rgb, with_motion(b.dynamic_only_ray_mask), w.dynamic_only,
      g.dynamic_only_rgb, whole_of(Term::kDynamicOnly));
  of(Term::kDisparity) = cpu::disparity_l1_loss(R, in.depth, b.target_disparity, b.ray_mask,
                                                w.disparity, g.depth, whole_of(Term::kDisparity));
  std::vector<T> flow_mask(size_t(b.n_flows) * rays);
  for (size_t i = 0; i < flow_mask.size(); ++i) {
    flow_mask[i] = T(double(b.ray_mask[i % rays]) * double(b.flow_validity[i]));
  }
  of(Term::kFlow) =
      cpu::flow_l1_loss(b.n_flows, R, in.render_flows, b.target_flows, flow_mask.data(), w.flow,
                        g.render_flows, whole_of(Term::kFlow));
  SceneFlowRegularizers whole_regularizers;
  if (whole) {
    whole_regularizers = {*whole_of(Term::kSceneFlowMagnitude), *whole_of(Term::kSceneFlowTemporal),
                          *whole_of(Term::kSceneFlowSpatial)};
  }
  const SceneFlowRegularizers reg =
      cpu::scene_flow_regularizers(b.n_scene_flows, R, S, in.scene_flow, w.scene_flow, g.scene_flow,
                                   whole ? &whole_regularizers : nullptr);
  of(Term::kSceneFlowMagnitude) = reg.magnitude;
  of(Term::kSceneFlowTemporal) = reg.temporal;
  of(Term::kSceneFlowSpatial) = reg.spatial;
  of(Term::kSkewEntropy) =
      cpu::skew_entropy_loss(R, S, in.weights_dynamic, in.weights_static, w.skew_entropy,
                             g.weights_dynamic, g.weights_static, whole_of(Term::kSkewEntropy));
  of(Term::kDistortion) = cpu::distortion_loss(R, S, in.weights, b.s_vals, w.distortion, g.weights,
                                               whole_of(Term::kDistortion));
  // The static region, weighted by the current decomposition: (1 - q) without its gradient.
  std::vector<double> ratio(rays);
  cpu::dynamic_weight_ratio(R, S, in.weights_dynamic, in.weights_static, ratio.data());
  for (size_t r = 0; r < rays; ++r) mask[r] = T(static_pixels(r) * (1 - ratio[r]));
  of(Term::kStaticRegion) =
      cpu::charbonnier_loss(R, in.rgb_static, b.target_rgb, mask.data(), w.static_region,
                            g.rgb_static, whole_of(Term::kStaticRegion));
  if (w.dynamic_weight_suppression != 0) {
    for (size_t r = 0; r < rays; ++r) {
      mask[r] = ratio[r] < kSuppressionRatioBelow ? mask[r] : T(0);
    }
    of(Term::kDynamicWeightSuppression) = cpu::dynamic_weight_suppression_loss(
        R, S, in.weights_dynamic, mask.data(), w.dynamic_weight_suppression, g.weights_dynamic,
        whole_of(Term::kDynamicWeightSuppression));
  }
  return f;
}

}  // namespace

DynibarLossTerms dynibar_loss_terms(const DynibarLossWeights& w,
                                    const DynibarLossFractions& fractions) {
  const auto value = [&](DynibarTerm term) { return fractions[size_t(term)].value(); };
  DynibarLossTerms t;
  t.static_bootstrap = w.static_bootstrap * value(DynibarTerm::kStaticBootstrap);
  t.composite = w.composite * value(DynibarTerm::kComposite);
  t.cross_time = w.cross_time * value(DynibarTerm::kCrossTime);
  t.dynamic_region = w.dynamic_region * value(DynibarTerm::kDynamicRegion);
  t.dynamic_only = w.dynamic_only * value(DynibarTerm::kDynamicOnly);
  t.cross_time_dynamic_only = w.cross_time_dynamic_only * value(DynibarTerm::kCrossTimeDynamicOnly);
  t.disparity = w.disparity * value(DynibarTerm::kDisparity);
  t.flow = w.flow * value(DynibarTerm::kFlow);
  t.cycle = w.cycle * value(DynibarTerm::kCycle);
  t.scene_flow_magnitude = w.scene_flow * value(DynibarTerm::kSceneFlowMagnitude);
  t.scene_flow_temporal = w.scene_flow * value(DynibarTerm::kSceneFlowTemporal);
  t.scene_flow_spatial = w.scene_flow * value(DynibarTerm::kSceneFlowSpatial);
  t.skew_entropy = w.skew_entropy * value(DynibarTerm::kSkewEntropy);
  t.distortion = w.distortion * value(DynibarTerm::kDistortion);
  t.static_region = w.static_region * value(DynibarTerm::kStaticRegion);
  t.dynamic_weight_suppression =
      w.dynamic_weight_suppression * value(DynibarTerm::kDynamicWeightSuppression);
  sum_terms(&t);
  return t;
}

void append_sums(const DynibarLossFractions& fractions, std::vector<double>* sums) {
  for (const LossFraction& f : fractions) {
    sums->push_back(f.numerator);
    sums->push_back(f.denominator);
  }
}

DynibarLossFractions fractions_from_sums(const double* sums) {
  DynibarLossFractions fractions;
  for (size_t i = 0; i < kDynibarTermCount; ++i) {
    fractions[i] = {sums[2 * i], sums[2 * i + 1], term_epsilon(DynibarTerm(i))};
  }
  return fractions;
}

template <typename T>
DynibarLossFractions dynibar_loss_fractions(const DynibarLossWeights& w,
                                            const DynibarLossBatch<T>& b) {
  return step_fractions(w, b, DynibarRendered<T>(), nullptr);
}

template <typename T>
DynibarLossTerms dynibar_losses(const DynibarLossWeights& w, const DynibarLossBatch<T>& b,
                                const DynibarRendered<T>& g) {
  return dynibar_loss_terms(w, step_fractions(w, b, g, nullptr));
}

template <typename T>
DynibarLossTerms dynibar_losses(const DynibarLossWeights& w, const DynibarLossBatch<T>& b,
                                const DynibarRendered<T>& g, const DynibarLossFractions& whole) {
  step_fractions(w, b, g, &whole);
  return dynibar_loss_terms(w, whole);
}

#define MVIBR_DYNIBAR_LOSSES(T)                                                                    \
  namespace cpu {                                                                                  \
  template LossFraction charbonnier_loss(int, const T*, const T*, const T*, double, T*,            \
                                         const LossFraction*);                                     \
  template LossFraction occlusion_weighted_charbonnier_loss(int, const T*, const T*, const T*,     \
                                                            const T*, double, T*,                  \
                                                            const LossFraction*);                  \
  template LossFraction disparity_l1_loss(int, const T*, const T*, const T*, double, T*,           \
                                          const LossFraction*);                                    \
  template LossFraction flow_l1_loss(int, int, const T*, const T*, const T*, double, T*,           \
                                     const LossFraction*);                                         \
  template LossFraction trajectory_cycle_loss(int, int, int, const T*, const T*, const T*, double, \
                                              T*, T*, const LossFraction*);                        \
  template SceneFlowRegularizers scene_flow_regularizers(int, int, int, const T*, double, T*,      \
                                                         const SceneFlowRegularizers*);            \
  template void dynamic_weight_ratio(int, int, const T*, const T*, double*);                       \
  template LossFraction skew_entropy_loss(int, int, const T*, const T*, double, T*, T*,            \
                                          const LossFraction*);                                    \
  template LossFraction distortion_loss(int, int, const T*, const T*, double, T*,                  \
                                        const LossFraction*);                                      \
  template LossFraction dynamic_weight_suppression_loss(int, int, const T*, const T*, double, T*,  \
                                                        const LossFraction*);                      \
  }                                                                                                \
  template DynibarLossFractions dynibar_loss_fractions(const DynibarLossWeights&,                  \
                                                       const DynibarLossBatch<T>&);                \
  template DynibarLossTerms dynibar_losses(const DynibarLossWeights&, const DynibarLossBatch<T>&,  \
                                           const DynibarRendered<T>&);                             \
  template DynibarLossTerms dynibar_losses(const DynibarLossWeights&, const DynibarLossBatch<T>&,  \
                                           const DynibarRendered<T>&,                              \
                                           const DynibarLossFractions&);
MVIBR_DYNIBAR_LOSSES(float)
MVIBR_DYNIBAR_LOSSES(double)
#undef MVIBR_DYNIBAR_LOSSES

}  // namespace mvibr
