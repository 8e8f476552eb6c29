// Rank 0's view of a running job, which `mvibr train` and `mvibr bench train` both report from.
// - What the job runs on: ranks, gradient reduction, device, precision.
// - The time every rank spent over a logging interval (all-gathered every i_print steps) and the
//   load-balance verdict drawn from it.
// - The progress line.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/train/trainer.h"

namespace mvibr::train {

// Where a job trains and how its ranks reduce gradients.
struct JobBackend {
  int ranks = 1;
  // "nccl" on GPU ranks (one too: its reduction is a copy), else the job's communicator's
  // backend, or "none" for one CPU rank.
  std::string reduction;
  int device = -1;                         // this rank's GPU (local rank % devices), -1 on the CPU
  std::string device_description;          // cuda_device_description(device); "" on the CPU
  Precision precision = Precision::kFp32;  // of the GEMMs
};

// `world`: the job's communicator. Chooses this rank's GPU as the trainer does.
JobBackend job_backend(const TrainConfig& config, const dist::Communicator& world,
                       const dist::Topology& topology);

// One rank's steps since the last log, summed.
struct IntervalTimes {
  uint64_t steps = 0;
  double seconds = 0;  // the updates, from taking the sample to Adam's step
  double data_wait = 0;
  std::vector<std::pair<std::string, double>> phases;  // PhaseTimes::named(), summed
  double loss_allreduce = 0, allreduce = 0, allreduce_exposed = 0, optimizer = 0;

  void add(const StepReport& report);
  // Every timed part in the step's order: data_wait, the model's phases, loss_allreduce,
  // allreduce_exposed, optimizer.
  std::vector<std::pair<std::string, double>> timed_parts() const;
  // The share of the gradient all-reduce the backward pass hid (0 without one).
  double allreduce_hidden_fraction() const;
  // Ranks wait for each other in the all-reduces, so every rank's update takes as long as the
  // slowest one's; what tells the slow rank is the time it was busy outside those waits: the
  // update less the loss all-reduce and the gradient all-reduce the backward pass did not hide
  // (as `mvibr bench train` defines it).
  double busy() const;
  // The busy time by part, in the step's order: data_wait, the model's phases, optimizer, and
  // `other` (what no part times: drawing rays, zeroing gradients). They sum to busy().
  std::vector<std::pair<std::string, double>> busy_parts() const;
};

struct Imbalance {
  double busy_min = 0, busy_max = 0;  // per update, over ranks
  double imbalance = 0;               // busy_max / busy_min - 1 (0 when busy_min is 0)
  int slow_rank = 0;                  // the rank of busy_max
  // The part in which the slow rank spent the most time beyond the other ranks' mean, and both
  // times (per update).
  std::string slow_part;
  double slow_part_seconds = 0, others_part_seconds = 0;
};

// busy[r]: rank r's busy time per update; no slow part.
Imbalance busy_imbalance(const std::vector<double>& busy);

// parts[r]: rank r's busy_parts() divided by its steps (the same names in the same order on every
// rank). With one rank there is nothing to compare: imbalance 0 and no slow part.
Imbalance assess_imbalance(const std::vector<std::vector<std::pair<std::string, double>>>& parts);

// Differences below this (per update) are the scheduler's noise, not a slow rank: tiny models'
// 10 ms steps would warn at every interval.
inline constexpr double kImbalanceFloorSeconds = 0.01;

// The warning for steps (first, last] when the imbalance exceeds `threshold` (0.2: the slow rank
// is busy more than 20% longer than the fastest) and the difference is at least
// kImbalanceFloorSeconds, naming the slow rank and its slow part; empty otherwise.
std::string imbalance_warning(const Imbalance& imbalance, double threshold, uint64_t first,
                              uint64_t last);

// "42s", "3m05s", "2h07m": an ETA to read at a glance.
std::string format_duration(double seconds);

// Rank 0's progress line: step, steps/s and work/s (rays, instants) since this call began, ETA,
// loss and the model's quality figure (PSNR, MPJPE).
// On a terminal (columns > 0, its width) it is one line redrawn in place ("\r", the text, clear
// to the end of the line) after every update, at most 5 times a second; lines that must stay
// (validation, warnings) go through print(), which writes them over it and redraws it below. Off a
// terminal (columns 0: a Slurm log, a pipe) it draws nothing: the trainer prints its plain line
// every i_print steps.
class Progress {
 public:
  Progress(std::ostream& out, int columns, uint64_t first_step, uint64_t last_step,
           double work_per_step, std::string work_unit = "rays", std::string quality = "psnr");
  ~Progress();  // ends the line in place, so what follows starts on a line of its own
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool in_place() const { return columns_ > 0; }
  void update(uint64_t step, double loss, double quality);
  // `text`: whole lines, each ending in '\n'.
  void print(const std::string& text);
  // Steps per second since this call began, and the seconds the remaining steps will take at it.
  double steps_per_second(uint64_t step) const;
  double eta_seconds(uint64_t step) const;

 private:
  std::ostream& out_;
  const int columns_;
  const uint64_t first_step_, last_step_;
  const double work_per_step_;
  const std::string work_unit_, quality_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point drawn_at_;
  std::string line_;  // the text in place
  bool drawn_ = false;
};

}  // namespace mvibr::train
