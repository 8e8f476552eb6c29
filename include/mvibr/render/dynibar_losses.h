// DynIBaR's training losses on the CPU, each term with its gradient (google/dynibar train.py's
// loss lines, ibrnet/criterion.py, utils.py's img2charbonier; mip-NeRF 360's distortion as
// torch_efficient_distloss's eff_distloss_native computes it).
//
// Layouts (row-major, last index fastest): R rays, S samples per ray, K flow offsets (6),
// P cycle pairs, F scene-flow steps (6):
//   colours [R,3]; per-ray values and masks [R]; per-sample weights, s_vals, occlusion
//   weights [R,S]; rendered and target flows [K,R,2], flow validity [K,R]; trajectory points
//   [P,R,S,3]; scene flow [F,R,S,3].
//
// The terms (eps = 1e-3; sums over every index shown; no gradient reaches a mask or weight map):
//   charbonnier      sum_r m_r sum_c sqrt((p - g)^2 + eps^2) / (3 sum m + 1e-6)
//   occlusion-weighted charbonnier: m_r o_r in place of m_r, / (3 sum m o + 1e-8)
//   disparity        sum |1 / max(depth, 1e-2) - g| m / (sum m + 1e-8)
//   flow             sum |f - g| m / (2 sum m + 1e-8)
//   cycle            sum |ref - anchor| o_rs / (3 P sum o + 1e-8)
//   scene flow       mean |sf|;  0.5 mean (sf[f] - sf[f+1])^2;  mean |sf[:, :, s+1] - sf[:, :, s]|
//   skew entropy     mean_r -(q log(q + 1e-9) + (1 - q) log(1 - q + 1e-9)),
//                    q = sum_s w_dy / max(sum_s w_dy + sum_s w_st, 1e-9)
//   distortion       eff_distloss_native(w[:, :S-1], mid points, intervals of s_vals):
//                    mean_r [1/3 sum_i I_i w_i^2 + 2 sum_i w_i sum_{j<i} w_j (m_i - m_j)]
//                    (the pairwise sum w_i w_j |m_i - m_j| when s_vals increase along the ray)
//   static region    charbonnier of the static component with (1 - static_mask) m (1 - q)
//   suppression      sum_r |m2_r sum_s w_dy| / sum_r (m2_r + 1e-8), m2 = the static-region
//                    mask where q < 0.1: train.py adds its 1e-8 per ray, inside the sum, so the
//                    denominator is sum m2 + R 1e-8
// |x|'s gradient at 0 is 0 and max(x, lo)'s passes at x = lo, as in autograd.
//
// Every term is a fraction whose numerator and denominator are sums over rays (and samples), so
// that ranks and micro-batches add them: a step of B rays split into parts gives the whole's
// loss from the parts' summed fractions, and the whole's gradient from each part's gradient
// under the whole's denominators (no gradient ever reaches a denominator).
//
// Everything here computes in double whatever T is (the terms are O(R S) beside networks of
// O(R S width^2)) and sums serially in a fixed order. Each cpu:: function returns its term
// unweighted; where a gradient pointer is not null it adds weight * d term / d input there (+=),
// so that the terms of a step accumulate into inputs they share. The gradient divides by
// whole's denominator + epsilon where `whole` is given (the term of the batch this one is part
// of), by its own otherwise.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "mvibr/render/dynibar_schedule.h"

