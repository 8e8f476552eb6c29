// Checkpoints: a round trip is bit-exact and training continues identically; files appear only
// when complete, a failed write leaves the previous file as it was, only the newest K are kept;
// damaged or mismatched files fail with one line naming the file and the parameter; h5py reads
// the parameters by their PyTorch names.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/synthetic/random_scene.h"
#include "mvibr/train/checkpoint.h"
#include "npy.h"

namespace mvibr::train {
namespace {

using namespace nn;  // the parameters and Adam that checkpoints hold

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    static int count = 0;
    path = fs::temp_directory_path() /
           ("mvibr-checkpoint-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

struct Entry {
  std::string name;
  std::vector<int> shape;
  ParameterGroup group;
};

// A few of IBRNet's parameters under their PyTorch module paths.
std::vector<Entry> ibrnet_like() {
  return {{"feature_net.conv1.weight", {16, 3, 7, 7}, ParameterGroup::kFeature},
          {"feature_net.bn1.weight", {16}, ParameterGroup::kFeature},
          {"net_coarse.base_fc.0.weight", {64, 105}, ParameterGroup::kMlp},
          {"net_coarse.base_fc.0.bias", {64}, ParameterGroup::kMlp},
          {"net_coarse.out_geometry_fc.0.weight", {16, 32}, ParameterGroup::kMlp}};
}

ParameterSet make_model(const std::vector<Entry>& layout, uint64_t seed) {
  ParameterSet params;
  for (const Entry& e : layout) params.add(e.name, e.shape, e.group);
  const std::vector<double> values = synthetic::random_values(params.size(), -1, 1, seed);
  std::copy(values.begin(), values.end(), params.values().begin());
  return params;
}

void train(ParameterSet* params, Adam* adam, int steps, uint64_t seed) {
  for (int s = 0; s < steps; ++s) {
    const std::vector<double> g =
        synthetic::random_values(params->size(), -1, 1, seed + uint64_t(s));
    std::copy(g.begin(), g.end(), params->grads().begin());
    adam->step(params);
  }
}

TrainingState training_state() {
  TrainingState state;
  state.config = "expname = lego\n# comment with UTF-8: \xc3\xa9\xe2\x86\x92\nlrate_mlp = 5e-4\n";
  state.cursors = {{3, 17}, {(uint64_t(1) << 40) + 5, 0}, {0, 123456789012345ull}};
  state.random_seed = 0xFEDCBA9876543210ull;  // above 2^63: stored unsigned
  return state;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

// The IBRNet-like model and its optimizer after 3 steps.
struct TrainedModel {
  ParameterSet params = make_model(ibrnet_like(), 1);
  Adam adam{params, AdamOptions()};

  TrainedModel() { train(&params, &adam, 3, 10); }

  // Its checkpoint at `run_dir`.
  std::string save(const fs::path& run_dir) const {
    return save_checkpoint(run_dir.string(), params, adam, training_state(), 0);
  }
};

// The error of loading `path` into a fresh model of `layout` (empty when it loads).
std::string load_error(const std::string& path, const std::vector<Entry>& layout) {
  ParameterSet params = make_model(layout, 2);
  const std::vector<float> before = params.values();
  Adam adam(params, AdamOptions());
  TrainingState state;
  try {
    load_checkpoint(path, &params, &adam, &state);
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(bit_identical(params.values(), before)) << "a failed load modified the model";
    EXPECT_EQ(adam.steps(), 0u);
    return e.what();
  }
  return "";
}

void expect_error(const std::string& message, const std::string& path,
                  const std::string& fragment) {
  ASSERT_FALSE(message.empty()) << "loaded without error; expected: " << fragment;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

// Opens a checkpoint read-write with HDF5 itself, to damage it.
template <typename Edit>
void edit_file(const std::string& path, Edit edit) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  edit(file);
  H5Fclose(file);
}

TEST(Checkpoint, PathsAndLatestIgnoreTemporariesAndOtherFiles) {
  EXPECT_EQ(checkpoint_path("/runs/lego", 1000), "/runs/lego/checkpoints/ckpt-00001000.h5");
  EXPECT_EQ(checkpoint_path("/runs/lego", 123456789), "/runs/lego/checkpoints/ckpt-123456789.h5");
  TempDir dir;
  EXPECT_EQ(latest_checkpoint(dir.path.string()), "");
  const fs::path folder = dir.path / "checkpoints";
  fs::create_directories(folder / "ckpt-300000000.h5");  // a folder, not a checkpoint
  for (const char* name :
       {"ckpt-00000999.h5", "ckpt-00001000.h5", "ckpt-99999999.h5", "ckpt-100000000.h5",
        "ckpt-200000000.h5.tmp-123", "ckpt-x.h5", "notes.txt"}) {
    std::ofstream(folder / name) << "x";
  }
  // Numerically, not by name: 100000000 has one digit more than the padding.
  EXPECT_EQ(latest_checkpoint(dir.path.string()), (folder / "ckpt-100000000.h5").string());
}

TEST(Checkpoint, RoundTripIsBitExactAndTrainingContinuesIdentically) {
  TempDir dir;
  ParameterSet params = make_model(ibrnet_like(), 1);
  AdamOptions options;
  options.lrate_decay_steps = 2;
  Adam adam(params, options);
  train(&params, &adam, 5, 10);
  TrainingState state = training_state();
  state.config += std::string(100000, 'c');  // beyond HDF5's 64 KiB compact attributes
  const std::string path = save_checkpoint(dir.path.string(), params, adam, state, 0);
  EXPECT_EQ(path, checkpoint_path(dir.path.string(), 5));

  ParameterSet loaded = make_model(ibrnet_like(), 99);
  Adam loaded_adam(loaded, options);
  TrainingState loaded_state;
  load_checkpoint(path, &loaded, &loaded_adam, &loaded_state);
  EXPECT_TRUE(bit_identical(loaded.values(), params.values()));
  EXPECT_TRUE(bit_identical(loaded_adam.exp_avg(), adam.exp_avg()));
  EXPECT_TRUE(bit_identical(loaded_adam.exp_avg_sq(), adam.exp_avg_sq()));
  EXPECT_EQ(loaded_adam.steps(), 5u);
  EXPECT_EQ(loaded_state.config, state.config);
  EXPECT_EQ(loaded_state.cursors, state.cursors);
  EXPECT_EQ(loaded_state.random_seed, state.random_seed);
  EXPECT_EQ(loaded_adam.learning_rate(ParameterGroup::kMlp),
            adam.learning_rate(ParameterGroup::kMlp));

  train(&params, &adam, 2, 50);
  train(&loaded, &loaded_adam, 2, 50);
  EXPECT_TRUE(bit_identical(loaded.values(), params.values()));
  EXPECT_TRUE(bit_identical(loaded_adam.exp_avg_sq(), adam.exp_avg_sq()));
}

// DynIBaR's dynamic groups sit out its bootstrap: their own update counts (their bias
// corrections) come back from the checkpoint, so a resumed run's first main update is theirs too.
TEST(Checkpoint, EachGroupsUpdateCountComesBack) {
  TempDir dir;
  ParameterSet params;
  params.add("static", {2}, ParameterGroup::kStaticMlp);
  params.add("dynamic", {2}, ParameterGroup::kMlp);
  Adam adam(params, AdamOptions{});
  std::fill(params.grads().begin(), params.grads().end(), 0.5f);
  for (int i = 0; i < 3; ++i) adam.step(&params, 1.0, 1u << int(ParameterGroup::kStaticMlp));
  adam.step(&params, 1.0);
  const std::string path = save_checkpoint(dir.path.string(), params, adam, training_state(), 0);
  ParameterSet loaded = params;
  Adam loaded_adam(loaded, AdamOptions{});
  TrainingState state;
  load_checkpoint(path, &loaded, &loaded_adam, &state);
  EXPECT_EQ(loaded_adam.steps(), 4u);
  EXPECT_EQ(loaded_adam.group_steps(), adam.group_steps());
  EXPECT_EQ(loaded_adam.group_steps()[size_t(ParameterGroup::kMlp)], 1u);
  adam.step(&params, 1.0);
  loaded_adam.step(&loaded, 1.0);
  EXPECT_TRUE(bit_identical(loaded.values(), params.values()));
}

// A checkpoint from before ParameterGroup::kFusion stores five counts; its fusion weights were
// kMlp's, so kFusion resumes with kMlp's count. Any other length is an error naming the file.
TEST(Checkpoint, ACheckpointFromBeforeTheFusionGroupGivesItTheMlpCount) {
  TempDir dir;
  ParameterSet params;
  params.add("static", {2}, ParameterGroup::kStaticMlp);
  params.add("fusion", {2}, ParameterGroup::kFusion);
  Adam adam(params, AdamOptions{});
  std::fill(params.grads().begin(), params.grads().end(), 0.5f);
  for (int i = 0; i < 3; ++i) adam.step(&params, 1.0, 1u << int(ParameterGroup::kStaticMlp));
  const std::string path = save_checkpoint(dir.path.string(), params, adam, training_state(), 0);
  const auto rewrite_counts = [&](std::vector<uint64_t> counts) {
    edit_file(path, [&](hid_t file) {
      H5Ldelete(file, "optimizer_group_steps", H5P_DEFAULT);
      const hsize_t size = counts.size();
      const hid_t space = H5Screate_simple(1, &size, nullptr);
      const hid_t dataset = H5Dcreate2(file, "optimizer_group_steps", H5T_NATIVE_UINT64, space,
                                       H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(dataset, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, counts.data());
      H5Dclose(dataset);
      H5Sclose(space);
    });
  };
  rewrite_counts({3, 2, 3, 3, 3});  // kMlp took 2 of the 3 updates
  ParameterSet loaded = params;
  Adam loaded_adam(loaded, AdamOptions{});
  TrainingState state;
  load_checkpoint(path, &loaded, &loaded_adam, &state);
  const std::array<uint64_t, kParameterGroupCount> expected = {3, 2, 3, 3, 3, 2};
  EXPECT_EQ(loaded_adam.group_steps(), expected);

  rewrite_counts({3, 3, 3, 3});
  try {
    load_checkpoint(path, &loaded, &loaded_adam, &state);
    ADD_FAILURE() << "four group counts were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer_group_steps has 4 groups"), std::string::npos)
        << e.what();
  }
}

TEST(Checkpoint, AFailedWriteLeavesTheExistingFileAndNoTemporary) {
  TempDir dir;
  TrainedModel model;
  const std::string path = model.save(dir.path);
  EXPECT_EQ(files_in(dir.path / "checkpoints"), std::set<std::string>{"ckpt-00000003.h5"});
  const std::string before = file_bytes(path);

  // The same step again, diverged: the last parameter fails after the others were written.
  model.params.values().back() = NAN;
  try {
    model.save(dir.path);
    FAIL() << "a NaN parameter was saved";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("model/net_coarse.out_geometry_fc.0.weight"), std::string::npos)
        << message;
  }
  EXPECT_EQ(file_bytes(path), before);
  EXPECT_EQ(files_in(dir.path / "checkpoints"), std::set<std::string>{"ckpt-00000003.h5"});
}

TEST(Checkpoint, KeepsTheNewestKAndAlwaysTheOneJustWritten) {
  TempDir dir;
  const fs::path folder = dir.path / "checkpoints";
  fs::create_directories(folder);
  std::ofstream(folder / "ckpt-00000001.h5.tmp-999999") << "another writer's";
  ParameterSet params = make_model(ibrnet_like(), 1);
  Adam adam(params, AdamOptions());
  for (int step = 1; step <= 5; ++step) {
    train(&params, &adam, 1, uint64_t(step));
    save_checkpoint(dir.path.string(), params, adam, training_state(), 2);
  }
  EXPECT_EQ(files_in(folder), (std::set<std::string>{"ckpt-00000004.h5", "ckpt-00000005.h5",
                                                     "ckpt-00000001.h5.tmp-999999"}));
  // Resumed from an older step: the new file stays even though it is not among the newest 2.
  adam.restore(2, adam.exp_avg(), adam.exp_avg_sq());
  save_checkpoint(dir.path.string(), params, adam, training_state(), 2);
  EXPECT_EQ(files_in(folder).count("ckpt-00000002.h5"), 1u);
  EXPECT_EQ(latest_checkpoint(dir.path.string()), (folder / "ckpt-00000005.h5").string());
}

TEST(Checkpoint, DamagedFilesFailWithOneLineNamingTheFileAndTheParameter) {
  TempDir dir;
  const std::string good = TrainedModel().save(dir.path);
  ASSERT_EQ(load_error(good, ibrnet_like()), "");
  const std::string path = (dir.path / "damaged.h5").string();
  const auto damaged = [&] {
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    return path;
  };

  edit_file(damaged(), [](hid_t file) {
    const hid_t attribute = H5Aopen(file, "format_version", H5P_DEFAULT);
    const long long version = 2;
    H5Awrite(attribute, H5T_NATIVE_LLONG, &version);
    H5Aclose(attribute);
  });
  expect_error(load_error(path, ibrnet_like()), path, "format version 2");

  edit_file(damaged(),
            [](hid_t file) { H5Ldelete(file, "model/feature_net.bn1.weight", H5P_DEFAULT); });
  expect_error(load_error(path, ibrnet_like()), path,
               "missing parameter 'model/feature_net.bn1.weight'");

  edit_file(damaged(), [](hid_t file) {
    const hid_t dataset =
        H5Dopen2(file, "optimizer/exp_avg/net_coarse.base_fc.0.bias", H5P_DEFAULT);
    std::vector<float> values(64, 0.0f);
    values[7] = INFINITY;
    H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(dataset);
  });
  expect_error(load_error(path, ibrnet_like()), path,
               "'optimizer/exp_avg/net_coarse.base_fc.0.bias' holds an invalid value");

  // A flipped bit in a weight's data: the chunk's Fletcher32 checksum catches it.
  {
    const TrainedModel model;
    const Parameter p = model.params.find("net_coarse.base_fc.0.weight");
    const char* weight = reinterpret_cast<const char*>(model.params.value(p));
    std::string bytes = file_bytes(damaged());
    const size_t at = bytes.find(std::string(weight, 64));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 1000] = char(bytes[at + 1000] ^ 0x04);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  expect_error(load_error(path, ibrnet_like()), path, "'model/net_coarse.base_fc.0.weight'");

  fs::resize_file(damaged(), fs::file_size(good) / 2);
  expect_error(load_error(path, ibrnet_like()), path, "");

  std::ofstream(path, std::ios::trunc) << "not HDF5";
  expect_error(load_error(path, ibrnet_like()), path, "not an HDF5 file");
  expect_error(load_error((dir.path / "missing.h5").string(), ibrnet_like()),
               (dir.path / "missing.h5").string(), "cannot read");
}

TEST(Checkpoint, AnotherModelFailsNamingTheParameter) {
  TempDir dir;
  const std::string path = TrainedModel().save(dir.path);

  std::vector<Entry> extra = ibrnet_like();
  extra.push_back({"net_fine.base_fc.0.weight", {64, 105}, ParameterGroup::kMlp});
  expect_error(load_error(path, extra), path,
               "missing parameter 'model/net_fine.base_fc.0.weight'");

  std::vector<Entry> fewer = ibrnet_like();
  fewer.erase(fewer.begin() + 3);
  expect_error(load_error(path, fewer), path,
               "unknown parameter 'model/net_coarse.base_fc.0.bias'");

  std::vector<Entry> reshaped = ibrnet_like();
  reshaped[2].shape = {105, 64};  // transposed, same count
  expect_error(load_error(path, reshaped), path,
               "'model/net_coarse.base_fc.0.weight' has shape (64, 105), expected (105, 64)");
}

TEST(Checkpoint, H5pyReadsTheParametersByTheirPyTorchNames) {
  TempDir dir;
  const TrainedModel model;
  const std::string path = model.save(dir.path);
  std::string arguments;
  for (const ParameterInfo& info : model.params.infos()) {
    const std::string npy = (dir.path / (info.name + ".npy")).string();
    const float* v = model.params.values().data() + info.offset;
    test::write_npy(npy, {std::vector<size_t>(info.shape.begin(), info.shape.end()),
                          std::vector<double>(v, v + info.size)});
    arguments += " " + info.name + "=" + npy;
  }
  const char* script = R"(
import sys, h5py, numpy as np
path, step, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "r") as f:
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    assert text(f.attrs["format"]) == "mvibr-checkpoint", f.attrs["format"]
    assert int(f.attrs["format_version"]) == 1 and int(f.attrs["step"]) == step
    assert int(f.attrs["random_seed"]) == seed and f["data_cursors"].shape == (3, 2)
    assert "expname = lego" in text(f.attrs["config"])
    for argument in sys.argv[4:]:
        name, npy = argument.split("=")
        want = np.load(npy).astype(np.float32)
        for tree in ("model/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"):
            data = f[tree + name]
            assert data.dtype == np.float32 and data.shape == want.shape, (tree, name)
        assert np.array_equal(f["model/" + name][()], want), name
    assert len(f["model"]) == len(sys.argv) - 4
)";
  const std::string command = "/usr/bin/python3 -c '" + std::string(script) + "' " + path + " " +
                              std::to_string(model.adam.steps()) + " " +
                              std::to_string(training_state().random_seed) + arguments;
  EXPECT_EQ(std::system(command.c_str()), 0) << "h5py could not read " << path;
}

}  // namespace
}  // namespace mvibr::train
