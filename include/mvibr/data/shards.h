// The prepared data set on disk: scene.h5 (cameras, splits, neighbours, metadata of every view)
// and shard-KKKKK-of-NNNNN.h5 files. A shard is self-contained: its target frames plus every
// source frame they need, with their cameras, so a rank opens only its own shards. Frames are
// uint8 [H,W,3], one per HDF5 chunk with a Fletcher32 checksum; cameras are float64. Dynamic
// scenes' shards add the masks of every frame and the flows and disparities of every target; pose
// data sets' add every frame's PoseLabels and the skeleton. Every
// file carries a format version and the prep command line; readers check shapes, ranges and the
// version before they allocate. The layout is documented in datasets/README.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"

namespace mvibr::data {

constexpr int kDataFormatVersion = 1;
// Limits a reader enforces before it allocates from a header.
constexpr long long kMaxImageSide = 32768;
constexpr long long kMaxViews = 10'000'000;
constexpr long long kMaxNeighbours = 1024;
constexpr long long kMaxJoints = 1024;

std::string shard_file_name(int index, int count);  // "shard-00003-of-00016.h5"

struct PrepOptions {
  int n_shards = 1;
  int gzip_level = 0;        // 0: uncompressed (fastest to read); 1..9: gzip
  std::string command_line;  // stored as an attribute of every file
};

struct PrepReport {
  int n_views = 0;
  int n_shards = 0;
  long long frames_written = 0;   // over all shards
  double duplication_factor = 0;  // frames_written / views
  std::vector<std::string> files;
};

// Writes scene.h5 and the shards into out_dir (created if needed). Each file is written under a
// temporary name, flushed, fsynced and renamed; scene.h5 comes last, so a folder with scene.h5
// is complete, and an interrupted prep leaves nothing that looks finished. Shards of an earlier
// prep with another shard count are removed. The scene must have neighbours.
PrepReport write_prepared_scene(const Scene& scene, const std::string& out_dir,
                                const PrepOptions& options);

// What scene.h5 holds: the scene without pixels (View::rgb empty), and the shard of each view.
struct SceneIndex {
  Scene scene;
  int n_shards = 0;
  int format_version = 0;
  std::string prep_command, mvibr_version;
  std::vector<int> shard_of_view;
};

// "mvibr-scene", "mvibr-shard" or "mvibr-checkpoint" (the file's format attribute); throws
// InvalidArgument naming the file when it is none of them or unreadable.
std::string data_file_kind(const std::string& path);

// Reads and validates scene.h5 (a path to the file or to the folder holding it).
SceneIndex read_scene_index(const std::string& path);

// One shard, opened and validated without reading pixels.
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);
  ~ShardReader();
  ShardReader(ShardReader&&) noexcept;
  ShardReader& operator=(ShardReader&&) noexcept;

  const std::string& path() const;
  int shard_index() const;
  int n_shards() const;
  int width() const;
  int height() const;
  int n_frames() const;
  int n_targets() const;
  const std::string& prep_command() const;
  // Frame metadata (View::rgb empty) and the global view index of a frame.
  const View& frame(int frame) const;
  int frame_view(int frame) const;
  // Target t: its frame, and its source frames best first (local frame indices).
  int target_frame(int t) const;
  const std::vector<int>& target_sources(int t) const;
  // Reads frame pixels (height * width * 3 bytes), verifying the chunk checksum.
  void read_frame(int frame, uint8_t* rgb) const;
  // Dynamic scenes with flows and masks (scene.h's FrameMotion; write_prepared_scene stores
  // them when the scene's views have them): every frame's two masks (height * width bytes each),
  // and a target's whole FrameMotion (its frame's masks, its disparity and flows). Both fail,
  // naming the file, on a shard without them.
  bool has_motion() const;
  // Pose data sets: the skeleton (parents, names; empty without one). Every frame's PoseLabels
  // are in frame(f).pose.
  const std::vector<int>& skeleton() const;
  const std::vector<std::string>& joint_names() const;
  void read_frame_masks(int frame, uint8_t* motion_mask, uint8_t* static_mask) const;
  void read_target_motion(int target, FrameMotion* motion) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Any view of a prepared data set, pixels included, by its global index: what renders cameras
// the data set has no target for (camera paths), whose sources can be any training views. Opens
// every shard (headers only) on construction; a view is read from a shard that holds it.
class ViewLookup {
 public:
  explicit ViewLookup(const std::string& data_dir);
  ~ViewLookup();
  ViewLookup(const ViewLookup&) = delete;
  ViewLookup& operator=(const ViewLookup&) = delete;

  const SceneIndex& index() const;
  // The view with its pixels, and its motion and static masks where the shards have motion.
  // Throws InvalidArgument for an index out of range or a view no shard holds.
  View view(int global_view) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::data