namespace mvibr {

constexpr double kCharbonnierEpsilon = 1e-3;
constexpr double kCharbonnierDenominatorEpsilon = 1e-6;  // utils.py's TINY_NUMBER
constexpr double kDynibarLossEpsilon = 1e-8;
constexpr double kDisparityDepthFloor = 1e-2;
constexpr double kWeightRatioFloor = 1e-9;    // the ratio's denominator clamp
constexpr double kSkewEntropyEpsilon = 1e-9;  // inside its logarithms
constexpr double kSuppressionRatioBelow = 0.1;

// A term as ranks and micro-batches add it: value = numerator / (denominator + epsilon); the
// numerator and the denominator are sums over rays (and samples), epsilon the term's constant.
struct LossFraction {
  double numerator = 0, denominator = 0, epsilon = 0;
  // 0 where the numerator is 0: {0, 0, 0} (a term without an epsilon that no part computed)
  // is 0, not NaN.
  double value() const;
};

// The scene-flow regularisers, unweighted: sum |sf| / n, 0.5 sum d^2 / n_temporal and
// sum |...| / n_spatial, each without an epsilon.
struct SceneFlowRegularizers {
  LossFraction magnitude, temporal, spatial;
};

namespace cpu {

template <typename T>
LossFraction charbonnier_loss(int n_rays, const T* predicted, const T* target, const T* ray_mask,
                              double weight, T* grad_predicted,
                              const LossFraction* whole = nullptr);

// compute_temporal_rgb_loss: the Charbonnier loss with each ray weighted by mask * occlusion map.
template <typename T>
LossFraction occlusion_weighted_charbonnier_loss(int n_rays, const T* predicted, const T* target,
                                                 const T* ray_mask, const T* occlusion_map,
                                                 double weight, T* grad_predicted,
                                                 const LossFraction* whole = nullptr);

template <typename T>
LossFraction disparity_l1_loss(int n_rays, const T* depth, const T* target_disparity,
                               const T* ray_mask, double weight, T* grad_depth,
                               const LossFraction* whole = nullptr);

template <typename T>
LossFraction flow_l1_loss(int n_flows, int n_rays, const T* flows, const T* target_flows,
                          const T* flow_mask, double weight, T* grad_flows,
                          const LossFraction* whole = nullptr);

template <typename T>
LossFraction trajectory_cycle_loss(int n_pairs, int n_rays, int n_samples, const T* points_ref,
                                   const T* points_anchor, const T* occlusion_weights,
                                   double weight, T* grad_points_ref, T* grad_points_anchor,
                                   const LossFraction* whole = nullptr);

// `weight` multiplies each of the three.
template <typename T>
SceneFlowRegularizers scene_flow_regularizers(int n_steps, int n_rays, int n_samples,
                                              const T* scene_flow, double weight,
                                              T* grad_scene_flow,
                                              const SceneFlowRegularizers* whole = nullptr);

// q per ray [R], in double: the static-region mask and the suppression's (q < 0.1) read it.
template <typename T>
void dynamic_weight_ratio(int n_rays, int n_samples, const T* weights_dynamic,
                          const T* weights_static, double* ratio);

template <typename T>
LossFraction skew_entropy_loss(int n_rays, int n_samples, const T* weights_dynamic,
                               const T* weights_static, double weight, T* grad_weights_dynamic,
                               T* grad_weights_static, const LossFraction* whole = nullptr);

// Reads w[:, :S-1] of `weights`; the last sample gets no gradient. Needs n_samples >= 2. The
// numerator is 2 pairwise + uniform / 3, the denominator R.
template <typename T>
LossFraction distortion_loss(int n_rays, int n_samples, const T* weights, const T* s_vals,
                             double weight, T* grad_weights, const LossFraction* whole = nullptr);

// The suppression term without its 0.1 (the schedule's weight), given m2 [R]. Its denominator
// holds the per-ray 1e-8s, sum_r (m2_r + 1e-8); its epsilon is 0.
template <typename T>
LossFraction dynamic_weight_suppression_loss(int n_rays, int n_samples, const T* weights_dynamic,
                                             const T* mask, double weight, T* grad_weights_dynamic,
                                             const LossFraction* whole = nullptr);

}  // namespace cpu

// ---- One training step's loss ----

// The renders' differentiable outputs: `const T` for their values, `T` for their gradients (each
// nullable: no gradient wanted). Names after render_ray.py's outputs.
template <typename P>
struct DynibarRendered {
  // outputs_coarse_ref: the composite at the target's time.
  P* rgb = nullptr;               // [R,3]
  P* rgb_static = nullptr;        // [R,3], its static component
  P* rgb_dynamic = nullptr;       // [R,3], its dynamic component
  P* depth = nullptr;             // [R]
  P* weights = nullptr;           // [R,S]
  P* weights_static = nullptr;    // [R,S]
  P* weights_dynamic = nullptr;   // [R,S]
  P* render_flows = nullptr;      // [K,R,2]
  P* dynamic_only_rgb = nullptr;  // [R,3], outputs_coarse_ref_dy
  // outputs_coarse_anchor: the composite rendered across time, and its trajectories.
  P* cross_time_rgb = nullptr;               // [R,3]
  P* points_ref = nullptr;                   // [P,R,S,3], pts_traj_ref
  P* points_anchor = nullptr;                // [P,R,S,3], pts_traj_anchor
  P* scene_flow = nullptr;                   // [F,R,S,3], sf_seq
  P* cross_time_dynamic_only_rgb = nullptr;  // [R,3], outputs_coarse_anchor_dy
  P* static_only_rgb = nullptr;              // [R,3], outputs_coarse_st: the bootstrap's render
};

// One step's inputs. The bootstrap reads target_rgb, static_mask, ray_mask and
// rendered.static_only_rgb; the main loop everything but that.
template <typename T>
struct DynibarLossBatch {
  int n_rays = 0, n_samples = 0;
  int n_flows = 6, n_cycle_pairs = 0, n_scene_flows = 6;
  // ray_batch
  const T* target_rgb = nullptr;        // [R,3]
  const T* target_disparity = nullptr;  // [R]
  const T* target_flows = nullptr;      // [K,R,2]
  const T* flow_validity = nullptr;     // [K,R], ray_batch['masks']
  const T* motion_mask = nullptr;       // [R]
  const T* static_mask = nullptr;       // [R]; the static terms train where it is 0
  // Each render's ray mask (more than 8 valid samples), and what has no gradient.
  const T* ray_mask = nullptr;                               // [R], outputs_coarse_ref['mask']
  const T* dynamic_only_ray_mask = nullptr;                  // [R]
  const T* cross_time_ray_mask = nullptr;                    // [R]
  const T* cross_time_dynamic_only_ray_mask = nullptr;       // [R]
  const T* cross_time_occlusion_map = nullptr;               // [R], occ_weight_map
  const T* cross_time_dynamic_only_occlusion_map = nullptr;  // [R]
  const T* occlusion_weights = nullptr;                      // [R,S], occ_weights
  const T* s_vals = nullptr;                                 // [R,S]
  // False for a target with no anchor frame (its neighbours in time all held out or past the
  // video's ends): the cross-time terms and the cycle are then 0 over 0, their inputs unread.
  bool cross_time = true;
  DynibarRendered<const T> rendered;
};

// Each term as it enters the loss (weighted), and the total.
struct DynibarLossTerms {
  double static_bootstrap = 0;
  double composite = 0, cross_time = 0, dynamic_region = 0, dynamic_only = 0,
         cross_time_dynamic_only = 0;
  double disparity = 0, flow = 0, cycle = 0;
  double scene_flow_magnitude = 0, scene_flow_temporal = 0, scene_flow_spatial = 0;
  double skew_entropy = 0, distortion = 0;
  double static_region = 0, dynamic_weight_suppression = 0;
  // train.py's logged groups, and `loss` summed in its order.
  double rgb = 0, static_loss = 0, total = 0;
};

// Every term, in DynibarLossTerms' order.
enum class DynibarTerm : size_t {
  kStaticBootstrap,
  kComposite,
  kCrossTime,
  kDynamicRegion,
  kDynamicOnly,
  kCrossTimeDynamicOnly,
  kDisparity,
  kFlow,
  kCycle,
  kSceneFlowMagnitude,
  kSceneFlowTemporal,
  kSceneFlowSpatial,
  kSkewEntropy,
  kDistortion,
  kStaticRegion,
  kDynamicWeightSuppression,
};
constexpr size_t kDynibarTermCount = size_t(DynibarTerm::kDynamicWeightSuppression) + 1;

// Each term's fraction, unweighted, indexed by DynibarTerm. A term the phase does not compute
// is {0, 0, its epsilon}: its value is 0.
using DynibarLossFractions = std::array<LossFraction, kDynibarTermCount>;

// The loss of one step under `weights` (dynibar_loss_weights) and its gradient into every
// non-null pointer of `grad` (overwritten; zeros for an input the phase does not read):
//   static_bootstrap   charbonnier(static_only_rgb, (1 - static_mask) ray_mask)
//   composite          charbonnier(rgb, ray_mask)
//   cross_time         occlusion-weighted(cross_time_rgb, cross_time_ray_mask, its map)
//   dynamic_region     charbonnier(rgb_dynamic, ray_mask motion_mask)
//   dynamic_only       charbonnier(dynamic_only_rgb, dynamic_only_ray_mask motion_mask)
//   cross_time_dynamic_only  occlusion-weighted(..., its ray mask motion_mask, its map)
//   disparity (depth, ray_mask), flow (render_flows, ray_mask flow_validity), cycle, the scene
//   flow regularisers, skew entropy and distortion (weights, s_vals) as above; static_region
//   on rgb_static and the suppression on weights_dynamic.
// The dynamic-region and suppression terms are computed only under a weight that is not 0
// (train.py's `if`s), the others always. Throws InvalidArgument naming an input the phase needs
// that is null, or a size below 1 (n_samples below 2).
template <typename T>
DynibarLossTerms dynibar_losses(const DynibarLossWeights& weights, const DynibarLossBatch<T>& batch,
                                const DynibarRendered<T>& grad);

// ---- A step split over ranks and micro-batches ----
// Each part computes its fractions (dynibar_loss_fractions), the parts' numerators and
// denominators are summed (append_sums, an all-reduce, fractions_from_sums), and each part then
// takes its share of the whole's gradient (dynibar_losses with `whole`). Throws as
// dynibar_losses.

// This batch's fractions under `weights`, without gradients.
template <typename T>
DynibarLossFractions dynibar_loss_fractions(const DynibarLossWeights& weights,
                                            const DynibarLossBatch<T>& batch);

// The gradient of the whole batch's loss that this batch's rays contribute (each term's
// numerator gradient over whole's denominator + epsilon) into `grad` as above, and the whole's
// terms (dynibar_loss_terms(weights, whole)). `whole` is the sum of every part's fractions
// under the same weights, this batch's included.
template <typename T>
DynibarLossTerms dynibar_losses(const DynibarLossWeights& weights, const DynibarLossBatch<T>& batch,
                                const DynibarRendered<T>& grad, const DynibarLossFractions& whole);

// The weighted terms of `fractions` and their sums (rgb, static_loss, total).
DynibarLossTerms dynibar_loss_terms(const DynibarLossWeights& weights,
                                    const DynibarLossFractions& fractions);

// Appends each term's numerator and denominator, in DynibarTerm's order (2 kDynibarTermCount
// values): what an all-reduce sums.
void append_sums(const DynibarLossFractions& fractions, std::vector<double>* sums);

// The fractions of 2 kDynibarTermCount values as append_sums writes them, each with its term's
// epsilon.
DynibarLossFractions fractions_from_sums(const double* sums);

}  // namespace mvibr
