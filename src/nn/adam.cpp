// Adam, IBRNet's learning-rate decay and gradient clipping (see optimizer.h). The update follows
// torch.optim.Adam's single-tensor path operation by operation, in float, with the scalars
// (bias corrections, step size) computed in double as Python computes them.
#include "mvibr/nn/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "mvibr/core/error.h"

namespace mvibr::nn {

double step_decay_learning_rate(double initial, double factor, uint64_t decay_steps,
                                uint64_t completed) {
  return initial * std::pow(factor, double(completed / decay_steps));
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

namespace {

void check_option(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("Adam: " + what);
}

}  // namespace

Adam::Adam(const ParameterSet& params, const AdamOptions& options)
    : options_(options), exp_avg_(params.size(), 0.0f), exp_avg_sq_(params.size(), 0.0f) {
  const AdamOptions& o = options_;
  check_option(std::isfinite(o.lrate_feature) && o.lrate_feature >= 0,
               "lrate_feature must be a finite number >= 0");
  check_option(std::isfinite(o.lrate_mlp) && o.lrate_mlp >= 0,
               "lrate_mlp must be a finite number >= 0");
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
  for (const ParameterInfo& info : params.infos()) {
    if (!spans_.empty() && spans_.back().group == info.group && spans_.back().end == info.offset) {
      spans_.back().end = info.offset + info.size;
    } else {
      spans_.push_back({info.offset, info.offset + info.size, info.group});
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
  }
  throw InvalidArgument("Adam: unknown parameter group " + std::to_string(int(group)));
}

double Adam::learning_rate(ParameterGroup group) const {
  const double initial = initial_learning_rate(group);
  if (options_.schedule) return options_.schedule(initial, steps_);
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

  const AdamCoefficients c = begin_update(groups);
  float* values = params->values().data();
  float* m = exp_avg_.data();
  float* v = exp_avg_sq_.data();
#pragma omp parallel
  for (const Span& span : spans_) {
    const int group = int(span.group);
    if (!(groups >> group & 1u)) continue;
#pragma omp for schedule(static)
    for (size_t i = span.begin; i < span.end; ++i) {
      adam_update_value(c, group, grads[i], &values[i], &m[i], &v[i]);
    }
  }
  return grad_norm;
}

AdamCoefficients Adam::begin_update(uint32_t groups) {
  static_assert(sizeof(AdamCoefficients::step_size) / sizeof(float) == kParameterGroupCount,
                "a step size for every parameter group");
  double lr[kParameterGroupCount];
  for (int g = 0; g < kParameterGroupCount; ++g) lr[g] = learning_rate(ParameterGroup(g));
  ++steps_;
  AdamCoefficients c;
  for (int g = 0; g < kParameterGroupCount; ++g) {
    if (!(groups >> g & 1u)) continue;
    const double t = double(++group_steps_[size_t(g)]);
    const double bias_correction1 = 1 - std::pow(options_.beta1, t);
    const double bias_correction2 = 1 - std::pow(options_.beta2, t);
    c.step_size[g] = float(lr[g] / bias_correction1);
    c.bias_correction2_sqrt[g] = float(std::sqrt(bias_correction2));
  }
  c.beta1 = float(options_.beta1);
  c.beta2 = float(options_.beta2);
  c.one_minus_beta1 = float(1 - options_.beta1);
  c.one_minus_beta2 = float(1 - options_.beta2);
  c.eps = float(options_.eps);
  return c;
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
