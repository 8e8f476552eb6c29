// Checkpoints in HDF5 (see checkpoint.h): written whole under a temporary name and renamed into
// place; read back only after every name and shape has been checked against the model, and
// committed only after every value has been read and found finite.
#include "mvibr/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>

#include "mvibr/build_info.h"
#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/hdf5/hdf5_file.h"

namespace mvibr::train {

using nn::Adam;
using nn::AdamOptions;
using nn::ParameterGroup;
using nn::ParameterInfo;
using nn::ParameterSet;

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "mvibr-checkpoint";
// The trees that hold one dataset per parameter, in the order of Buffers.
constexpr const char* kTrees[3] = {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"};
// More ranks than this in a file is corruption, not a cluster.
constexpr hsize_t kMaxRanks = hsize_t(1) << 20;

void check_format(const h5::File& file) {
  const std::string format = file.string_attribute("format");
  if (format != kFormat) file.fail("not an mvibr checkpoint (format '" + format + "')");
  const long long version = file.integer_attribute("format_version");
  if (version != kCheckpointFormatVersion) {
    file.fail("checkpoint format version " + std::to_string(version) + ", this build reads " +
              std::to_string(kCheckpointFormatVersion));
  }
}

std::string dataset_name(int tree, const ParameterInfo& info) {
  return std::string(kTrees[tree]) + "/" + info.name;
}

// The step of a checkpoint file name "ckpt-<digits>.h5"; false for anything else (temporaries
// end in ".tmp-<pid>").
bool parse_checkpoint_name(const std::string& name, uint64_t* step) {
  const std::string prefix = "ckpt-", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  if (digits.size() > 19 || !std::all_of(digits.begin(), digits.end(), is_digit)) return false;
  *step = std::stoull(digits);
  return true;
}

// The complete checkpoints of a run, oldest first.
std::vector<std::pair<uint64_t, fs::path>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<uint64_t, fs::path>> found;
  std::error_code error;
  for (fs::directory_iterator it(fs::path(run_dir) / "checkpoints", error), end;
       !error && it != end; it.increment(error)) {
    uint64_t step = 0;
    if (it->is_regular_file(error) &&
        parse_checkpoint_name(it->path().filename().string(), &step)) {
      found.emplace_back(step, it->path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

void write_checkpoint_file(const std::string& temporary, const std::string& path,
                           const ParameterSet& params, const Adam& adam,
                           const TrainingState& state) {
  h5::File file = h5::File::create(temporary);
  file.set_attribute("format", std::string(kFormat));
  file.set_attribute("format_version", kCheckpointFormatVersion);
  file.set_attribute("step", adam.steps());
  file.set_attribute("mvibr_version", std::string(MVIBR_VERSION " (" MVIBR_GIT_REVISION ")"));
  file.set_attribute("config", state.config);
  file.set_attribute("random_seed", state.random_seed);
  file.set_attribute("lr_feature", adam.learning_rate(ParameterGroup::kFeature));
  file.set_attribute("lr_mlp", adam.learning_rate(ParameterGroup::kMlp));
  for (const char* group : {"model", "optimizer", kTrees[1], kTrees[2]}) file.create_group(group);

  const float* buffers[3] = {params.values().data(), adam.exp_avg().data(),
                             adam.exp_avg_sq().data()};
  for (const ParameterInfo& info : params.infos()) {
    const std::vector<hsize_t> shape(info.shape.begin(), info.shape.end());
    for (int tree = 0; tree < 3; ++tree) {
      const float* data = buffers[tree] + info.offset;
      const float* bad =
          std::find_if(data, data + info.size, [](float x) { return !std::isfinite(x); });
      // A diverged run must not replace a good checkpoint with one that cannot be loaded.
      if (bad != data + info.size) {
        throw InvalidArgument(path + ": '" + dataset_name(tree, info) +
                              "' holds a non-finite value (" + std::to_string(*bad) + " at " +
                              std::to_string(bad - data) + "); checkpoint not written");
      }
      file.write(dataset_name(tree, info), shape, data);
    }
  }
  std::vector<uint64_t> cursors;
  for (const data::ReaderCursor& c : state.cursors) {
    cursors.push_back(c.epoch);
    cursors.push_back(c.position);
  }
  file.write("data_cursors", {hsize_t(state.cursors.size()), 2}, cursors.data());
  // Each parameter group's own update count (DynIBaR's dynamic parts skip its bootstrap).
  const std::array<uint64_t, nn::kParameterGroupCount>& group_steps = adam.group_steps();
  file.write("optimizer_group_steps", {hsize_t(group_steps.size())}, group_steps.data());
  file.flush();
}

}  // namespace

bool is_checkpoint_temporary(const std::string& file_name) {
  const std::string marker = ".tmp-";
  const size_t at = file_name.rfind(marker);
  uint64_t step = 0;
  if (at == std::string::npos || !parse_checkpoint_name(file_name.substr(0, at), &step)) {
    return false;
  }
  const std::string pid = file_name.substr(at + marker.size());
  return !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos;
}

std::string checkpoint_path(const std::string& run_dir, uint64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "ckpt-%08llu.h5", static_cast<unsigned long long>(step));
  return (fs::path(run_dir) / "checkpoints" / name).string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  const auto all = list_checkpoints(run_dir);
  return all.empty() ? std::string() : all.back().second.string();
}

std::string save_checkpoint(const std::string& run_dir, const ParameterSet& params,
                            const Adam& adam, const TrainingState& state, int keep_last) {
  if (adam.exp_avg().size() != params.size()) {
    throw InvalidArgument("save_checkpoint: the optimiser was built for other parameters");
  }
  if (state.cursors.empty()) {
    throw InvalidArgument("save_checkpoint: no data cursors (one per rank is needed)");
  }
  if (keep_last < 0) throw InvalidArgument("save_checkpoint: keep_last must be >= 0 (0 = all)");

  const h5::LibraryGuard guard(h5::library_lock());
  const std::string path = checkpoint_path(run_dir, adam.steps());
  const std::string folder = fs::path(path).parent_path().string();
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) throw RuntimeFailure(folder + ": cannot create the folder: " + error.message());

  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_checkpoint_file(temporary, path, params, adam, state);  // closed on return
    sync_to_disk(temporary);
    fs::rename(temporary, path, error);
    if (error) throw RuntimeFailure(path + ": cannot rename into place: " + error.message());
  } catch (...) {
    fs::remove(temporary, error);
    throw;
  }
  sync_to_disk(folder);

  // Pruning is housekeeping: a file that cannot be removed stays, the new checkpoint is safe.
  if (keep_last > 0) {
    const auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) {
      if (all[i].first != adam.steps()) fs::remove(all[i].second, error);
    }
  }
  return path;
}

