// The job's backend, interval times, the load-balance verdict and the progress line (see
// monitor.h).
#include "mvibr/train/monitor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "mvibr/core/device.h"
#include "mvibr/dist/nccl_communicator.h"

namespace mvibr::train {

namespace {

// How often the line in place is redrawn at most: fast enough to look live, rare enough that
// a run of tiny steps spends no time on the terminal.
constexpr double kRedrawSeconds = 0.2;

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

JobBackend job_backend(const TrainConfig& config, const dist::Communicator& world,
                       const dist::Topology& topology) {
  JobBackend b;
  b.ranks = world.size();
  const bool on_device = runs_on_device(config);
  b.reduction = on_device ? "nccl" : b.ranks > 1 ? world.backend() : "none";
  b.device = on_device ? dist::select_device(topology) : -1;
  if (b.device >= 0) b.device_description = cuda_device_description(b.device);
  b.precision = config.precision;
  return b;
}

void IntervalTimes::add(const StepReport& r) {
  const auto named = r.phases.named();
  if (phases.empty()) {
    for (const auto& phase : named) phases.emplace_back(phase.first, 0.0);
  }
  for (size_t i = 0; i < named.size(); ++i) phases[i].second += named[i].second;
  ++steps;
  seconds += r.seconds;
  data_wait += r.data_wait;
  loss_allreduce += r.loss_allreduce;
  allreduce += r.allreduce;
  allreduce_exposed += r.allreduce_exposed;
  optimizer += r.optimizer;
}

double IntervalTimes::busy() const {
  return seconds - loss_allreduce - allreduce_exposed;
}

std::vector<std::pair<std::string, double>> IntervalTimes::timed_parts() const {
  std::vector<std::pair<std::string, double>> parts = {{"data_wait", data_wait}};
  parts.insert(parts.end(), phases.begin(), phases.end());
  parts.insert(parts.end(), {{"loss_allreduce", loss_allreduce},
                             {"allreduce_exposed", allreduce_exposed},
                             {"optimizer", optimizer}});
  return parts;
}

double IntervalTimes::allreduce_hidden_fraction() const {
  return allreduce > 0 ? 1.0 - std::min(1.0, allreduce_exposed / allreduce) : 0.0;
}

std::vector<std::pair<std::string, double>> IntervalTimes::busy_parts() const {
  std::vector<std::pair<std::string, double>> parts = {{"data_wait", data_wait}};
  double timed = data_wait + optimizer;
  for (const auto& phase : phases) {
    parts.push_back(phase);
    timed += phase.second;
  }
  parts.emplace_back("optimizer", optimizer);
  // Clamped: the parts' clocks are read at slightly different instants than the update's.
  parts.emplace_back("other", std::max(0.0, busy() - timed));
  return parts;
}

Imbalance busy_imbalance(const std::vector<double>& busy) {
  Imbalance result;
  if (busy.empty()) return result;
  const auto slowest = std::max_element(busy.begin(), busy.end());
  result.busy_max = *slowest;
  result.busy_min = *std::min_element(busy.begin(), busy.end());
  result.slow_rank = int(slowest - busy.begin());
  result.imbalance = result.busy_min > 0 ? result.busy_max / result.busy_min - 1.0 : 0.0;
  return result;
}

Imbalance assess_imbalance(const std::vector<std::vector<std::pair<std::string, double>>>& parts) {
  std::vector<double> busy;
  for (const auto& rank_parts : parts) {
    double sum = 0;
    for (const auto& part : rank_parts) sum += part.second;
    busy.push_back(sum);
  }
  Imbalance result = busy_imbalance(busy);
  if (parts.size() < 2) return result;

  const auto& slow = parts[size_t(result.slow_rank)];
  double largest_excess = -1;
  for (size_t k = 0; k < slow.size(); ++k) {
    double others = 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      if (int(r) != result.slow_rank) others += parts[r][k].second;
    }
    others /= double(parts.size() - 1);
    if (slow[k].second - others > largest_excess) {
      largest_excess = slow[k].second - others;
      result.slow_part = slow[k].first;
      result.slow_part_seconds = slow[k].second;
      result.others_part_seconds = others;
    }
  }
  return result;
}

std::string imbalance_warning(const Imbalance& m, double threshold, uint64_t first, uint64_t last) {
  if (!(m.imbalance > threshold) || m.busy_max - m.busy_min < kImbalanceFloorSeconds) return "";
  char line[400];
  std::snprintf(line, sizeof(line),
                "warning: load imbalance over steps %llu-%llu: rank %d is busy %.4f s per update, "
                "%.0f%% longer than the fastest rank (%.4f s); its slow phase is %s (%.4f s "
                "against %.4f s on the other ranks)\n",
                (unsigned long long)first, (unsigned long long)last, m.slow_rank, m.busy_max,
                100.0 * m.imbalance, m.busy_min, m.slow_part.c_str(), m.slow_part_seconds,
                m.others_part_seconds);
  return line;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof(text), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return text;
}

Progress::Progress(std::ostream& out, int columns, uint64_t first_step, uint64_t last_step,
                   double work_per_step, std::string work_unit, std::string quality)
    : out_(out),
      columns_(columns),
      first_step_(first_step),
      last_step_(last_step),
      work_per_step_(work_per_step),
      work_unit_(std::move(work_unit)),
      quality_(std::move(quality)),
      start_(std::chrono::steady_clock::now()),
      drawn_at_(start_) {}

Progress::~Progress() {
  if (drawn_) out_ << "\n" << std::flush;
}

double Progress::steps_per_second(uint64_t step) const {
  const double elapsed = seconds_between(start_, std::chrono::steady_clock::now());
  return elapsed > 0 ? double(step - first_step_) / elapsed : 0.0;
}

double Progress::eta_seconds(uint64_t step) const {
  const double rate = steps_per_second(step);
  return rate > 0 ? double(last_step_ - step) / rate : 0.0;
}

void Progress::update(uint64_t step, double loss, double quality) {
  if (!in_place()) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && step != last_step_ && seconds_between(drawn_at_, now) < kRedrawSeconds) return;
  const double rate = steps_per_second(step);
  char text[256];
  std::snprintf(text, sizeof(text),
                "step %llu/%llu  %.2f steps/s  %.0f %s/s  eta %s  loss %.5f  %s %.2f",
                (unsigned long long)step, (unsigned long long)last_step_, rate,
                rate * work_per_step_, work_unit_.c_str(),
                format_duration(eta_seconds(step)).c_str(), loss, quality_.c_str(), quality);
  // One column short of the width: a line that fills it would wrap on some terminals, and "\r"
  // would then redraw only its second row.
  line_ = std::string(text).substr(0, size_t(std::max(1, columns_ - 1)));
  out_ << "\r" << line_ << "\033[K" << std::flush;
  drawn_ = true;
  drawn_at_ = now;
}

void Progress::print(const std::string& text) {
  if (!drawn_) {
    out_ << text << std::flush;
    return;
  }
  // Over the line in place, then the line again below it: it stays the last line on screen.
  out_ << "\r\033[K" << text << line_ << "\033[K" << std::flush;
}

}  // namespace mvibr::train
