// Reading any view of a prepared data set by its global index (see ViewLookup in shards.h).
#include <filesystem>
#include <map>
#include <utility>

#include "mvibr/core/error.h"
#include "mvibr/data/shards.h"

namespace mvibr::data {

namespace fs = std::filesystem;

struct ViewLookup::State {
  SceneIndex index;
  std::vector<ShardReader> shards;
  std::map<int, std::pair<size_t, int>> where;  // global view -> (shard, frame)
};

ViewLookup::ViewLookup(const std::string& data_dir) : state_(std::make_unique<State>()) {
  state_->index = read_scene_index(data_dir);
  const int n = state_->index.n_shards;
  for (int s = 0; s < n; ++s) {
    const fs::path path = fs::path(data_dir) / shard_file_name(s, n);
    state_->shards.emplace_back(path.string());
    const ShardReader& shard = state_->shards.back();
    if (shard.shard_index() != s || shard.n_shards() != n) {
      throw InvalidArgument(path.string() + ": is shard " + std::to_string(shard.shard_index()) +
                            " of " + std::to_string(shard.n_shards()) + ", not of this data set");
    }
    for (int f = 0; f < shard.n_frames(); ++f) {
      state_->where.emplace(shard.frame_view(f), std::make_pair(size_t(s), f));
    }
  }
}

ViewLookup::~ViewLookup() = default;

const SceneIndex& ViewLookup::index() const {
  return state_->index;
}

View ViewLookup::view(int global_view) const {
  const auto found = state_->where.find(global_view);
  if (found == state_->where.end()) {
    throw InvalidArgument("view " + std::to_string(global_view) +
                          " is in no shard of the data set (" +
                          std::to_string(state_->index.scene.views.size()) + " views)");
  }
  const ShardReader& shard = state_->shards[found->second.first];
  View view = shard.frame(found->second.second);
  const size_t pixels = size_t(shard.width()) * shard.height();
  view.rgb.resize(pixels * 3);
  shard.read_frame(found->second.second, view.rgb.data());
  if (shard.has_motion()) {
    view.motion.motion_mask.resize(pixels);
    view.motion.static_mask.resize(pixels);
    shard.read_frame_masks(found->second.second, view.motion.motion_mask.data(),
                           view.motion.static_mask.data());
  }
  return view;
}

}  // namespace mvibr::data
