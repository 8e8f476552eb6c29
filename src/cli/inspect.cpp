// `mvibr inspect PATH`: what a prepared scene (its folder or scene.h5), one shard or a checkpoint
// holds, and a full check of it: every header and table validated, every frame chunk or tensor
// read (so a checksum failure anywhere shows up here, not mid-training or at resume).
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "commands.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/train/checkpoint.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mvibr::cli {

namespace {

void print_views(const std::vector<data::View>& views) {
  std::map<data::Split, int> splits;
  std::set<int> times;
  double near_min = 1e300, far_max = 0;
  for (const data::View& v : views) {
    ++splits[v.split];
    times.insert(v.time_index);
    near_min = std::min(near_min, v.near_depth);
    far_max = std::max(far_max, v.far_depth);
  }
  std::printf("  views: %zu (train %d, val %d, test %d), %zu time step(s)\n", views.size(),
              splits[data::Split::kTrain], splits[data::Split::kValidation],
              splits[data::Split::kTest], times.size());
  std::printf("  depth bounds: near >= %.4g, far <= %.4g\n", near_min, far_max);
}

// Reads every frame of a shard; returns the number read.
long long check_shard(const data::ShardReader& shard) {
  std::vector<uint8_t> rgb(size_t(shard.width()) * shard.height() * 3);
  for (int f = 0; f < shard.n_frames(); ++f) shard.read_frame(f, rgb.data());
  return shard.n_frames();
}

// A pose data set's skeleton, one line: each joint's name and parent.
void print_skeleton(const std::vector<int>& parents, const std::vector<std::string>& names) {
  if (parents.empty()) return;
  std::printf("  skeleton: %zu joints:", parents.size());
  for (size_t j = 0; j < parents.size(); ++j) {
    std::printf(" %s%s%s", names[j].c_str(), parents[j] < 0 ? "" : "<",
                parents[j] < 0 ? "" : names[size_t(parents[j])].c_str());
  }
  std::printf("\n");
}

void print_shard(const data::ShardReader& shard) {
  size_t sources = 0;
  for (int t = 0; t < shard.n_targets(); ++t) sources += shard.target_sources(t).size();
  std::printf("shard %d of %d: %s\n", shard.shard_index(), shard.n_shards(), shard.path().c_str());
  std::printf("  %d frames of %dx%d, %d targets, %.1f sources per target\n", shard.n_frames(),
              shard.width(), shard.height(), shard.n_targets(),
              double(sources) / std::max(1, shard.n_targets()));
  if (shard.skeleton().empty()) return;
  size_t visible = 0, joints = 0;
  for (int f = 0; f < shard.n_frames(); ++f) {
    for (const uint8_t b : shard.frame(f).pose.visible) visible += b;
    joints += shard.skeleton().size();
  }
  std::printf("  pose labels: %zu joints in %d frames, %.1f%% visible\n", shard.skeleton().size(),
              shard.n_frames(), 100.0 * double(visible) / double(joints));
}

void print_checkpoint(const std::string& path) {
  const train::CheckpointSummary c = train::inspect_checkpoint(path);
  std::printf("checkpoint at step %llu: %s\n", (unsigned long long)c.step, path.c_str());
  std::printf("  written by %s, seed %llu, learning rates: feature %.4g, mlp %.4g\n",
              c.mvibr_version.c_str(), (unsigned long long)c.random_seed, c.lr_feature, c.lr_mlp);
  if (c.ranks == 0) {
    std::printf("  weights alone (no data position)\n");
  } else {
    std::printf("  data positions of %zu rank(s)\n", c.ranks);
  }
  std::map<std::string, std::pair<size_t, size_t>> networks;  // tensors, values
  for (const train::CheckpointSummary::Tensor& t : c.parameters) {
    auto& n = networks[t.name.substr(0, t.name.find('.'))];
    ++n.first;
    n.second += t.count;
  }
  for (const auto& [name, counts] : networks) {
    std::printf("  %s: %zu tensors, %zu values\n", name.c_str(), counts.first, counts.second);
  }
  std::printf("checked %zu parameters and both Adam moments of each: ok\n", c.parameters.size());
}

}  // namespace

int run_inspect(const std::vector<std::string>& args) {
  std::string path;
  bool no_check = false;
  po::options_description options("mvibr inspect options");
  options.add_options()("help,h", "print this help")(
      "path", po::value(&path), "a prepared folder, scene.h5, a shard or a checkpoint")(
      "no_check", po::bool_switch(&no_check), "print only; do not read every frame");
  po::positional_options_description positional;
  positional.add("path", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: mvibr inspect PATH [--no_check]\n\n" << options;
    return 0;
  }
  po::notify(vm);
  if (path.empty()) throw InvalidArgument("mvibr inspect needs a PATH");

  const std::string file = fs::is_directory(path) ? (fs::path(path) / "scene.h5").string() : path;
  const std::string kind = data::data_file_kind(file);
  if (kind == "mvibr-checkpoint") {
    print_checkpoint(file);
    return 0;
  }
  if (kind == "mvibr-shard") {
    const data::ShardReader shard(file);
    print_shard(shard);
    std::printf("  format version %d, prep: %s\n", data::kDataFormatVersion,
                shard.prep_command().c_str());
    if (!no_check) std::printf("  checked %lld frames: ok\n", check_shard(shard));
    return 0;
  }
  const data::SceneIndex index = data::read_scene_index(file);
  const data::Scene& scene = index.scene;
  const PinholeCamera<double>& c = scene.views.at(0).camera;
  std::printf("scene '%s' (%s%s): %s\n", scene.name.c_str(), scene.source_format.c_str(),
              scene.dynamic ? ", dynamic" : "", file.c_str());
  std::printf("  format version %d, written by mvibr %s\n", index.format_version,
              index.mvibr_version.c_str());
  std::printf("  prep: %s\n", index.prep_command.c_str());
  std::printf("  images %dx%d, fx %.4g fy %.4g cx %.4g cy %.4g (view 0)\n", c.width, c.height, c.fx,
              c.fy, c.cx, c.cy);
  print_views(scene.views);
  if (!scene.depth_bounds_from.empty()) {
    std::printf("  depth bounds from %s\n", scene.depth_bounds_from.c_str());
  }
  size_t most = 0, least = SIZE_MAX;
  for (const auto& list : scene.neighbours) {
    most = std::max(most, list.size());
    least = std::min(least, list.size());
  }
  std::printf("  neighbours: %zu to %zu per view\n", least, most);
  print_skeleton(scene.skeleton, scene.joint_names);
  std::printf("  shards: %d\n", index.n_shards);
  long long frames = 0;
  for (int s = 0; s < index.n_shards; ++s) {
    const data::ShardReader shard(
        (fs::path(file).parent_path() / data::shard_file_name(s, index.n_shards)).string());
    if (shard.n_shards() != index.n_shards || shard.shard_index() != s) {
      throw InvalidArgument(shard.path() + ": does not belong to " + file);
    }
    print_shard(shard);
    if (!no_check) frames += check_shard(shard);
  }
  if (!no_check) {
    std::printf("checked %lld frames in %d shard(s): ok (duplication factor %.2f)\n", frames,
                index.n_shards, double(frames) / double(scene.views.size()));
  }
  return 0;
}

}  // namespace mvibr::cli
