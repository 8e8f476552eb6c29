// Adam, AdamW, LAMB, the learning-rate schedules and gradient clipping (see optimizer.h).
// - Adam and AdamW follow torch.optim's single-tensor paths operation by operation, in float,
//   with the scalars (bias corrections, step size, decay factor) computed in double as Python
//   computes them.
// - LAMB follows apex's multi_tensor_lamb in float; its per-tensor norms are sums of squares in
//   double over fixed chunks added in order (no dependence on the thread count), and the trust
//   ratio times the learning rate is taken in double, then rounded.
#include "mvibr/nn/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>

#include <omp.h>

#include "mvibr/core/error.h"

namespace mvibr::nn {

double step_decay_learning_rate(double initial, double factor, uint64_t decay_steps,
                                uint64_t completed) {
  return initial * std::pow(factor, double(completed / decay_steps));
}

namespace {

constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

void check_option(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("Adam: " + what);
}

// adam_update_value over values [begin, end) of one group, in a loop the compiler vectorises:
// the coefficients by value and the arrays restrict, so no store can change what the next value
// reads (with the coefficients shared by reference the loop stayed scalar: two divisions and a
// square root a value, 141 ms for the pose model's 12.6M fusion weights). The same operations,
// so the same bits.
void update_values(AdamCoefficients c, int group, bool decays, size_t begin, size_t end,
                   const float* __restrict grads, float* __restrict values,
                   float* __restrict exp_avg, float* __restrict exp_avg_sq) {
  for (size_t i = begin; i < end; ++i) {
    adam_update_value(c, group, decays, grads[i], &values[i], &exp_avg[i], &exp_avg_sq[i]);
  }
}

}  // namespace

double cosine_learning_rate(double initial, uint64_t warmup, uint64_t total, double min_lr_ratio,
                            uint64_t completed) {
  if (completed < warmup)
    return initial * (double(completed) / double(std::max<uint64_t>(1, warmup)));
  if (completed >= total) return initial * min_lr_ratio;
  const double progress =
      double(completed - warmup) / double(std::max<uint64_t>(1, total - warmup));
  const double num_cycles = 0.5;
  const double factor = 0.5 * (1.0 + std::cos(kPi * num_cycles * 2.0 * progress));
  return initial * std::max(0.0, factor * (1 - min_lr_ratio) + min_lr_ratio);
}

double global_grad_norm(const float* grads, size_t count) {
  // Partial sums per fixed chunk, added in order: no dependence on the thread count.
  constexpr size_t kChunk = kGradNormChunk;
  const size_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t end = std::min(count, (c + 1) * kChunk);
    double sum = 0;
    for (size_t i = c * kChunk; i < end; ++i) sum += double(grads[i]) * double(grads[i]);
    partial[c] = sum;
  }
  double total = 0;
  for (double sum : partial) total += sum;
  return std::sqrt(total);
}

double clip_grad_norm(float* grads, size_t count, double max_norm) {
  const double norm = global_grad_norm(grads, count);
  clip_grad_norm(grads, count, max_norm, norm);
  return norm;
}

void clip_grad_norm(float* grads, size_t count, double max_norm, double norm) {
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    const float factor = float(scale);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) grads[i] *= factor;
  }
}

