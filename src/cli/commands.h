// The subcommands of `mvibr`. Each takes the arguments after its name and returns the exit code.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/train/config.h"
#include "mvibr/train/evaluate.h"

namespace mvibr::cli {

int run_selfcheck(const std::vector<std::string>& args);
// `command_line` is the whole invocation, stored in the files prep writes.
int run_prep(const std::vector<std::string>& args, const std::string& command_line);
int run_inspect(const std::vector<std::string>& args);
int run_train(const std::vector<std::string>& args);
int run_render(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_stop(const std::vector<std::string>& args);

// What `mvibr render` and `mvibr eval` evaluate: a run's config (DIR/config.txt; train config
// keys on the command line override it), its newest checkpoint or --ckpt, a split, a count.
struct RunSelection {
  std::string run_dir, checkpoint;
  train::TrainConfig config;
  data::Split split = data::Split::kTest;
  int max_views = 0;  // 0: all
  // `mvibr render` only: a camera path instead of the split's views ("", spiral, orbit,
  // interpolate, fixed), its frame count (0: the path's default), the views an interpolated path
  // goes through or the fixed camera's view (default: the split's), and its time: none (as the
  // path makes it), or data::set_path_time's step (data::kSweepTime: sweep).
  std::string path;
  int frames = 0;
  std::vector<int> path_views;
  std::optional<int> time;
  // `mvibr render` of a pose run: only this instant of the split (evaluate_pose's order).
  std::optional<int> instant;
};
// Returns false after printing the help when --help is given; bad input is an InvalidArgument.
bool parse_run_selection(const std::vector<std::string>& args, const std::string& command,
                         RunSelection* selection);

// Runs `body`, this rank's part of `command` ("mvibr train"). With several ranks an error ends
// the whole job, naming the rank (exit 2 for bad input, else 1): the others may be waiting for
// this one in a collective. With one, it is rethrown for main to print.
void on_this_rank(const std::string& command, const dist::Topology& topology,
                  const std::function<void()>& body);
// Starts MPI (one process without a launcher is a job of one rank) and runs `body` with the world
// communicator through on_this_rank; returns its exit code.
int run_on_ranks(const std::string& command,
                 const std::function<int(dist::Communicator& world, const dist::Topology&)>& body);
// Chooses the rank's GPU (local rank % devices) when `config` runs on one.
void select_rank_device(const train::TrainConfig& config, const dist::Topology& topology);

// Rank 0's progress through its share of an eval or a render, on stderr (stdout carries the
// results): on a terminal one line redrawn in place at most 5 times a second, elsewhere (a log,
// a pipe) a line at every tenth of the work; "view 3 of 20: 40960 of 129600 rays; 12% done,
// eta 4m10s".
class RenderProgressLine {
 public:
  RenderProgressLine(std::string what, int rank, int ranks);
  ~RenderProgressLine();
  RenderProgressLine(const RenderProgressLine&) = delete;
  RenderProgressLine& operator=(const RenderProgressLine&) = delete;
  train::RenderProgress callback();

 private:
  void update(size_t done, size_t items, int rays_done, int rays);
  std::string what_;
  int rank_, ranks_;
  bool in_place_, drawn_ = false;
  int printed_tenth_ = -1;
  std::chrono::steady_clock::time_point start_, drawn_at_;
};

// One line per component: mvibr itself, the backends, and the libraries it was built with.
std::string version_report();

}  // namespace mvibr::cli
