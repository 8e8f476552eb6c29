// `mvibr prep`'s output: scene.h5 and self-contained shards, each written under a temporary
// name and renamed only when complete and on disk (see shards.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <set>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/hdf5/hdf5_file.h"
#include "view_table.h"

namespace mvibr::data {

namespace fs = std::filesystem;

std::string shard_file_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05d-of-%05d.h5", index, count);
  return name;
}

namespace {

// Renames every temporary file into place at the end, or removes them all on failure.
class StagedFiles {
 public:
  std::string stage(const fs::path& final_path) {
    const std::string temporary = final_path.string() + ".tmp-" + std::to_string(::getpid());
    staged_.emplace_back(temporary, final_path.string());
    return temporary;
  }
  void commit() {
    for (const auto& [temporary, final_path] : staged_) {
      sync_to_disk(temporary);
      fs::rename(temporary, final_path);
      sync_to_disk(fs::path(final_path).parent_path().string());
    }
    staged_.clear();
  }
  ~StagedFiles() {
    std::error_code ignored;
    for (const auto& entry : staged_) fs::remove(entry.first, ignored);
  }

 private:
  std::vector<std::pair<std::string, std::string>> staged_;
};

// Targets of every split go round-robin over the shards, each split on its own counter, so
// every shard holds a spread of training views and of held-out views. A view that is no target
// goes with the first target that has it as a source.
std::vector<int> assign_targets(const Scene& scene, int n_shards) {
  std::vector<int> shard_of_view(scene.views.size(), -1);
  std::map<Split, int> next;
  for (size_t i = 0; i < scene.views.size(); ++i) {
    if (scene.views[i].target) shard_of_view[i] = next[scene.views[i].split]++ % n_shards;
  }
  for (size_t i = 0; i < scene.views.size(); ++i) {
    if (!scene.views[i].target) continue;
    for (int s : scene.neighbours[i]) {
      if (shard_of_view[size_t(s)] < 0) shard_of_view[size_t(s)] = shard_of_view[i];
    }
  }
  return shard_of_view;
}

// The frames of `frame_views` in order: each view's rgb, or what Scene::read_rgb reads for it,
// kFramesPerBlock views read in parallel, then written (HDF5 takes one thread). A read pixel
// count other than the view's fails naming the view; the first failure in order is rethrown.
constexpr size_t kFramesPerBlock = 32;
void write_frames(const Scene& scene, const std::vector<int>& frame_views,
                  const h5::RecordDataset& dataset) {
  std::vector<std::vector<uint8_t>> block(kFramesPerBlock);
  std::vector<std::exception_ptr> failures(kFramesPerBlock);
  for (size_t first = 0; first < frame_views.size(); first += kFramesPerBlock) {
    const size_t count = std::min(kFramesPerBlock, frame_views.size() - first);
#pragma omp parallel for schedule(dynamic)
    for (long k = 0; k < long(count); ++k) {
      const size_t index = size_t(frame_views[first + size_t(k)]);
      const View& view = scene.views[index];
      failures[size_t(k)] = nullptr;
      if (!view.rgb.empty()) continue;
      try {
        block[size_t(k)] = scene.read_rgb(index);
        const size_t expected = size_t(view.camera.width) * size_t(view.camera.height) * 3;
        if (block[size_t(k)].size() != expected) {
          throw InvalidArgument("scene '" + scene.name + "', view " + std::to_string(index) + " (" +
                                view.name + "): read " + std::to_string(block[size_t(k)].size()) +
                                " bytes of pixels, expected " + std::to_string(expected));
        }
      } catch (...) {
        failures[size_t(k)] = std::current_exception();
      }
    }
    for (size_t k = 0; k < count; ++k) {
      if (failures[k]) std::rethrow_exception(failures[k]);
      const View& view = scene.views[size_t(frame_views[first + k])];
      dataset.write(first + k, view.rgb.empty() ? block[k].data() : view.rgb.data());
    }
  }
}

void write_shard(const Scene& scene, int shard, const std::vector<int>& shard_of_view,
                 const PrepOptions& options, const std::string& path, long long* frames) {
  // Frames: the shard's targets first, then every source they need, each once.
  std::vector<int> targets, frame_views;
  std::map<int, int> frame_of_view;
  for (size_t i = 0; i < scene.views.size(); ++i) {
    if (shard_of_view[i] == shard && scene.views[i].target) targets.push_back(int(i));
  }
  const auto add = [&](int view) {
    if (frame_of_view.emplace(view, int(frame_views.size())).second) frame_views.push_back(view);
  };
  for (int t : targets) add(t);
  for (int t : targets) {
    for (int s : scene.neighbours[size_t(t)]) add(s);
  }
  std::vector<std::vector<int>> local_sources;
  std::vector<int> target_frames;
  for (int t : targets) {
    target_frames.push_back(frame_of_view.at(t));
    local_sources.emplace_back();
    for (int s : scene.neighbours[size_t(t)]) local_sources.back().push_back(frame_of_view.at(s));
  }

  h5::File file = h5::File::create(path);
  write_common_attributes(file, "mvibr-shard", scene, options.command_line);
  file.set_attribute("shard_index", (long long)shard);
  file.set_attribute("n_shards", (long long)options.n_shards);
  file.set_attribute("n_frames", (long long)frame_views.size());
  file.set_attribute("n_targets", (long long)targets.size());
  std::vector<const View*> views;
  for (int v : frame_views) views.push_back(&scene.views[size_t(v)]);
  write_view_table(file, views);
  file.write("frame_view", {hsize_t(frame_views.size())}, frame_views.data());
  file.write("targets", {hsize_t(targets.size())}, target_frames.data());
  int sources_width = 0;
  const std::vector<int> table = pad_neighbours(local_sources, &sources_width);
  file.write("target_sources", {hsize_t(targets.size()), hsize_t(sources_width)}, table.data());
  const hsize_t height = hsize_t(scene.views[0].camera.height);
  const hsize_t width = hsize_t(scene.views[0].camera.width);
  const auto records = [&](const char* name, size_t count, std::vector<hsize_t> record,
                           h5::RecordType type) {
    return h5::RecordDataset::create(file, name, count, record, type, options.gzip_level);
  };
  const h5::RecordDataset dataset =
      records("frames", frame_views.size(), {height, width, 3}, h5::RecordType::kUInt8);
  write_frames(scene, frame_views, dataset);
  if (!scene.views[0].motion.empty()) {
    // Every frame's masks (the static model's sources are masked), the targets' flows and
    // disparities (only the losses at a target read them).
    file.create_group("motion");
    const h5::RecordDataset motion_masks =
        records("motion/motion_mask", frame_views.size(), {height, width}, h5::RecordType::kUInt8);
    const h5::RecordDataset static_masks =
        records("motion/static_mask", frame_views.size(), {height, width}, h5::RecordType::kUInt8);
    for (size_t f = 0; f < frame_views.size(); ++f) {
      const FrameMotion& m = scene.views[size_t(frame_views[f])].motion;
      motion_masks.write(f, m.motion_mask.data());
      static_masks.write(f, m.static_mask.data());
    }
    const hsize_t flows = kFlowCount;
    const h5::RecordDataset disparity =
        records("motion/disparity", targets.size(), {height, width}, h5::RecordType::kFloat32);
    const h5::RecordDataset flow =
        records("motion/flow", targets.size(), {flows, height, width, 2}, h5::RecordType::kFloat32);
    const h5::RecordDataset flow_valid = records("motion/flow_valid", targets.size(),
                                                 {flows, height, width}, h5::RecordType::kUInt8);
    for (size_t t = 0; t < targets.size(); ++t) {
      const FrameMotion& m = scene.views[size_t(targets[t])].motion;
      disparity.write(t, m.disparity.data());
      flow.write(t, m.flow.data());
      flow_valid.write(t, m.flow_valid.data());
    }
  }
  if (!scene.skeleton.empty()) {
    write_skeleton(file, scene);
    file.create_group("pose");
    const hsize_t joints = scene.skeleton.size();
    std::vector<double> world;
    std::vector<float> image;
    std::vector<signed char> visible;
    for (int v : frame_views) {
      const PoseLabels& p = scene.views[size_t(v)].pose;
      world.insert(world.end(), p.joints_world.begin(), p.joints_world.end());
      image.insert(image.end(), p.joints_image.begin(), p.joints_image.end());
      visible.insert(visible.end(), p.visible.begin(), p.visible.end());
    }
    const hsize_t n = frame_views.size();
    file.write("pose/joints_world", {n, joints, 3}, world.data());
    file.write("pose/joints_image", {n, joints, 2}, image.data());
    file.write("pose/visible", {n, joints}, visible.data());
  }
  file.flush();
  *frames += (long long)frame_views.size();
}

void write_scene_file(const Scene& scene, const std::vector<int>& shard_of_view,
                      const PrepOptions& options, const std::string& path) {
  h5::File file = h5::File::create(path);
  write_common_attributes(file, "mvibr-scene", scene, options.command_line);
  file.set_attribute("n_views", (long long)scene.views.size());
  file.set_attribute("n_shards", (long long)options.n_shards);
  std::vector<const View*> views;
  for (const View& v : scene.views) views.push_back(&v);
  write_view_table(file, views);
  write_skeleton(file, scene);
  file.write("views/shard", {hsize_t(scene.views.size())}, shard_of_view.data());
  int width = 0;
  const std::vector<int> table = pad_neighbours(scene.neighbours, &width);
  file.write("neighbours", {hsize_t(scene.views.size()), hsize_t(width)}, table.data());
  file.flush();
}

}  // namespace

