// `mvibr stop --run DIR [--after_step N]`, or with `mvibr train`'s own options: asks a training run
// to stop at a step boundary by writing its stop request (train/run_directory.h). Works the same
// under mpirun, srun or no launcher, on any node that sees the run directory: no signal has to
// reach the ranks. The run checkpoints, removes the request and exits 75; run it again to go on.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "commands.h"
#include "mvibr/core/error.h"
#include "mvibr/train/config.h"
#include "mvibr/train/run_directory.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mvibr::cli {

int run_stop(const std::vector<std::string>& args) {
  std::string run_dir;
  long long after_step = -1;
  po::options_description options("mvibr stop options");
  options.add_options()("help,h", "print this help")("run", po::value(&run_dir),
                                                     "the run directory of the run to stop")(
      "after_step", po::value(&after_step),
      "stop after this step (default: after the step in progress; a run already past it stops "
      "after the step in progress)")("cancel", "withdraw the run's stop request instead");
  po::variables_map vm;
  const po::parsed_options parsed =
      po::command_line_parser(args).options(options).allow_unregistered().run();
  po::store(parsed, vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: mvibr stop --run DIR [--after_step N | --cancel]\n"
                 "       mvibr stop --config FILE [--<train key> VALUE ...] [--after_step N | "
                 "--cancel]\n\n"
              << options
              << "\nThe second form stops the run that `mvibr train` with the same options "
                 "trains\n(basedir/expname), whether or not it has started yet.\n";
    return 0;
  }
  if (vm.count("after_step") && vm.count("cancel")) {
    throw InvalidArgument("mvibr stop: --after_step and --cancel contradict each other");
  }
  if (vm.count("after_step") && after_step < 0) {
    throw InvalidArgument("--after_step must be >= 0, got " + std::to_string(after_step));
  }
  const std::vector<std::string> rest =
      po::collect_unrecognized(parsed.options, po::include_positional);
  const bool from_train_options = run_dir.empty();
  if (from_train_options) {
    if (rest.empty()) throw InvalidArgument("mvibr stop needs --run DIR or train's options");
    train::TrainConfig config;
    train::parse_train_config(rest, &config);
    run_dir = config.basedir + "/" + config.expname;
  } else if (!rest.empty()) {
    throw InvalidArgument("mvibr stop: unexpected '" + rest.front() + "' after --run");
  }
  if (vm.count("cancel")) {
    const bool had = fs::exists(train::stop_request_path(run_dir));
    train::clear_stop_request(run_dir);
    std::cout << (had ? "withdrew the stop request of " : "no stop request to withdraw in ")
              << run_dir << "\n";
    return 0;
  }
  const std::optional<uint64_t> step =
      vm.count("after_step") ? std::optional<uint64_t>(uint64_t(after_step)) : std::nullopt;
  train::write_stop_request(run_dir, step, from_train_options);
  std::cout << "asked " << run_dir << " to stop after "
            << (step ? "step " + std::to_string(*step) : std::string("the step in progress"))
            << " (" << train::stop_request_path(run_dir) << "): rank 0 checkpoints and the job "
            << "exits 75\n";
  return 0;
}

}  // namespace mvibr::cli
