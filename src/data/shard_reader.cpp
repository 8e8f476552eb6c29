// Readers of scene.h5 and of the shards. Every count and shape comes from a header that may be
// corrupt, so each is bounded and cross-checked before anything is allocated from it.
#include <filesystem>

#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"
#include "mvibr/hdf5/hdf5_file.h"
#include "view_table.h"

namespace mvibr::data {

namespace fs = std::filesystem;

std::string data_file_kind(const std::string& path) {
  const h5::LibraryGuard guard(h5::library_lock());
  const h5::File file = h5::File::open_read_only(path);
  const std::string kind = file.string_attribute("format");
  if (kind != "mvibr-scene" && kind != "mvibr-shard" && kind != "mvibr-checkpoint") {
    file.fail("is a '" + kind + "' file, not an mvibr scene, shard or checkpoint");
  }
  return kind;
}

SceneIndex read_scene_index(const std::string& path) {
  const h5::LibraryGuard guard(h5::library_lock());
  if (!fs::exists(path)) {
    throw InvalidArgument(path + ": no such prepared data set (mvibr prep writes one)");
  }
  const std::string file_path =
      fs::is_directory(path) ? (fs::path(path) / "scene.h5").string() : path;
  const h5::File file = h5::File::open_read_only(file_path);
  SceneIndex index;
  index.format_version = check_format(file, "mvibr-scene");
  index.prep_command = file.string_attribute("prep_command");
  index.mvibr_version = file.string_attribute("mvibr_version");
  Scene& scene = index.scene;
  scene.name = file.string_attribute("name");
  scene.source_format = file.string_attribute("source_format");
  if (file.has_attribute("depth_bounds_from")) {
    scene.depth_bounds_from = file.string_attribute("depth_bounds_from");
  }
  scene.dynamic = bounded_attribute(file, "dynamic", 0, 1) == 1;
  const int width = int(bounded_attribute(file, "width", 2, kMaxImageSide));
  const int height = int(bounded_attribute(file, "height", 2, kMaxImageSide));
  const long long n = bounded_attribute(file, "n_views", 1, kMaxViews);
  index.n_shards = int(bounded_attribute(file, "n_shards", 1, n));
  scene.views = read_view_table(file, n, width, height);
  read_skeleton(file, &scene);
  index.shard_of_view = file.read_ints("views/shard", {n});
  for (long long i = 0; i < n; ++i) {
    const int s = index.shard_of_view[size_t(i)];
    if (s < 0 || s >= index.n_shards) {
      file.fail("view " + std::to_string(i) + " is assigned to shard " + std::to_string(s) +
                " of " + std::to_string(index.n_shards));
    }
  }
  const std::vector<hsize_t> shape = file.shape("neighbours", {n, -1});
  if (shape[1] < 1 || (long long)shape[1] > kMaxNeighbours) {
    file.fail("neighbours table is " + std::to_string(shape[1]) + " wide");
  }
  const auto table = file.read_ints("neighbours", {n, (long long)shape[1]});
  scene.neighbours = unpad_neighbours(file, "neighbours", table, n, (long long)shape[1], n);
  return index;
}

struct ShardReader::State {
  explicit State(h5::File opened) : file(std::move(opened)) {}
  h5::File file;
  std::unique_ptr<h5::RecordDataset> frames;
  // The motion group's datasets, when the shard has one.
  struct Motion {
    h5::RecordDataset motion_mask, static_mask, disparity, flow, flow_valid;
  };
  std::unique_ptr<Motion> motion;
  int shard_index = 0, n_shards = 0, width = 0, height = 0;
  std::string prep_command;
  std::vector<View> views;
  Scene skeleton;  // only its skeleton and joint names
  std::vector<int> frame_view, target_frames;
  std::vector<std::vector<int>> target_sources;
};

namespace {

// Every frame's pose labels, where the shard has a skeleton, into views[f].pose.
void read_pose_labels(const h5::File& file, long long frames, size_t joints,
                      std::vector<View>* views) {
  if (joints == 0) {
    if (file.has("pose")) file.fail("has pose labels but no skeleton");
    return;
  }
  if (!file.has("pose")) file.fail("has a skeleton but no pose labels");
  const long long j = (long long)joints;
  const std::vector<double> world = file.read_doubles("pose/joints_world", {frames, j, 3});
  const std::vector<float> image = file.read_floats("pose/joints_image", {frames, j, 2});
  const std::vector<signed char> visible = file.read_bytes("pose/visible", {frames, j});
  for (size_t f = 0; f < size_t(frames); ++f) {
    PoseLabels& p = (*views)[f].pose;
    p.joints_world.assign(world.begin() + long(f * joints * 3),
                          world.begin() + long((f + 1) * joints * 3));
    p.joints_image.assign(image.begin() + long(f * joints * 2),
                          image.begin() + long((f + 1) * joints * 2));
    for (size_t k = 0; k < joints; ++k) {
      const signed char b = visible[f * joints + k];
      if (b != 0 && b != 1) file.fail("pose/visible must hold 0 or 1");
      p.visible.push_back(uint8_t(b));
    }
    for (const double x : p.joints_world) {
      if (!std::isfinite(x)) file.fail("pose/joints_world has a non-finite value");
    }
    for (const float x : p.joints_image) {
      if (!std::isfinite(x)) file.fail("pose/joints_image has a non-finite value");
    }
  }
}

}  // namespace

ShardReader::ShardReader(const std::string& path) : state_(nullptr) {
  const h5::LibraryGuard guard(h5::library_lock());
  state_ = std::make_unique<State>(h5::File::open_read_only(path));
  State& s = *state_;
  const h5::File& file = s.file;
  check_format(file, "mvibr-shard");
  s.prep_command = file.string_attribute("prep_command");
  s.width = int(bounded_attribute(file, "width", 2, kMaxImageSide));
  s.height = int(bounded_attribute(file, "height", 2, kMaxImageSide));
  s.n_shards = int(bounded_attribute(file, "n_shards", 1, kMaxViews));
  s.shard_index = int(bounded_attribute(file, "shard_index", 0, s.n_shards - 1));
  const long long n_frames = bounded_attribute(file, "n_frames", 1, kMaxViews);
  const long long n_targets = bounded_attribute(file, "n_targets", 1, n_frames);
  s.views = read_view_table(file, n_frames, s.width, s.height);
  s.frame_view = file.read_ints("frame_view", {n_frames});
  for (int v : s.frame_view) {
    if (v < 0 || v >= kMaxViews) file.fail("frame_view holds view index " + std::to_string(v));
  }
  s.target_frames = file.read_ints("targets", {n_targets});
  for (int f : s.target_frames) {
    if (f < 0 || f >= n_frames) file.fail("targets holds frame " + std::to_string(f));
  }
  const std::vector<hsize_t> shape = file.shape("target_sources", {n_targets, -1});
  if (shape[1] < 1 || (long long)shape[1] > kMaxNeighbours) {
    file.fail("target_sources table is " + std::to_string(shape[1]) + " wide");
  }
  const auto table = file.read_ints("target_sources", {n_targets, (long long)shape[1]});
  s.target_sources =
      unpad_neighbours(file, "target_sources", table, n_targets, (long long)shape[1], n_frames);
  read_skeleton(file, &s.skeleton);
  read_pose_labels(file, n_frames, s.skeleton.skeleton.size(), &s.views);
  const hsize_t height = hsize_t(s.height), width = hsize_t(s.width), flows = kFlowCount;
  const auto frames = hsize_t(n_frames), targets = hsize_t(n_targets);
  s.frames = std::make_unique<h5::RecordDataset>(
      h5::RecordDataset::open(file, "frames", frames, {height, width, 3}, h5::RecordType::kUInt8));
  if (file.has("motion")) {
    using h5::RecordDataset, h5::RecordType;
    const auto open = [&](const char* name, hsize_t count, std::vector<hsize_t> record,
                          RecordType type) {
      return RecordDataset::open(file, name, count, record, type);
    };
    s.motion = std::make_unique<State::Motion>(State::Motion{
        open("motion/motion_mask", frames, {height, width}, RecordType::kUInt8),
        open("motion/static_mask", frames, {height, width}, RecordType::kUInt8),
        open("motion/disparity", targets, {height, width}, RecordType::kFloat32),
        open("motion/flow", targets, {flows, height, width, 2}, RecordType::kFloat32),
        open("motion/flow_valid", targets, {flows, height, width}, RecordType::kUInt8)});
  }
}

ShardReader::~ShardReader() {
  const h5::LibraryGuard guard(h5::library_lock());
  state_.reset();
}
ShardReader::ShardReader(ShardReader&&) noexcept = default;
ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  const h5::LibraryGuard guard(h5::library_lock());
  state_ = std::move(other.state_);
  return *this;
}

