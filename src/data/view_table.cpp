// The views table shared by scene.h5 and the shards (see view_table.h).
#include "view_table.h"

#include <cmath>

#include "mvibr/build_info.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {

void write_view_table(h5::File& file, const std::vector<const View*>& views) {
  const hsize_t n = views.size();
  std::vector<double> intrinsics, c2w, near_far, time;
  std::vector<int> time_index;
  std::vector<signed char> split, target;
  std::vector<std::string> names;
  for (const View* v : views) {
    const PinholeCamera<double>& c = v->camera;
    intrinsics.insert(intrinsics.end(), {c.fx, c.fy, c.cx, c.cy});
    c2w.insert(c2w.end(), c.c2w, c.c2w + 12);
    near_far.insert(near_far.end(), {v->near_depth, v->far_depth});
    time.push_back(v->time);
    time_index.push_back(v->time_index);
    split.push_back(static_cast<signed char>(v->split));
    target.push_back(v->target ? 1 : 0);
    names.push_back(v->name);
  }
  file.create_group("views");
  file.write("views/intrinsics", {n, 4}, intrinsics.data());
  file.write("views/c2w", {n, 3, 4}, c2w.data());
  file.write("views/near_far", {n, 2}, near_far.data());
  file.write("views/time", {n}, time.data());
  file.write("views/time_index", {n}, time_index.data());
  file.write("views/split", {n}, split.data());
  file.write("views/target", {n}, target.data());
  file.write_strings("views/name", names);
}

std::vector<View> read_view_table(const h5::File& file, long long n, int width, int height) {
  const auto intrinsics = file.read_doubles("views/intrinsics", {n, 4});
  const auto c2w = file.read_doubles("views/c2w", {n, 3, 4});
  const auto near_far = file.read_doubles("views/near_far", {n, 2});
  const auto time = file.read_doubles("views/time", {n});
  const auto time_index = file.read_ints("views/time_index", {n});
  const auto split = file.read_bytes("views/split", {n});
  const auto names = file.read_strings("views/name", n);
  // Data prepared before views/target existed has every view a target.
  const auto target = file.has("views/target") ? file.read_bytes("views/target", {n})
                                               : std::vector<signed char>(size_t(n), 1);
  std::vector<View> views(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    View& v = views[i];
    v.name = names[i];
    PinholeCamera<double>& c = v.camera;
    c.fx = intrinsics[4 * i];
    c.fy = intrinsics[4 * i + 1];
    c.cx = intrinsics[4 * i + 2];
    c.cy = intrinsics[4 * i + 3];
    for (int k = 0; k < 12; ++k) c.c2w[k] = c2w[12 * i + k];
    c.width = width;
    c.height = height;
    const std::string where = "view " + std::to_string(i) + " (" + v.name + "): ";
    const std::string pose = check_rigid_pose(c.c2w);
    if (!pose.empty()) file.fail(where + pose);
    set_world_to_camera(&c);
    if (!(c.fx > 0) || !(c.fy > 0) || !std::isfinite(c.fx) || !std::isfinite(c.fy) ||
        !std::isfinite(c.cx) || !std::isfinite(c.cy)) {
      file.fail(where + "intrinsics must be finite with positive focal lengths");
    }
    v.near_depth = near_far[2 * i];
    v.far_depth = near_far[2 * i + 1];
    if (!(v.near_depth > 0) || !(v.near_depth < v.far_depth) || !std::isfinite(v.far_depth)) {
      file.fail(where + "needs 0 < near < far, got near=" + std::to_string(v.near_depth) +
                " far=" + std::to_string(v.far_depth));
    }
    v.time = time[i];
    v.time_index = time_index[i];
    if (!std::isfinite(v.time) || v.time_index < 0) file.fail(where + "bad time stamp");
    if (split[i] < 0 || split[i] > 2)
      file.fail(where + "unknown split " + std::to_string(split[i]));
    v.split = static_cast<Split>(split[i]);
    if (target[i] != 0 && target[i] != 1) file.fail(where + "views/target must be 0 or 1");
    v.target = target[i] == 1;
  }
  return views;
}

