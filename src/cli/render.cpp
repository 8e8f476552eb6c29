// `mvibr render --run DIR`: a trained run's held-out views as PNGs (colour and depth; DynIBaR
// also its static and dynamic parts) in DIR/renders/<step>/, to look at what the numbers of
// `mvibr eval` mean; with --path, frames of a camera path (data/camera_path.h) in
// DIR/renders/<step>/path-<kind>/, the frames of a video. On a dynamic scene --time sets the
// path's time: a step (bullet time) or sweep (a fixed camera over time, a camera and time path).
// A pose run's held-out instants instead: every camera with the true and the predicted skeleton
// (train/pose_render.h), --instant one of them. Options as eval's. Under mpirun the ranks share
// the views, frames or instants.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/train/evaluate.h"
#include "mvibr/train/pose_render.h"

namespace fs = std::filesystem;

namespace mvibr::cli {

namespace {

// The path's key views by default: the split's views in index order, the first max_views.
std::vector<int> default_path_views(const data::Scene& scene, const RunSelection& s) {
  std::vector<int> views;
  for (size_t v = 0; v < scene.views.size(); ++v) {
    if (scene.views[v].split == s.split) views.push_back(int(v));
  }
  if (s.max_views > 0 && views.size() > size_t(s.max_views)) views.resize(size_t(s.max_views));
  return views;
}

int render_camera_path(const RunSelection& s, dist::Communicator& world) {
  const data::SceneIndex index = data::read_scene_index(s.config.datadir);
  const int frames = s.frames > 0        ? s.frames
                     : s.path == "fixed" ? data::time_steps(index.scene)
                                         : 120;
  std::vector<data::PathFrame> path;
  if (s.path == "spiral") {
    data::SpiralOptions options;
    options.frames = frames;
    path = data::spiral_path(index.scene, options);
  } else if (s.path == "orbit") {
    data::OrbitOptions options;
    options.frames = frames;
    path = data::orbit_path(index.scene, options);
  } else {
    const std::vector<int> keys =
        s.path_views.empty() ? default_path_views(index.scene, s) : s.path_views;
    if (s.path == "fixed") {
      if (keys.empty())
        throw InvalidArgument("--path fixed: no view in the split; give --path_views");
      path = data::fixed_path(index.scene, keys[0], frames);
    } else {
      path = data::interpolated_path(index.scene, keys, frames);
    }
  }
  if (s.time || s.path == "fixed") {
    data::set_path_time(index.scene, s.time.value_or(data::kSweepTime), &path);
  }
  RenderProgressLine progress("frame", world.rank(), world.size());
  const train::PathReport report = train::render_path(
      s.config, s.checkpoint, path, (fs::path(s.run_dir) / "renders").string(), "path-" + s.path,
      [](const train::PathFrameRender& r) {
        std::printf("frame %d -> %s, %s\n", r.frame, r.rgb_png.c_str(), r.depth_png.c_str());
        std::fflush(stdout);
      },
      &world, progress.callback());
  if (world.rank() != 0) return 0;
  std::printf(
      "rendered %zu frame(s) of the %s path at step %llu into %s (cameras.json lists "
      "them)\n",
      report.frames.size(), s.path.c_str(), (unsigned long long)report.step, report.dir.c_str());
  return 0;
}

int render_pose(const RunSelection& s, dist::Communicator& world) {
  if (!s.path.empty()) {
    throw InvalidArgument("--path is for IBRNet and DynIBaR runs; a pose run draws its instants");
  }
  const int first = s.instant.value_or(0), count = s.instant ? 1 : s.max_views;
  const train::PoseRenderReport report = train::render_pose_run(
      s.config, s.checkpoint, s.split, first, count, (fs::path(s.run_dir) / "renders").string(),
      [](const train::PoseInstantRender& r) {
        std::printf("instant %d %s: mpjpe %.1f mm -> %zu view(s)\n", r.instant,
                    r.view_names[0].c_str(), r.mpjpe_mm, r.png_files.size());
        std::fflush(stdout);
      },
      &world);
  if (world.rank() != 0) return 0;
  std::printf("drew %zu %s instant(s) at step %llu into %s (%s lists them)\n",
              report.instants.size(), data::split_name(s.split), (unsigned long long)report.step,
              report.dir.c_str(), report.json.c_str());
  return 0;
}

}  // namespace

int run_render(const std::vector<std::string>& args) {
  return run_on_ranks("mvibr render", [&](dist::Communicator& world,
                                          const dist::Topology& topology) {
    RunSelection s;
    if (!parse_run_selection(args, "render", &s)) return 0;
    if (s.config.model == train::ModelKind::kPose) return render_pose(s, world);
    if (s.instant) throw InvalidArgument("--instant is for pose runs (model = pose)");
    select_rank_device(s.config, topology);
    if (!s.path.empty()) return render_camera_path(s, world);
    RenderProgressLine progress("view", world.rank(), world.size());
    const train::EvalReport report = train::evaluate_run(
        s.config, s.checkpoint, s.split, s.max_views, (fs::path(s.run_dir) / "renders").string(),
        [](const train::ViewMetrics& m) {
          std::printf("view %d %s: psnr %.2f ssim %.4f -> %s, %s\n", m.view, m.name.c_str(), m.psnr,
                      m.ssim, m.rgb_png.c_str(), m.depth_png.c_str());
          std::fflush(stdout);
        },
        &world, progress.callback());
    if (topology.rank != 0) return 0;
    std::printf("rendered %zu %s view(s) at step %llu: mean psnr %.2f ssim %.4f\n",
                report.views.size(), data::split_name(s.split), (unsigned long long)report.step,
                report.mean_psnr, report.mean_ssim);
    return 0;
  });
}

}  // namespace mvibr::cli