const std::string& ShardReader::path() const {
  return state_->file.path();
}
int ShardReader::shard_index() const {
  return state_->shard_index;
}
int ShardReader::n_shards() const {
  return state_->n_shards;
}
int ShardReader::width() const {
  return state_->width;
}
int ShardReader::height() const {
  return state_->height;
}
int ShardReader::n_frames() const {
  return int(state_->views.size());
}
int ShardReader::n_targets() const {
  return int(state_->target_frames.size());
}
const std::string& ShardReader::prep_command() const {
  return state_->prep_command;
}
const View& ShardReader::frame(int f) const {
  return state_->views.at(size_t(f));
}
int ShardReader::frame_view(int f) const {
  return state_->frame_view.at(size_t(f));
}
int ShardReader::target_frame(int t) const {
  return state_->target_frames.at(size_t(t));
}
const std::vector<int>& ShardReader::target_sources(int t) const {
  return state_->target_sources.at(size_t(t));
}
bool ShardReader::has_motion() const {
  return state_->motion != nullptr;
}
const std::vector<int>& ShardReader::skeleton() const {
  return state_->skeleton.skeleton;
}
const std::vector<std::string>& ShardReader::joint_names() const {
  return state_->skeleton.joint_names;
}

void ShardReader::read_frame_masks(int f, uint8_t* motion_mask, uint8_t* static_mask) const {
  if (!has_motion()) state_->file.fail("has no motion masks (not a dynamic scene's shard)");
  if (f < 0 || f >= n_frames()) state_->file.fail("frame " + std::to_string(f) + " out of range");
  const h5::LibraryGuard guard(h5::library_lock());
  state_->motion->motion_mask.read(hsize_t(f), motion_mask);
  state_->motion->static_mask.read(hsize_t(f), static_mask);
}