PrepReport write_prepared_scene(const Scene& scene, const std::string& out_dir,
                                const PrepOptions& options) {
  const h5::LibraryGuard guard(h5::library_lock());
  validate_scene(scene);
  if (scene.neighbours.size() != scene.views.size()) {
    throw InvalidArgument("scene '" + scene.name + "' has no neighbour lists");
  }
  const size_t targets = size_t(std::count_if(scene.views.begin(), scene.views.end(),
                                              [](const View& v) { return v.target; }));
  if (options.n_shards < 1 || size_t(options.n_shards) > targets) {
    throw InvalidArgument("--shards must be in [1, " + std::to_string(targets) +
                          "] (the number of targets), got " + std::to_string(options.n_shards));
  }
  if (options.gzip_level < 0 || options.gzip_level > 9) {
    throw InvalidArgument("--compress must be in [0, 9], got " +
                          std::to_string(options.gzip_level));
  }
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) throw InvalidArgument(out_dir + ": cannot create output folder: " + error.message());

  // Without scene.h5 the folder reads as incomplete until the new one is in place.
  fs::remove(fs::path(out_dir) / "scene.h5", error);
  const std::vector<int> shard_of_view = assign_targets(scene, options.n_shards);
  PrepReport report;
  report.n_views = int(scene.views.size());
  report.n_shards = options.n_shards;
  {
    StagedFiles staged;
    for (int s = 0; s < options.n_shards; ++s) {
      const fs::path path = fs::path(out_dir) / shard_file_name(s, options.n_shards);
      write_shard(scene, s, shard_of_view, options, staged.stage(path), &report.frames_written);
      report.files.push_back(path.string());
    }
    staged.commit();
  }
  // Shards of an earlier prep with another count would look like part of this data set.
  std::set<std::string> current;
  for (const std::string& f : report.files) current.insert(fs::path(f).filename().string());
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && name.size() > 3 &&
        name.compare(name.size() - 3, 3, ".h5") == 0 && !current.count(name)) {
      fs::remove(entry.path());
    }
  }
  {
    StagedFiles staged;
    const fs::path path = fs::path(out_dir) / "scene.h5";
    write_scene_file(scene, shard_of_view, options, staged.stage(path));
    staged.commit();
    report.files.push_back(path.string());
  }
  report.duplication_factor = double(report.frames_written) / double(report.n_views);
  return report;
}

}  // namespace mvibr::data