void write_skeleton(h5::File& file, const Scene& scene) {
  if (scene.skeleton.empty()) return;
  file.create_group("skeleton");
  file.write("skeleton/parents", {hsize_t(scene.skeleton.size())}, scene.skeleton.data());
  file.write_strings("skeleton/names", scene.joint_names);
}

void read_skeleton(const h5::File& file, Scene* scene) {
  scene->skeleton.clear();
  scene->joint_names.clear();
  if (!file.has("skeleton")) return;
  const std::vector<hsize_t> shape = file.shape("skeleton/parents", {-1});
  if (shape[0] < 1 || (long long)shape[0] > kMaxJoints) {
    file.fail("skeleton/parents has " + std::to_string(shape[0]) + " joints, outside [1, " +
              std::to_string(kMaxJoints) + "]");
  }
  const long long joints = (long long)shape[0];
  scene->skeleton = file.read_ints("skeleton/parents", {joints});
  scene->joint_names = file.read_strings("skeleton/names", joints);
  for (long long j = 0; j < joints; ++j) {
    const int parent = scene->skeleton[size_t(j)];
    if (j == 0 ? parent != -1 : (parent < 0 || parent >= j)) {
      file.fail("skeleton joint " + std::to_string(j) + " has parent " + std::to_string(parent) +
                " (the root is joint 0; parents come first)");
    }
  }
}

std::vector<int> pad_neighbours(const std::vector<std::vector<int>>& lists, int* width) {
  size_t k = 1;
  for (const auto& list : lists) k = std::max(k, list.size());
  *width = int(k);
  std::vector<int> table(lists.size() * k, -1);
  for (size_t i = 0; i < lists.size(); ++i) {
    for (size_t j = 0; j < lists[i].size(); ++j) table[i * k + j] = lists[i][j];
  }
  return table;
}

std::vector<std::vector<int>> unpad_neighbours(const h5::File& file, const std::string& name,
                                               const std::vector<int>& table, long long rows,
                                               long long width, long long index_limit) {
  std::vector<std::vector<int>> lists(static_cast<size_t>(rows));
  for (long long i = 0; i < rows; ++i) {
    for (long long j = 0; j < width; ++j) {
      const int n = table[size_t(i * width + j)];
      if (n == -1) continue;
      if (n < 0 || n >= index_limit) {
        file.fail(name + " row " + std::to_string(i) + " holds index " + std::to_string(n) +
                  ", outside [0, " + std::to_string(index_limit) + ")");
      }
      lists[size_t(i)].push_back(n);
    }
  }
  return lists;
}

void write_common_attributes(h5::File& file, const std::string& kind, const Scene& scene,
                             const std::string& command_line) {
  file.set_attribute("format", kind);
  file.set_attribute("format_version", (long long)kDataFormatVersion);
  file.set_attribute("mvibr_version", std::string(MVIBR_VERSION " (" MVIBR_GIT_REVISION ")"));
  file.set_attribute("prep_command", command_line);
  file.set_attribute("name", scene.name);
  file.set_attribute("source_format", scene.source_format);
  if (!scene.depth_bounds_from.empty()) {
    file.set_attribute("depth_bounds_from", scene.depth_bounds_from);
  }
  file.set_attribute("dynamic", (long long)(scene.dynamic ? 1 : 0));
  file.set_attribute("width", (long long)scene.views.at(0).camera.width);
  file.set_attribute("height", (long long)scene.views.at(0).camera.height);
}

int check_format(const h5::File& file, const std::string& kind) {
  const std::string format = file.string_attribute("format");
  if (format != kind) file.fail("is a '" + format + "' file, expected '" + kind + "'");
  const long long version = file.integer_attribute("format_version");
  if (version != kDataFormatVersion) {
    file.fail("format version " + std::to_string(version) + " is not supported (this mvibr reads " +
              std::to_string(kDataFormatVersion) + "); run mvibr prep again");
  }
  return int(version);
}

long long bounded_attribute(const h5::File& file, const std::string& name, long long lo,
                            long long hi) {
  const long long value = file.integer_attribute(name);
  if (value < lo || value > hi) {
    file.fail("attribute '" + name + "' = " + std::to_string(value) + " is outside [" +
              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

}  // namespace mvibr::data
