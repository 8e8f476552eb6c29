// `mvibr train`: the loop that draws a sample from the prefetching reader, trains the model on
// its target's rays, steps Adam, logs and checkpoints; data-parallel over the ranks of a job.
//
// Each rank reads its own shards and takes its own target view per step; its rays are the
// global rays [(rank x accumulation_steps + m) x N_rand, + N_rand) of micro-step m, drawn and
// sampled from Philox keyed by (seed, step, global ray). The loss is the masked MSE of the whole
// global batch: squared errors and valid-ray counts are summed over ranks and micro-steps before
// the division, so 2 ranks of N_rand = B train exactly as 1 rank of 2B on the same samples (up
// to float rounding), and k micro-steps of B as one step of kB. Gradients are summed by bucketed
// all-reduce overlapped with the feature network's backward; every rank then takes the same
// Adam step. Rank 0 logs, validates (all ranks render a share of the held-out view) and writes
// checkpoints with every rank's data cursor.
//
// Rank 0 monitors the job every i_print steps: the scalars of the interval (losses, PSNR, learning
// rates, rays/s, data wait, every rank's busy time and the imbalance between them, all-reduce)
// go to metrics.jsonl and to TensorBoard event files in tb/ (with the held-out PSNR, SSIM and
// rendered image at every validation), and a warning names the slow rank and its slow phase when
// ranks' busy times differ by more than 20% (monitor.h).
//
// A run lives in basedir/expname (config.txt, metrics.jsonl, tb/, checkpoints/), which rank 0
// holds locked while it trains (run_directory.h); it resumes from
// its newest checkpoint unless no_reload, or from ckpt_path (a run without one starts from
// init_ckpt's weights when given, else from the seed): rank 0 reads it and broadcasts it, so
// only rank 0 needs the run directory. With the rank count of the checkpoint, resuming is exact
// (bit-identical on the CPU); with another, each rank starts its new shards at the checkpoint's
// epoch, with a warning.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <string>

#include "mvibr/data/prefetch_reader.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/dist/watchdog.h"
#include "mvibr/nn/optimizer.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

struct TrainSummary {
  std::string run_dir;
  uint64_t first_step = 0, last_step = 0;  // steps taken by this call: (first_step, last_step]
  double last_loss = 0, last_psnr = 0;
  Scalar last_quality = {"train/psnr", "psnr", 0};  // the model's figure (psnr, mpjpe_mm)
  // Of the last held-out validation (every i_img steps); NaN when none ran.
  double heldout_psnr = std::numeric_limits<double>::quiet_NaN();
  double heldout_ssim = std::numeric_limits<double>::quiet_NaN();
  // The pose model's: root-relative and absolute MPJPE (mm) over its held-out instants.
  double heldout_mpjpe_mm = std::numeric_limits<double>::quiet_NaN();
  double heldout_mpjpe_relative_mm = std::numeric_limits<double>::quiet_NaN();
  std::string last_checkpoint;
  uint64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  // Why the run stopped before n_iters ("signal 10 (SIGUSR1)", "the stop request <run>/STOP");
  // empty when it did not. Its state is in last_checkpoint; the same command continues it.
  std::string stopped_by;
};

// What one update took on this rank, in seconds: for benchmarks and monitoring.
struct StepReport {
  uint64_t step = 0;             // updates done, this one included
  double seconds = 0;            // the whole update, from taking the sample to Adam's step
  double data_wait = 0;          // waiting for the prefetching reader
  PhaseTimes phases;             // the model's forward and backward, by phase
  double loss_allreduce = 0;     // the loss all-reduce, including waiting for slower ranks
  double allreduce = 0;          // gradient buckets in all-reduce (hidden or not)
  double allreduce_exposed = 0;  // the part of it the backward pass did not hide
  double optimizer = 0;          // gradient norm check and Adam
  double loss = 0, psnr = 0;
  StepWork work{"rays", 0};  // what this rank's update worked through
};

// This process's place in the job.
struct RankContext {
  dist::Communicator* comm = nullptr;  // null: a job of one process
  dist::Topology topology;
  // Called (from the watchdog's thread) when a wait for the other ranks outlasts watchdog_s; a
  // real run ends the job there (MpiSession::abort_job). Null: no watchdog.
  dist::Watchdog::StallHandler on_stall;
  // Set (to the signal's number) by a signal handler when the job should stop early, e.g. Slurm's
  // warning before a time limit. Checked at every step, with rank 0's check of the run's stop
  // request (run_directory.h): when any rank is asked, all ranks stop after that step and rank 0
  // writes a checkpoint. Null: no signals (the stop request still counts).
  const std::atomic<int>* stop_signal = nullptr;
  // Called on every rank after each update.
  std::function<void(const StepReport&)> on_step;
  // A benchmark: no validation, no checkpoints, no metrics or event files, and never a resume.
  bool measure_only = false;
  // The width of the terminal rank 0's log goes to, or 0 when it is not a terminal: on a terminal
  // the progress line is redrawn in place, elsewhere (a Slurm log, a pipe) plain lines are
  // printed every i_print steps.
  int progress_columns = 0;
};

// The optimiser and the data stream of rank `rank` of `ranks` as `mvibr train` sets them up
// (learning rates scaled by lr_scaling), for tools that run its step outside the loop.
nn::AdamOptions adam_options(const TrainConfig& config, int ranks);
data::ReaderOptions reader_options(const TrainConfig& config, int rank, int ranks);

// Trains until config.n_iters steps; rank 0's progress lines go to `log`. Every collective is
// called on every rank, so an error on one rank must end the job (the CLI aborts it).
TrainSummary train(const TrainConfig& config, std::ostream& log, const RankContext& context = {});

}  // namespace mvibr::train