Adam::Adam(const ParameterSet& params, const AdamOptions& options)
    : options_(options), exp_avg_(params.size(), 0.0f), exp_avg_sq_(params.size(), 0.0f) {
  const AdamOptions& o = options_;
  check_option(std::isfinite(o.lrate_feature) && o.lrate_feature >= 0,
               "lrate_feature must be a finite number >= 0");
  check_option(std::isfinite(o.lrate_mlp) && o.lrate_mlp >= 0,
               "lrate_mlp must be a finite number >= 0");
  check_option(std::isfinite(o.lrate_fusion) && o.lrate_fusion >= 0,
               "lrate_fusion must be a finite number >= 0");
  check_option(std::isfinite(o.lrate_decay_factor) && o.lrate_decay_factor > 0,
               "lrate_decay_factor must be a finite number > 0");
  check_option(o.lrate_decay_steps >= 1, "lrate_decay_steps must be >= 1");
  check_option(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
               "betas must be in [0, 1)");
  check_option(std::isfinite(o.eps) && o.eps >= 0, "eps must be a finite number >= 0");
  check_option(std::isfinite(o.static_rate_multiplier) && o.static_rate_multiplier >= 0 &&
                   std::isfinite(o.basis_rate_multiplier) && o.basis_rate_multiplier >= 0,
               "the rate multipliers must be finite numbers >= 0");
  check_option(std::isfinite(o.max_grad_norm) && o.max_grad_norm >= 0,
               "max_grad_norm must be a finite number >= 0 (0 = no clipping)");
  check_option(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
               "weight_decay must be a finite number >= 0");
  check_option(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1]");
  check_option(o.lr_schedule != LrSchedule::kCosine || o.warmup_steps < o.total_steps,
               "the cosine schedule needs warmup_steps < total_steps");
  for (const ParameterInfo& info : params.infos()) {
    const bool decays = o.weight_decay > 0 && (o.weight_decay_1d || info.shape.size() > 1);
    tensors_.push_back({info.offset, info.offset + info.size, info.group, decays});
    if (!spans_.empty() && spans_.back().group == info.group && spans_.back().decays == decays &&
        spans_.back().end == info.offset) {
      spans_.back().end = info.offset + info.size;
    } else {
      spans_.push_back(tensors_.back());
    }
  }
}

double Adam::initial_learning_rate(ParameterGroup group) const {
  const AdamOptions& o = options_;
  switch (group) {
    case ParameterGroup::kFeature:
      return o.lrate_feature;
    case ParameterGroup::kMlp:
      return o.lrate_mlp;
    case ParameterGroup::kStaticFeature:
      return o.lrate_feature * o.static_rate_multiplier;
    case ParameterGroup::kStaticMlp:
      return o.lrate_mlp * o.static_rate_multiplier;
    case ParameterGroup::kTrajectoryBasis:
      return o.lrate_mlp * o.basis_rate_multiplier;
    case ParameterGroup::kFusion:
      return o.lrate_fusion;
  }
  throw InvalidArgument("Adam: unknown parameter group " + std::to_string(int(group)));
}

double Adam::learning_rate(ParameterGroup group) const {
  const double initial = initial_learning_rate(group);
  if (options_.schedule) return options_.schedule(initial, steps_);
  if (options_.lr_schedule == LrSchedule::kCosine) {
    return cosine_learning_rate(initial, options_.warmup_steps, options_.total_steps,
                                options_.min_lr_ratio, steps_);
  }
  return step_decay_learning_rate(initial, options_.lrate_decay_factor, options_.lrate_decay_steps,
                                  steps_);
}

double Adam::step(ParameterSet* params) {
  return step(params, global_grad_norm(params->grads().data(), params->size()));
}

double Adam::step(ParameterSet* params, double grad_norm, uint32_t groups) {
  if (params->size() != exp_avg_.size()) {
    throw InvalidArgument("Adam: built for " + std::to_string(exp_avg_.size()) +
                          " parameter values, stepped with " + std::to_string(params->size()));
  }
  float* grads = params->grads().data();
  const size_t count = params->size();
  if (options_.max_grad_norm > 0) clip_grad_norm(grads, count, options_.max_grad_norm, grad_norm);

  if (options_.kind == OptimizerKind::kLamb) {
    lamb_update(advance(groups), groups, params);
    return grad_norm;
  }
  const AdamCoefficients c = coefficients(advance(groups), groups);
  float* values = params->values().data();
  float* m = exp_avg_.data();
  float* v = exp_avg_sq_.data();
#pragma omp parallel
  {
    // Each thread its share of every span (values are independent: no barrier between spans).
    const size_t thread = size_t(omp_get_thread_num()), threads = size_t(omp_get_num_threads());
    for (const Span& span : spans_) {
      const int group = int(span.group);
      if (!(groups >> group & 1u)) continue;
      const size_t n = span.end - span.begin;
      update_values(c, group, span.decays, span.begin + n * thread / threads,
                    span.begin + n * (thread + 1) / threads, grads, values, m, v);
    }
  }
  return grad_norm;
}