void load_checkpoint(const std::string& path, ParameterSet* params, Adam* adam,
                     TrainingState* state) {
  if (adam->exp_avg().size() != params->size()) {
    throw InvalidArgument(path + ": the optimiser was built for other parameters");
  }
  const h5::LibraryGuard guard(h5::library_lock());
  const h5::File file = h5::File::open_read_only(path);
  check_format(file);
  const uint64_t step = file.unsigned_attribute("step");
  TrainingState loaded;
  loaded.config = file.string_attribute("config");
  loaded.random_seed = file.unsigned_attribute("random_seed");
  for (const char* name : {"lr_feature", "lr_mlp"}) {
    const double lr = file.double_attribute(name);
    if (!std::isfinite(lr) || lr < 0) file.fail("attribute '" + std::string(name) + "' is invalid");
  }

  // Exactly this model's parameters, each with its shape, before any value is read.
  std::set<std::string> expected;
  for (const ParameterInfo& info : params->infos()) expected.insert(info.name);
  std::vector<std::vector<long long>> shapes;
  for (const ParameterInfo& info : params->infos()) {
    shapes.emplace_back(info.shape.begin(), info.shape.end());
  }
  for (int tree = 0; tree < 3; ++tree) {
    for (const std::string& member : file.members(kTrees[tree])) {
      if (!expected.count(member)) {
        file.fail("unknown parameter '" + std::string(kTrees[tree]) + "/" + member +
                  "' (the model has no parameter of that name)");
      }
    }
    for (size_t p = 0; p < params->infos().size(); ++p) {
      const std::string name = dataset_name(tree, params->infos()[p]);
      if (!file.has(name)) file.fail("missing parameter '" + name + "'");
      file.shape(name, shapes[p]);
    }
  }
  const hsize_t ranks = file.shape("data_cursors", {-1, 2})[0];
  if (ranks > kMaxRanks) {
    file.fail("data_cursors has " + std::to_string(ranks) + " ranks");
  }

  std::vector<float> buffers[3];
  for (int tree = 0; tree < 3; ++tree) {
    buffers[tree].resize(params->size());
    for (size_t p = 0; p < params->infos().size(); ++p) {
      const ParameterInfo& info = params->infos()[p];
      const std::string name = dataset_name(tree, info);
      const std::vector<float> values = file.read_floats(name, shapes[p]);
      for (size_t i = 0; i < values.size(); ++i) {
        // exp_avg_sq < 0 would make Adam's sqrt a NaN.
        if (!std::isfinite(values[i]) || (tree == 2 && values[i] < 0)) {
          file.fail("'" + name + "' holds an invalid value (" + std::to_string(values[i]) + " at " +
                    std::to_string(i) + ")");
        }
      }
      std::copy(values.begin(), values.end(), buffers[tree].begin() + std::ptrdiff_t(info.offset));
    }
  }
  if (ranks > 0) {  // none: weights alone, e.g. imported from IBRNet
    const std::vector<uint64_t> cursors = file.read_uint64s("data_cursors", {(long long)ranks, 2});
    for (hsize_t r = 0; r < ranks; ++r) {
      loaded.cursors.push_back({cursors[2 * r], cursors[2 * r + 1]});
    }
  }

  // Each group's update count; a checkpoint from before the counts had every group in every
  // update. One from before kFusion holds the five groups before it, and its fusion weights
  // (if any) were kMlp's: they took kMlp's updates.
  std::array<uint64_t, nn::kParameterGroupCount> group_steps;
  group_steps.fill(step);
  if (file.has("optimizer_group_steps")) {
    constexpr long long kBeforeFusion = int(nn::ParameterGroup::kFusion);
    const long long stored = (long long)file.shape("optimizer_group_steps", {-1})[0];
    if (stored != nn::kParameterGroupCount && stored != kBeforeFusion) {
      file.fail("optimizer_group_steps has " + std::to_string(stored) + " groups, expected " +
                std::to_string(nn::kParameterGroupCount) + " (or " + std::to_string(kBeforeFusion) +
                " from before the fusion group)");
    }
    const std::vector<uint64_t> read = file.read_uint64s("optimizer_group_steps", {stored});
    for (size_t g = 0; g < read.size(); ++g) {
      if (read[g] > step) file.fail("optimizer_group_steps exceeds the step");
      group_steps[g] = read[g];
    }
    if (stored == kBeforeFusion) {
      group_steps[size_t(nn::ParameterGroup::kFusion)] = read[size_t(nn::ParameterGroup::kMlp)];
    }
  }
  params->values() = std::move(buffers[0]);
  adam->restore(step, std::move(buffers[1]), std::move(buffers[2]), group_steps);
  *state = std::move(loaded);
}

