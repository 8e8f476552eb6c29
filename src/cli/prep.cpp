// `mvibr prep`: a scene (the built-in synthetic one, or what users have on disk) to scene.h5
// and self-contained shards, with neighbour lists computed once. Options come from the command
// line or a `key = value` file; the full command line is stored in every output file.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "commands.h"
#include "mvibr/core/config_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/dynibar_folder.h"
#include "mvibr/data/human36m.h"
#include "mvibr/data/importers.h"
#include "mvibr/data/neighbours.h"
#include "mvibr/data/panoptic.h"
#include "mvibr/data/pose_scene.h"
#include "mvibr/data/shards.h"
#include "mvibr/data/synthetic_scene.h"

namespace po = boost::program_options;

namespace mvibr::cli {
namespace {

// --cameras of synthetic_pose: a number.
int camera_count(const std::string& text) {
  if (text.empty() || text.size() > 4 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    throw InvalidArgument("--cameras: synthetic_pose takes a number of cameras, got '" + text +
                          "'");
  }
  return std::stoi(text);
}

// --cameras of panoptic and human36m, --test_subjects: comma-separated names (empty: none).
std::vector<std::string> split_names(const std::string& option, const std::string& text) {
  std::vector<std::string> names;
  if (text.empty()) return names;
  size_t start = 0;
  for (size_t comma = text.find(',');; comma = text.find(',', start)) {
    names.push_back(text.substr(start, comma - start));
    if (names.back().empty()) {
      throw InvalidArgument("--" + option + ": an empty name in '" + text + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

}  // namespace

int run_prep(const std::vector<std::string>& args, const std::string& command_line) {
  std::string input = "synthetic", out, format = "auto", background = "white", config, test_ids,
              dynibar_folder;
  data::PrepOptions prep;
  data::NeighbourOptions neighbours;
  data::SyntheticSceneOptions synthetic;
  data::ImportOptions import_options;
  double near_depth = 0, far_depth = 0;
  po::options_description general("mvibr prep options");
  general.add_options()("help,h", "print this help")(
      "config", po::value(&config), "read `key = value` lines from this file (command line wins)")(
      "input", po::value(&input)->default_value(input),
      "'synthetic', 'synthetic_pose' (built in), 'panoptic' or 'human36m' (with --source), a "
      "folder or a file")("out", po::value(&out), "output folder (required)")(
      "shards", po::value(&prep.n_shards)->default_value(1), "number of shards")(
      "format", po::value(&format)->default_value(format),
      "auto | synthetic | synthetic_pose | blender | llff | colmap | dnerf | dynibar")(
      "compress", po::value(&prep.gzip_level)->default_value(0),
      "gzip level of the frames, 0 (off, fastest to read) to 9")(
      "neighbours", po::value(&neighbours.max_neighbours)->default_value(20),
      "source-view candidates kept per view")(
      "time_window", po::value(&neighbours.time_window)->default_value(1),
      "dynamic scenes: sources within this many time steps")(
      "dynibar_folder", po::value(&dynibar_folder),
      "also write the scene as DynIBaR's preprocessed folder DIR/dense (a monocular video with "
      "flows and masks: --rig monocular --time_steps N)");
  po::options_description generated("built-in synthetic scene");
  generated.add_options()("width", po::value(&synthetic.width)->default_value(synthetic.width),
                          "image width (imported scenes: downscale to this width)")(
      "height", po::value(&synthetic.height)->default_value(synthetic.height), "image height")(
      "views", po::value(&synthetic.n_views)->default_value(synthetic.n_views), "cameras")(
      "rig", po::value(&synthetic.rig)->default_value(synthetic.rig),
      "orbit | forward | monocular (one moving camera, a frame per time step) | cycling (a frame "
      "per time step from the forward rig's cameras in turn; the others are test views)")(
      "time_steps", po::value(&synthetic.n_time_steps)->default_value(1),
      "time steps (more than 1: moving objects)")(
      "seed", po::value(&synthetic.seed)->default_value(0), "layout and texture seed")(
      "test_every", po::value(&synthetic.n_test_every)->default_value(synthetic.n_test_every),
      "every N-th camera is a test view (0: none)");
  data::PoseSceneOptions pose;
  std::string cameras;
  po::options_description posed(
      "built-in pose data set (--input synthetic_pose; --width, "
      "--height and --seed as above, default 128x128)");
  posed.add_options()("cameras", po::value(&cameras),
                      "cameras in the ring (4); panoptic: hd camera names, e.g. 00_03,00_12 "
                      "(every hd camera with images); human36m: camera ids (the calibration's)")(
      "sequences", po::value(&pose.n_sequences)->default_value(pose.n_sequences),
      "sequences (one body and its motion each)")(
      "frames", po::value(&pose.n_frames)->default_value(pose.n_frames), "frames per sequence")(
      "test_sequences", po::value(&pose.n_test_sequences)->default_value(pose.n_test_sequences),
      "the last N sequences are the test split (panoptic: 1 where there are 2 or more)")(
      "pillars", po::value(&pose.n_pillars)->default_value(pose.n_pillars),
      "occluding pillars per sequence");
  data::PanopticOptions panoptic;
  data::Human36mOptions human36m;
  std::string captured_source, test_subjects;
  po::options_description captured(
      "captured pose data sets (--input panoptic or human36m; also --cameras, --width and "
      "--height: full size by default, the aspect kept; panoptic: --test_sequences)");
  captured.add_options()("source", po::value(&captured_source),
                         "panoptic: a folder of sequence folders, or one sequence folder (with "
                         "calibration_<seq>.json, hdPose3d_stage1_coco19/, hdImgs/); human36m: "
                         "h36m-fetch's processed folder (S1/Directions-1/annot.h5, "
                         "imageSequence/), or one subject's")(
      "calibration", po::value(&human36m.calibration),
      "human36m: H36M's metadata.xml (in h36m-fetch) or una-dinosauria's cameras.h5")(
      "body_crop", po::value(&human36m.body_crop)->default_value(0),
      "panoptic and human36m: > 0: each view a square about its joints, this part of the box "
      "added each side, "
      "--width a side (learnable triangulation's person crops); 0: whole frames")(
      "skip_damaged_actions", po::bool_switch(&human36m.skip_damaged_actions),
      "human36m: leave out S9's Greeting-2, SittingDown-2 and Waiting-1, whose 3D labels are "
      "damaged")(
      "test_subjects", po::value(&test_subjects),
      "human36m: the test split's subjects, e.g. S9,S11 (the default where others remain)")(
      "frame_step", po::value(&panoptic.frame_step)->default_value(panoptic.frame_step),
      "every k-th frame that has a 3D body file")(
      "max_frames", po::value(&panoptic.max_frames)->default_value(panoptic.max_frames),
      "frames kept per sequence (0: all)")(
      "body", po::value(&panoptic.body)->default_value(panoptic.body),
      "the body id to import (-1: each frame's first body; frames without it are skipped)");
  po::options_description imported("imported scenes");
  imported.add_options()("background", po::value(&background)->default_value(background),
                         "white | black, behind transparent pixels")(
      "factor", po::value(&import_options.downsample)->default_value(1),
      "downscale the frames N times (area average, intrinsics to match); LLFF / COLMAP read "
      "images_<N>/, or the largest images_<M> with M < N, when there is one")(
      "images", po::value(&import_options.images_folder), "LLFF / COLMAP: images folder to read")(
      "test_ids", po::value(&test_ids),
      "the test views where the format has no split: a file of ids, or I,J,... (indices from 0 "
      "or image names); replaces llffhold")(
      "strict", po::bool_switch(&import_options.strict),
      "frames whose image is missing are an error, not skipped with a warning")(
      "llffhold", po::value(&import_options.llffhold)->default_value(8),
      "every N-th view is a test view where the format has no split (0: none)")(
      "near", po::value(&near_depth), "near depth for every view (overrides the format)")(
      "far", po::value(&far_depth), "far depth for every view (overrides the format)")(
      "max_views", po::value(&import_options.max_views_per_split)->default_value(0),
      "keep the first N views of each split (0: all)");
  po::options_description all;
  all.add(general).add(generated).add(posed).add(captured).add(imported);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: mvibr prep --out DIR [--input PATH|synthetic] [--shards N] [options]\n\n"
              << all;
    return 0;
  }
  if (vm.count("config")) store_config_file(vm["config"].as<std::string>(), all, &vm);
  po::notify(vm);
  if (out.empty()) throw InvalidArgument("mvibr prep needs --out DIR");
  const auto at_least = [](const char* option, long long value, long long least) {
    if (value < least) {
      throw InvalidArgument("--" + std::string(option) + " must be at least " +
                            std::to_string(least) + ", got " + std::to_string(value));
    }
  };
  at_least("shards", prep.n_shards, 1);
  at_least("neighbours", neighbours.max_neighbours, 1);
  at_least("time_window", neighbours.time_window, 0);
  at_least("views", synthetic.n_views, 1);
  at_least("time_steps", synthetic.n_time_steps, 1);
  at_least("test_every", synthetic.n_test_every, 0);
  at_least("factor", import_options.downsample, 1);
  at_least("llffhold", import_options.llffhold, 0);
  at_least("max_views", import_options.max_views_per_split, 0);
  if (prep.gzip_level < 0 || prep.gzip_level > 9) {
    throw InvalidArgument("--compress must be 0 to 9, got " + std::to_string(prep.gzip_level));
  }
  for (const char* depth : {"near", "far"}) {
    if (vm.count(depth) && !(vm[depth].as<double>() > 0)) {
      throw InvalidArgument("--" + std::string(depth) + " must be positive");
    }
  }
  if (vm.count("near") && vm.count("far") && !(near_depth < far_depth)) {
    throw InvalidArgument("--near must be less than --far");
  }
  if (background != "white" && background != "black") {
    throw InvalidArgument("--background must be white or black, got '" + background + "'");
  }
  import_options.background =
      background == "white" ? data::Background::kWhite : data::Background::kBlack;
  if (vm.count("near")) import_options.near_depth = near_depth;
  if (vm.count("far")) import_options.far_depth = far_depth;
  prep.command_line = command_line;
  // Progress on scenes large enough to take a while: a line at every tenth of the images.
  int printed_tenth = 0;
  import_options.on_image_read = [&](size_t read, size_t total) {
    const int tenth = int(10 * read / total);
    if (total < 100 || tenth == printed_tenth) return;
    printed_tenth = tenth;
    std::fprintf(stderr, "reading images: %zu of %zu\n", read, total);
  };

  const bool from_panoptic = input == "panoptic", from_human36m = input == "human36m";
  const bool captured_pose = from_panoptic || from_human36m;
  const bool built_in_pose = input == "synthetic_pose" || format == "synthetic_pose";
  const bool built_in = built_in_pose || input == "synthetic" || format == "synthetic";
  if (captured_pose) {
    if (captured_source.empty()) throw InvalidArgument("--input " + input + " needs --source DIR");
    for (const char* other : {"test_ids", "factor", "strict", "images", "llffhold", "max_views",
                              "near", "far", "background"}) {
      if (vm.count(other) && !vm[other].defaulted()) {
        throw InvalidArgument("--" + std::string(other) + " is not for --input " + input +
                              " (--width, --frame_step, --max_frames)");
      }
    }
    at_least("frame_step", panoptic.frame_step, 1);
    at_least("max_frames", panoptic.max_frames, 0);
    if (!vm["width"].defaulted()) panoptic.width = human36m.width = synthetic.width;
    if (!vm["height"].defaulted()) panoptic.height = human36m.height = synthetic.height;
    panoptic.cameras = human36m.cameras = split_names("cameras", cameras);
  }
  const auto only_for = [&](const char* option, const char* which, bool allowed) {
    if (!allowed && (vm.count(option) && !vm[option].defaulted())) {
      throw InvalidArgument("--" + std::string(option) + " is for --input " + which);
    }
  };
  only_for("source", "panoptic and human36m", captured_pose);
  only_for("frame_step", "panoptic and human36m", captured_pose);
  only_for("max_frames", "panoptic and human36m", captured_pose);
  only_for("body", "panoptic", from_panoptic);
  only_for("calibration", "human36m", from_human36m);
  only_for("test_subjects", "human36m", from_human36m);
  only_for("body_crop", "panoptic and human36m", captured_pose);
  only_for("skip_damaged_actions", "human36m", from_human36m);
  if (from_panoptic) {
    at_least("body", panoptic.body, -1);
    panoptic.body_crop = human36m.body_crop;
    panoptic.on_image_read = import_options.on_image_read;
    if (!vm["test_sequences"].defaulted()) {
      at_least("test_sequences", pose.n_test_sequences, 0);
      panoptic.test_sequences = pose.n_test_sequences;
    }
  } else if (from_human36m) {
    only_for("test_sequences", "synthetic_pose and panoptic", false);
    human36m.on_image_read = import_options.on_image_read;
    human36m.frame_step = panoptic.frame_step;
    human36m.max_frames = panoptic.max_frames;
    if (vm.count("test_subjects")) {
      human36m.test_subjects = split_names("test_subjects", test_subjects);
    }
  } else if (!cameras.empty()) {
    if (!built_in_pose)
      throw InvalidArgument("--cameras is for synthetic_pose, panoptic and human36m");
    pose.n_cameras = camera_count(cameras);
  }
  if (!built_in && !captured_pose) {
    if (!vm["height"].defaulted()) {
      throw InvalidArgument(
          "--height is for the built-in scene; an imported one keeps its aspect "
          "(--width or --factor)");
    }
    if (!vm["width"].defaulted()) {
      at_least("width", synthetic.width, 1);
      if (import_options.downsample > 1)
        throw InvalidArgument("--width and --factor: give one of them");
      import_options.target_width = synthetic.width;
    }
    if (!test_ids.empty()) import_options.test_ids = data::parse_test_ids(test_ids);
  } else if (!test_ids.empty() || import_options.downsample > 1 || import_options.strict) {
    throw InvalidArgument("--test_ids, --factor and --strict are for imported scenes");
  }
  if (!built_in && !captured_pose && !std::filesystem::exists(input)) {
    throw InvalidArgument(input + ": no such file or folder (--input)");
  }
  const auto start = std::chrono::steady_clock::now();
  if (built_in_pose) {
    if (!vm["width"].defaulted()) pose.width = synthetic.width;
    if (!vm["height"].defaulted()) pose.height = synthetic.height;
    pose.seed = synthetic.seed;
  }
  data::Scene scene = from_panoptic   ? data::import_panoptic(captured_source, panoptic)
                      : from_human36m ? data::import_human36m(captured_source, human36m)
                      : built_in_pose ? data::make_pose_scene(pose)
                      : built_in      ? data::make_synthetic_scene(synthetic)
                                      : data::import_scene(format, input, import_options);
  if (scene.neighbours.empty()) data::select_neighbours(&scene, neighbours);
  if (!dynibar_folder.empty()) data::write_dynibar_folder(scene, dynibar_folder);
  const data::PrepReport report = data::write_prepared_scene(scene, out, prep);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::map<data::Split, int> splits;
  for (const data::View& v : scene.views) ++splits[v.split];
  const PinholeCamera<double>& c = scene.views[0].camera;
  std::printf("prepared '%s' (%s%s): %d views of %dx%d (train %d, val %d, test %d)\n",
              scene.name.c_str(), scene.source_format.c_str(), scene.dynamic ? ", dynamic" : "",
              report.n_views, c.width, c.height, splits[data::Split::kTrain],
              splits[data::Split::kValidation], splits[data::Split::kTest]);
  double near_min = INFINITY, near_max = 0, far_min = INFINITY, far_max = 0;
  for (const data::View& v : scene.views) {
    near_min = std::min(near_min, v.near_depth), near_max = std::max(near_max, v.near_depth);
    far_min = std::min(far_min, v.far_depth), far_max = std::max(far_max, v.far_depth);
  }
  std::printf(
      "depth bounds: near %.4g to %.4g, far %.4g to %.4g (from %s; --near/--far override)\n",
      near_min, near_max, far_min, far_max,
      scene.depth_bounds_from.empty() ? "the scene" : scene.depth_bounds_from.c_str());
  if (!scene.skeleton.empty()) {
    std::map<data::Split, int> samples;
    size_t visible = 0, joints = 0;
    for (size_t i = 0; i < scene.views.size(); ++i) {
      const data::View& v = scene.views[i];
      if (v.target) ++samples[v.split];
      for (const uint8_t b : v.pose.visible) visible += b;
      joints += v.pose.visible.size();
    }
    std::printf(
        "pose: %zu joints, %zu cameras a sample; samples: train %d, test %d; %.1f%% of "
        "joints visible\n",
        scene.skeleton.size(), scene.neighbours[0].size() + 1, samples[data::Split::kTrain],
        samples[data::Split::kTest], 100.0 * double(visible) / double(joints));
  }
  for (const std::string& warning : scene.warnings) std::printf("warning: %s\n", warning.c_str());
  std::printf("%d shard(s), %lld frames written, duplication factor %.2f, %.2f s\n",
              report.n_shards, report.frames_written, report.duplication_factor, seconds);
  std::printf("wrote %s\n", (out + "/scene.h5").c_str());
  if (!dynibar_folder.empty()) std::printf("wrote %s/dense\n", dynibar_folder.c_str());
  return 0;
}

}  // namespace mvibr::cli