AdamCoefficients Adam::begin_update(uint32_t groups) {
  if (options_.kind == OptimizerKind::kLamb) {
    throw InvalidArgument("Adam: LAMB's update needs per-tensor norms; only step() applies it");
  }
  return coefficients(advance(groups), groups);
}

Adam::GroupRates Adam::advance(uint32_t groups) {
  GroupRates lr;
  for (int g = 0; g < kParameterGroupCount; ++g) lr[size_t(g)] = learning_rate(ParameterGroup(g));
  ++steps_;
  for (int g = 0; g < kParameterGroupCount; ++g) group_steps_[size_t(g)] += groups >> g & 1u;
  return lr;
}

AdamCoefficients Adam::coefficients(const GroupRates& lr, uint32_t groups) const {
  static_assert(sizeof(AdamCoefficients::step_size) / sizeof(float) == kParameterGroupCount,
                "a step size for every parameter group");
  AdamCoefficients c;
  for (int g = 0; g < kParameterGroupCount; ++g) {
    if (!(groups >> g & 1u)) continue;
    const double t = double(group_steps_[size_t(g)]);
    const double bias_correction1 = 1 - std::pow(options_.beta1, t);
    const double bias_correction2 = 1 - std::pow(options_.beta2, t);
    c.step_size[g] = float(lr[size_t(g)] / bias_correction1);
    c.bias_correction2_sqrt[g] = float(std::sqrt(bias_correction2));
    if (options_.kind == OptimizerKind::kAdamW) {
      c.decay_factor[g] = float(1 - lr[size_t(g)] * options_.weight_decay);
    }
  }
  c.beta1 = float(options_.beta1);
  c.beta2 = float(options_.beta2);
  c.one_minus_beta1 = float(1 - options_.beta1);
  c.one_minus_beta2 = float(1 - options_.beta2);
  c.eps = float(options_.eps);
  if (options_.kind == OptimizerKind::kAdam) c.l2_penalty = float(options_.weight_decay);
  return c;
}

namespace {

// LAMB's direction for one value whose moments are updated: apex's MOMENT_MODE_1 (decoupled
// decay), u = (m / bias_correction1) / (sqrt(v / bias_correction2) + eps) + weight_decay * p.
float lamb_direction(float value, float exp_avg, float exp_avg_sq, float bias_correction1,
                     float bias_correction2, float eps, float weight_decay) {
  const float denom = sqrtf(exp_avg_sq / bias_correction2) + eps;
  return (exp_avg / bias_correction1) / denom + weight_decay * value;
}

// A piece of one tensor, at most kGradNormChunk values: the unit of LAMB's partial norms.
struct LambChunk {
  size_t begin, end, tensor;
};

}  // namespace