uint64_t load_weights(const std::string& path, ParameterSet* params) {
  Adam adam(*params, AdamOptions{});
  TrainingState state;
  load_checkpoint(path, params, &adam, &state);
  return adam.steps();
}

CheckpointSummary inspect_checkpoint(const std::string& path) {
  const h5::LibraryGuard guard(h5::library_lock());
  const h5::File file = h5::File::open_read_only(path);
  check_format(file);
  CheckpointSummary summary;
  summary.step = file.unsigned_attribute("step");
  summary.mvibr_version = file.string_attribute("mvibr_version");
  summary.config = file.string_attribute("config");
  summary.random_seed = file.unsigned_attribute("random_seed");
  summary.lr_feature = file.double_attribute("lr_feature");
  summary.lr_mlp = file.double_attribute("lr_mlp");
  for (const double lr : {summary.lr_feature, summary.lr_mlp}) {
    if (!std::isfinite(lr) || lr < 0) file.fail("a learning-rate attribute is invalid");
  }
  summary.ranks = file.shape("data_cursors", {-1, 2})[0];
  if (summary.ranks > kMaxRanks) {
    file.fail("data_cursors has " + std::to_string(summary.ranks) + " ranks");
  }
  // More values than this in one tensor is corruption, not a network.
  constexpr size_t kMaxValues = size_t(1) << 31;
  for (const std::string& name : file.members(kTrees[0])) {
    CheckpointSummary::Tensor tensor{name, {}, 1};
    const std::vector<hsize_t> dims = file.shape(
        std::string(kTrees[0]) + "/" + name,
        std::vector<long long>(size_t(file.rank(std::string(kTrees[0]) + "/" + name)), -1));
    std::vector<long long> expected;
    for (hsize_t d : dims) {
      tensor.shape.push_back(size_t(d));
      expected.push_back((long long)d);
      tensor.count *= size_t(d);
      if (tensor.count > kMaxValues) file.fail("'model/" + name + "' is implausibly large");
    }
    for (int tree = 0; tree < 3; ++tree) {
      const std::string dataset = std::string(kTrees[tree]) + "/" + name;
      for (float value : file.read_floats(dataset, expected)) {
        if (!std::isfinite(value) || (tree == 2 && value < 0)) {
          file.fail("'" + dataset + "' holds an invalid value (" + std::to_string(value) + ")");
        }
      }
    }
    summary.parameters.push_back(std::move(tensor));
  }
  if (summary.parameters.empty()) file.fail("holds no parameters");
  for (int tree = 1; tree < 3; ++tree) {
    if (file.members(kTrees[tree]).size() != summary.parameters.size()) {
      file.fail(std::string(kTrees[tree]) + " holds other tensors than model");
    }
  }
  return summary;
}

}  // namespace mvibr::train
