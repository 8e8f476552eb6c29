// What rank 0 records of a run (metrics.jsonl and TensorBoard events, the same values in both)
// and the ranks' busy times it is computed from; for the training loop (trainer.cpp).
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/dist/communicator.h"
#include "mvibr/train/model.h"
#include "mvibr/train/monitor.h"
#include "mvibr/train/tensorboard.h"

namespace mvibr::train {

// Busy times of ranks differing by more than this fraction of the fastest one's get a warning.
constexpr double kImbalanceWarning = 0.2;

// Rank 0's record of the run: metrics.jsonl (one JSON object per line) and the event files, both
// written with every value, so scripts and TensorBoard see the same numbers.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& run_dir)
      : jsonl_(std::filesystem::path(run_dir) / "metrics.jsonl", std::ios::app),
        events_((std::filesystem::path(run_dir) / "tb").string()) {
    // Every digit of a double, so a script reads back the value that was logged.
    jsonl_.precision(17);
  }

  // `extra`: values for the JSON line alone (counts, not curves).
  void write(uint64_t step, const std::vector<Scalar>& scalars,
             const std::vector<std::pair<std::string, double>>& extra = {}) {
    std::vector<std::pair<std::string, double>> tagged;
    jsonl_ << "{\"step\": " << step;
    for (const Scalar& s : scalars) {
      jsonl_ << ", \"" << s.key << "\": " << s.value;
      tagged.emplace_back(s.tag, s.value);
    }
    for (const auto& [key, value] : extra) jsonl_ << ", \"" << key << "\": " << value;
    jsonl_ << "}\n" << std::flush;
    events_.scalars(step, tagged);
  }

  void image(const std::string& tag, uint64_t step, const RgbImage& image) {
    events_.image(tag, step, image);
  }

 private:
  std::ofstream jsonl_;
  EventWriter events_;
};

// The ranks' busy parts of an interval (every rank calls it), per update, on every rank.
inline std::vector<std::vector<std::pair<std::string, double>>> gather_busy_parts(
    dist::Communicator& comm, const IntervalTimes& interval) {
  std::vector<std::pair<std::string, double>> mine = interval.busy_parts();
  for (auto& part : mine) part.second /= double(std::max<uint64_t>(1, interval.steps));
  std::vector<double> values;
  for (const auto& part : mine) values.push_back(part.second);
  std::vector<double> all(values.size() * size_t(comm.size()));
  comm.all_gather(values.data(), values.size() * sizeof(double), all.data());
  std::vector<std::vector<std::pair<std::string, double>>> parts(size_t(comm.size()), mine);
  for (size_t r = 0; r < parts.size(); ++r) {
    for (size_t k = 0; k < mine.size(); ++k) parts[r][k].second = all[r * mine.size() + k];
  }
  return parts;
}

}  // namespace mvibr::train
