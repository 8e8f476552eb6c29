// `mvibr`: one program, subcommands in the style of git. Top-level options are parsed here;
// each subcommand parses its own. Every error ends as one line on stderr and a non-zero exit.
#include <boost/program_options.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "mvibr/core/error.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "usage: mvibr [--help] [--version] <command> [<options>]\n"
    "\n"
    "Trains neural image-based rendering models (IBRNet) data-parallel over MPI ranks.\n"
    "\n"
    "commands:\n"
    "  prep        turn a scene (built-in synthetic, NeRF-synthetic/instant-ngp, LLFF,\n"
    "              COLMAP, D-NeRF) into scene.h5 and self-contained HDF5 shards\n"
    "  inspect     print what a prepared scene or shard holds, and check every frame\n"
    "  train       train IBRNet on a prepared scene (IBRNet's config keys)\n"
    "  stop        ask a training run to checkpoint and stop at a step boundary (any\n"
    "              launcher; exit 75, run it again to continue)\n"
    "  render      render a trained run's held-out views to PNG (colour and depth)\n"
    "  eval        PSNR and SSIM of a trained run on its held-out views, as JSON\n"
    "  bench       measurements under the job's launcher: allreduce, train, io,\n"
    "              kernels, as tables or JSON\n"
    "  selfcheck   run the rendering core on random data: forward, backward and\n"
    "              finite-difference gradient checks, on every backend built\n"
    "\n"
    "Run `mvibr <command> --help` for the options of a command.\n";

int dispatch(const std::vector<std::string>& argv) {
  po::options_description top("options");
  top.add_options()("help,h", "print this help")("version", "print versions and exit");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("args",
                                                            po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(top).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("args", -1);

  po::variables_map vm;
  po::parsed_options parsed =
      po::command_line_parser(argv).options(all).positional(positional).allow_unregistered().run();
  po::store(parsed, vm);
  if (!vm.count("command")) {
    if (vm.count("version")) {
      std::cout << mvibr::cli::version_report();
      return 0;
    }
    std::cout << kUsage << "\n" << top;
    return vm.count("help") ? 0 : 2;
  }
  const std::string command = vm["command"].as<std::string>();
  // Everything after the command name belongs to the command, including its --help.
  std::vector<std::string> rest = po::collect_unrecognized(parsed.options, po::include_positional);
  rest.erase(rest.begin());
  // The top-level parser recognises --help wherever it stands; after a command it is the
  // command's.
  if (vm.count("help")) rest.push_back("--help");
  if (command == "selfcheck") return mvibr::cli::run_selfcheck(rest);
  if (command == "prep") {
    std::string command_line = "mvibr";
    for (const std::string& a : argv) command_line += " " + a;
    return mvibr::cli::run_prep(rest, command_line);
  }
  if (command == "inspect") return mvibr::cli::run_inspect(rest);
  if (command == "train") return mvibr::cli::run_train(rest);
  if (command == "render") return mvibr::cli::run_render(rest);
  if (command == "eval") return mvibr::cli::run_eval(rest);
  if (command == "bench") return mvibr::cli::run_bench(rest);
  if (command == "stop") return mvibr::cli::run_stop(rest);
  std::cerr << "mvibr: unknown command '" << command << "' (see mvibr --help)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const po::error& e) {
    std::cerr << "mvibr: " << e.what() << " (see mvibr --help)\n";
    return 2;
  } catch (const mvibr::InvalidArgument& e) {
    std::cerr << "mvibr: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mvibr: error: " << e.what() << "\n";
    return 1;
  }
}
