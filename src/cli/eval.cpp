// `mvibr eval --run DIR`: PSNR and SSIM of a trained run on its held-out views, as JSON on
// stdout and in DIR/eval-<step>.json, so that runs can be compared by a script. Also the option
// parsing `mvibr render` shares (see train/evaluate.h for what is computed).
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "commands.h"
#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/pose_evaluate.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mvibr::cli {

namespace {

data::Split parse_split(const std::string& name) {
  for (data::Split s : {data::Split::kTest, data::Split::kValidation, data::Split::kTrain}) {
    if (name == data::split_name(s)) return s;
  }
  throw InvalidArgument("--split must be test, val or train, got '" + name + "'");
}

// A whole number (0, 1, ...) written alone, or none.
std::optional<int> whole_number(const std::string& text) {
  size_t used = 0;
  int value = -1;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || value < 0) return std::nullopt;
  return value;
}

// JSON has no infinity (identical images); null says "no finite value".
nlohmann::json number(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

bool parse_run_selection(const std::vector<std::string>& args, const std::string& command,
                         RunSelection* selection) {
  std::string split = "test";
  po::options_description options("mvibr " + command + " options");
  options.add_options()("help,h", "print this help")(
      "run", po::value(&selection->run_dir), "the run directory `mvibr train` wrote (required)")(
      "split", po::value(&split)->default_value(split), "test | val | train")(
      "max_views", po::value(&selection->max_views)->default_value(0),
      "the first N views of the split (pose runs: instants; 0: all)")(
      "ckpt", po::value(&selection->checkpoint), "this checkpoint instead of the run's newest");
  std::string path_views, time, instant;
  if (command == "render") {
    options.add_options()("instant", po::value(&instant),
                          "pose runs: only this instant of the split (0, 1, ...; in the order "
                          "of mvibr eval)")(
        "path", po::value(&selection->path),
        "render a camera path instead: spiral (LLFF's, around the average "
        "camera; forward-facing scenes), orbit (NeRF's, around what the "
        "views look at; 360-degree scenes), interpolate (through "
        "--path_views) or fixed (one view's camera, over time)")(
        "frames", po::value(&selection->frames),
        "frames of the path (default: 120; fixed: one per time step)")(
        "path_views", po::value(&path_views),
        "the views an interpolated path goes through, in order, e.g. 0,8,16, or the fixed "
        "camera's view (default: the first --max_views of --split)")(
        "time", po::value(&time),
        "dynamic scenes: the time step every frame shows (bullet time; a fixed camera: one view "
        "at that time), or sweep: time runs over the video from the first frame to the last "
        "(default: sweep for fixed; the key views' steps for interpolate; 0 for spiral, orbit)");
  }
  po::variables_map vm;
  po::parsed_options parsed =
      po::command_line_parser(args).options(options).allow_unregistered().run();
  po::store(parsed, vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: mvibr " << command
              << " --run DIR [--split test|val|train] [--max_views N] [--ckpt PATH] "
                 "[--<train key> VALUE ...]\n"
              << (command == "render" ? "       mvibr render --run DIR --path "
                                        "spiral|orbit|interpolate|fixed [--frames N] "
                                        "[--path_views I,J,...] [--time T|sweep] [...]\n"
                                        "       mvibr render --run POSE_RUN [--instant I | "
                                        "--max_views N] [...]\n"
                                      : "")
              << "\n"
              << options
              << "\nThe run's config.txt gives the model and the data; train config keys given "
                 "here override it\n(e.g. --datadir, --chunk_size; see mvibr train --help).\n";
    if (command == "render") {
      std::cout << "\nA pose run (model = pose) draws every camera of each instant with the true "
                   "skeleton (green;\nhidden joints hollow) and the predicted one (red, its 3D "
                   "joints projected), upscaled\nto at least 384 pixels (at most 4x), into "
                   "DIR/renders/<step>/<view>.png, and lists each\ninstant's MPJPE (mm) and "
                   "files in DIR/renders/<step>/pose_<split>.json.\n";
    }
    return false;
  }
  if (selection->run_dir.empty()) throw InvalidArgument("mvibr " + command + " needs --run DIR");
  selection->split = parse_split(split);
  if (!selection->path.empty() && selection->path != "spiral" && selection->path != "orbit" &&
      selection->path != "interpolate" && selection->path != "fixed") {
    throw InvalidArgument("--path must be spiral, orbit, interpolate or fixed, got '" +
                          selection->path + "'");
  }
  if (vm.count("frames") && selection->path.empty()) {
    throw InvalidArgument("--frames is for a camera path (--path)");
  }
  if (vm.count("frames") && selection->frames < 1) {
    throw InvalidArgument("--frames must be at least 1");
  }
  if (vm.count("time")) {
    if (selection->path.empty()) throw InvalidArgument("--time is for a camera path (--path)");
    selection->time = time == "sweep" ? std::optional<int>(data::kSweepTime) : whole_number(time);
    if (!selection->time) {
      throw InvalidArgument("--time must be a time step (0, 1, ...) or sweep, got '" + time + "'");
    }
  }
  if (vm.count("instant")) {
    selection->instant = whole_number(instant);
    if (!selection->instant) {
      throw InvalidArgument("--instant must be an instant index (0, 1, ...), got '" + instant +
                            "'");
    }
    if (selection->max_views > 0) throw InvalidArgument("--instant and --max_views contradict");
  }
  if (!path_views.empty()) {
    if (selection->path != "interpolate" && selection->path != "fixed") {
      throw InvalidArgument("--path_views is for --path interpolate or fixed");
    }
    std::stringstream list(path_views);
    for (std::string item; std::getline(list, item, ',');) {
      const std::optional<int> view = whole_number(item);
      if (!view) throw InvalidArgument("--path_views: '" + item + "' is not a view index");
      selection->path_views.push_back(*view);
    }
    if (selection->path == "fixed" && selection->path_views.size() != 1) {
      throw InvalidArgument("--path fixed takes one view in --path_views");
    }
  }
  if (selection->max_views < 0) throw InvalidArgument("--max_views must be >= 0");
  const fs::path run(selection->run_dir);
  if (!fs::is_directory(run)) throw InvalidArgument(selection->run_dir + ": no such run directory");
  const fs::path config = run / "config.txt";
  if (!fs::exists(config)) {
    throw InvalidArgument(selection->run_dir + ": no config.txt (not a run of mvibr train)");
  }
  std::vector<std::string> train_args = {"--config", config.string()};
  const std::vector<std::string> rest =
      po::collect_unrecognized(parsed.options, po::include_positional);
  train_args.insert(train_args.end(), rest.begin(), rest.end());
  train::parse_train_config(train_args, &selection->config);
  if (!selection->checkpoint.empty()) {
    if (!fs::exists(selection->checkpoint)) {
      throw InvalidArgument(selection->checkpoint + ": no such checkpoint");
    }
  } else {
    selection->checkpoint = train::latest_checkpoint(selection->run_dir);
    if (selection->checkpoint.empty()) {
      throw InvalidArgument(selection->run_dir + ": no checkpoint in " +
                            (run / "checkpoints").string() + " (train first, or pass --ckpt)");
    }
  }
  return true;
}

namespace {

// The scores as JSON on standard output and in DIR/eval-<step>[-<split>].json.
void write_eval_report(const RunSelection& s, const train::EvalReport& report) {
  nlohmann::json views = nlohmann::json::array();
  for (const train::ViewMetrics& m : report.views) {
    nlohmann::json view = {
        {"view", m.view}, {"name", m.name}, {"psnr", number(m.psnr)}, {"ssim", number(m.ssim)}};
    if (!std::isnan(m.psnr_dynamic) || !std::isnan(m.psnr_static)) {
      view.update({{"psnr_dynamic", number(m.psnr_dynamic)},
                   {"ssim_dynamic", number(m.ssim_dynamic)},
                   {"psnr_static", number(m.psnr_static)},
                   {"ssim_static", number(m.ssim_static)}});
    }
    views.push_back(view);
  }
  nlohmann::json out = {{"step", report.step},
                        {"split", data::split_name(s.split)},
                        {"checkpoint", s.checkpoint},
                        {"views", views},
                        {"mean_psnr", number(report.mean_psnr)},
                        {"mean_ssim", number(report.mean_ssim)}};
  // The dynamic and static regions' scores, where the data has motion masks.
  if (!std::isnan(report.mean_psnr_dynamic) || !std::isnan(report.mean_psnr_static)) {
    out.update({{"mean_psnr_dynamic", number(report.mean_psnr_dynamic)},
                {"mean_ssim_dynamic", number(report.mean_ssim_dynamic)},
                {"mean_psnr_static", number(report.mean_psnr_static)},
                {"mean_ssim_static", number(report.mean_ssim_static)}});
  }
  // The test split, the one papers report, keeps the plain name; others are marked.
  std::string file = "eval-" + std::to_string(report.step);
  if (s.split != data::Split::kTest) file += std::string("-") + data::split_name(s.split);
  const fs::path path = fs::path(s.run_dir) / (file + ".json");
  write_file_atomically(path.string(), out.dump(2) + "\n");
  std::cout << out.dump(2) << "\n";
}

// The pose model's scores as JSON on standard output and in DIR/eval-<step>[-<split>].json; with
// cross-view fusion, the same scores of the raw heatmaps in "without_fusion".
void write_pose_report(const RunSelection& s, const train::PoseEvalReport& r) {
  const auto numbers = [](const std::vector<double>& values) {
    nlohmann::json list = nlohmann::json::array();
    for (double v : values) list.push_back(number(v));
    return list;
  };
  nlohmann::json out = {
      {"step", r.step},
      {"split", data::split_name(s.split)},
      {"checkpoint", s.checkpoint},
      {"instants", r.instants},
      {"joints", r.joints},
      {"mpjpe_mm", number(r.mpjpe_mm)},
      {"mpjpe_relative_mm", number(r.mpjpe_relative_mm)},
      {"mpjpe_equal_weights_mm", number(r.mpjpe_equal_weights_mm)},
      {"mpjpe_relative_equal_weights_mm", number(r.mpjpe_relative_equal_weights_mm)},
      {"baseline_mpjpe_mm", number(r.baseline_mpjpe_mm)},
      {"baseline_mpjpe_relative_mm", number(r.baseline_mpjpe_relative_mm)},
      {"pck_threshold_px", r.pck_threshold_px},
      {"pck", number(r.pck)},
      {"pck_per_camera", numbers(r.pck_per_camera)},
      {"cross_view_fusion", r.cross_view_fusion}};
  if (r.cross_view_fusion) {
    out["without_fusion"] = {{"mpjpe_mm", number(r.mpjpe_without_fusion_mm)},
                             {"mpjpe_relative_mm", number(r.mpjpe_relative_without_fusion_mm)},
                             {"pck", number(r.pck_without_fusion)},
                             {"pck_per_camera", numbers(r.pck_per_camera_without_fusion)}};
  }
  std::string file = "eval-" + std::to_string(r.step);
  if (s.split != data::Split::kTest) file += std::string("-") + data::split_name(s.split);
  write_file_atomically((fs::path(s.run_dir) / (file + ".json")).string(), out.dump(2) + "\n");
  std::cout << out.dump(2) << "\n";
}

}  // namespace

int run_eval(const std::vector<std::string>& args) {
  return run_on_ranks("mvibr eval", [&](dist::Communicator& world, const dist::Topology& topology) {
    RunSelection s;
    if (!parse_run_selection(args, "eval", &s)) return 0;
    if (s.config.model == train::ModelKind::kPose) {
      const train::PoseEvalReport report =
          train::evaluate_pose_run(s.config, s.checkpoint, s.split, s.max_views, &world);
      if (topology.rank == 0) write_pose_report(s, report);
      return 0;
    }
    select_rank_device(s.config, topology);
    RenderProgressLine progress("view", world.rank(), world.size());
    const train::EvalReport report = train::evaluate_run(
        s.config, s.checkpoint, s.split, s.max_views, "", {}, &world, progress.callback());
    if (topology.rank == 0) write_eval_report(s, report);
    return 0;
  });
}

}  // namespace mvibr::cli