void ShardReader::read_target_motion(int t, FrameMotion* motion) const {
  if (!has_motion()) state_->file.fail("has no flows or masks (not a dynamic scene's shard)");
  if (t < 0 || t >= n_targets()) state_->file.fail("target " + std::to_string(t) + " out of range");
  const size_t pixels = size_t(width()) * size_t(height());
  motion->disparity.resize(pixels);
  motion->motion_mask.resize(pixels);
  motion->static_mask.resize(pixels);
  motion->flow.resize(kFlowCount * pixels * 2);
  motion->flow_valid.resize(kFlowCount * pixels);
  read_frame_masks(target_frame(t), motion->motion_mask.data(), motion->static_mask.data());
  const h5::LibraryGuard guard(h5::library_lock());
  state_->motion->disparity.read(hsize_t(t), motion->disparity.data());
  state_->motion->flow.read(hsize_t(t), motion->flow.data());
  state_->motion->flow_valid.read(hsize_t(t), motion->flow_valid.data());
}

void ShardReader::read_frame(int f, uint8_t* rgb) const {
  if (f < 0 || f >= n_frames()) state_->file.fail("frame " + std::to_string(f) + " out of range");
  const h5::LibraryGuard guard(h5::library_lock());
  state_->frames->read(hsize_t(f), rgb);
}

}  // namespace mvibr::data