void Adam::lamb_update(const GroupRates& lr, uint32_t groups, ParameterSet* params) {
  float bias_correction1[kParameterGroupCount], bias_correction2[kParameterGroupCount];
  for (int g = 0; g < kParameterGroupCount; ++g) {
    const double t = double(group_steps_[size_t(g)]);
    bias_correction1[g] = float(1 - std::pow(options_.beta1, t));
    bias_correction2[g] = float(1 - std::pow(options_.beta2, t));
  }
  const float beta1 = float(options_.beta1), beta2 = float(options_.beta2);
  const float one_minus_beta1 = float(1 - options_.beta1);
  const float one_minus_beta2 = float(1 - options_.beta2);
  const float eps = float(options_.eps), weight_decay = float(options_.weight_decay);
  std::vector<LambChunk> chunks;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!(groups >> int(tensors_[t].group) & 1u)) continue;
    for (size_t b = tensors_[t].begin; b < tensors_[t].end; b += kGradNormChunk) {
      chunks.push_back({b, std::min(tensors_[t].end, b + kGradNormChunk), t});
    }
  }
  float* values = params->values().data();
  const float* grads = params->grads().data();
  float* m = exp_avg_.data();
  float* v = exp_avg_sq_.data();
  // The moments, and each chunk's sums of p^2 and u^2.
  std::vector<double> value_squares(chunks.size()), direction_squares(chunks.size());
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Span& tensor = tensors_[chunks[k].tensor];
    const int g = int(tensor.group);
    const float decay = tensor.decays ? weight_decay : 0.0f;
    double pp = 0, uu = 0;
    for (size_t i = chunks[k].begin; i < chunks[k].end; ++i) {
      m[i] = m[i] * beta1 + one_minus_beta1 * grads[i];
      v[i] = v[i] * beta2 + one_minus_beta2 * grads[i] * grads[i];
      const float u = lamb_direction(values[i], m[i], v[i], bias_correction1[g],
                                     bias_correction2[g], eps, decay);
      pp += double(values[i]) * double(values[i]);
      uu += double(u) * double(u);
    }
    value_squares[k] = pp;
    direction_squares[k] = uu;
  }
  // Each tensor's lr * trust ratio, its chunks' sums added in order.
  std::vector<double> value_norm(tensors_.size(), 0.0), direction_norm(tensors_.size(), 0.0);
  for (size_t k = 0; k < chunks.size(); ++k) {
    value_norm[chunks[k].tensor] += value_squares[k];
    direction_norm[chunks[k].tensor] += direction_squares[k];
  }
  std::vector<float> step(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const double p = std::sqrt(value_norm[t]), u = std::sqrt(direction_norm[t]);
    const double trust = p > 0 && u > 0 ? p / u : 1.0;
    step[t] = float(lr[size_t(tensors_[t].group)] * trust);
  }
  // The update, from the direction recomputed (the same bits: nothing it reads has changed).
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Span& tensor = tensors_[chunks[k].tensor];
    const int g = int(tensor.group);
    const float decay = tensor.decays ? weight_decay : 0.0f;
    const float rate = step[chunks[k].tensor];
    for (size_t i = chunks[k].begin; i < chunks[k].end; ++i) {
      const float u = lamb_direction(values[i], m[i], v[i], bias_correction1[g],
                                     bias_correction2[g], eps, decay);
      values[i] -= rate * u;
    }
  }
}

void Adam::restore(uint64_t steps, std::vector<float> exp_avg, std::vector<float> exp_avg_sq,
                   const std::array<uint64_t, kParameterGroupCount>& group_steps) {
  if (exp_avg.size() != exp_avg_.size() || exp_avg_sq.size() != exp_avg_sq_.size()) {
    throw InvalidArgument("Adam: restored moments have " + std::to_string(exp_avg.size()) +
                          " and " + std::to_string(exp_avg_sq.size()) + " values, the parameters " +
                          std::to_string(exp_avg_.size()));
  }
  for (uint64_t g : group_steps) {
    if (g > steps) {
      throw InvalidArgument("Adam: a group's update count (" + std::to_string(g) +
                            ") exceeds the updates taken (" + std::to_string(steps) + ")");
    }
  }
  steps_ = steps;
  group_steps_ = group_steps;
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
}

void Adam::restore(uint64_t steps, std::vector<float> exp_avg, std::vector<float> exp_avg_sq) {
  std::array<uint64_t, kParameterGroupCount> every;
  every.fill(steps);
  restore(steps, std::move(exp_avg), std::move(exp_avg_sq), every);
}

}  // namespace mvibr::nn
