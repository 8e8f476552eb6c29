// Damaged import sources must give clean errors: the files each importer reads besides its images
// (JSON, text and binary models, .npy and .npz arrays, HDF5, masks) are damaged at random offsets
// by flipped bytes or truncation, and the import must either succeed or throw
// mvibr::InvalidArgument in one line that names the damaged folder's file; never crash, hang,
// read out of bounds or allocate from a corrupt count (AddressSanitizer and UBSan, as
// data_fuzz_test.cpp). The sources: NeRF-synthetic lego and LLFF fern (../shared/datasets, their
// images linked, not copied), a COLMAP model in binary and in text, DynIBaR's folder as the ray
// tracer writes it, a CMU Panoptic capture and a Human3.6M processed folder with either
// calibration. Reproducible: the damage comes from fixed seeds.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "../data/human36m_fixture.h"
#include "../data/importer_fixture.h"
#include "damage.h"
#include "mvibr/data/dynibar_folder.h"
#include "mvibr/data/panoptic.h"
#include "mvibr/data/synthetic_scene.h"

namespace mvibr::data::testing {
namespace {

// One importer's source: a clean folder, the files in it to damage, and the import.
struct Source {
  std::string name;
  fs::path clean;
  std::vector<std::string> files;  // relative to `clean`
  std::function<void(const std::string&)> import;
};

// A CMU Panoptic sequence: two hd cameras (one with a lens) and a vga one, two frames of one
// body, 16x12 images.
void write_panoptic(const fs::path& folder) {
  json calibration = {{"cameras", json::array()}};
  for (int c = 0; c < 2; ++c) {
    const PinholeCamera<double> look =
        look_at_camera<double>({2.5 * (c ? 1 : -1), -2.5, 1}, {0, 0, 1}, {0, 0, 1}, 14.0, 16, 12);
    json r = json::array(), t = json::array();
    for (int i = 0; i < 3; ++i) {
      r.push_back({look.w2c[4 * i], look.w2c[4 * i + 1], look.w2c[4 * i + 2]});
      t.push_back({100 * look.w2c[4 * i + 3]});
    }
    calibration["cameras"].push_back({{"name", "00_0" + std::to_string(c)},
                                      {"type", "hd"},
                                      {"resolution", {16, 12}},
                                      {"K", {{14, 0, 7.5}, {0, 14, 5.5}, {0, 0, 1}}},
                                      {"distCoef", {c * -0.2, 0.05, 0.001, 0, 0}},
                                      {"R", r},
                                      {"t", t}});
  }
  calibration["cameras"].push_back({{"name", "01_01"}, {"type", "vga"}});
  write_text((folder / "calibration_seq.json").string(), calibration.dump());
  for (int frame = 0; frame < 2; ++frame) {
    std::vector<double> joints;
    for (int j = 0; j < kPanopticJoints; ++j) {
      joints.insert(joints.end(), {10.0 * (j % 5) - 20, 5.0 * (j % 3), 10.0 + 8 * j, 0.5});
    }
    char name[64];
    std::snprintf(name, sizeof name, "body3DScene_%08d.json", frame);
    write_text((folder / "hdPose3d_stage1_coco19" / name).string(),
               json{{"bodies", {{{"id", 0}, {"joints19", joints}}}}}.dump());
    for (const char* camera : {"00_00", "00_01"}) {
      std::snprintf(name, sizeof name, "%s_%08d.png", camera, frame);
      write_gradient_png((folder / "hdImgs" / camera / name).string(), 16, 12, 3);
    }
  }
}

// Copies `files` of a data set and links the rest of its entries (image folders), so that a
// damaged copy costs the metadata's bytes only.
fs::path linked_copy(const std::string& dataset, const std::vector<std::string>& files,
                     const fs::path& to) {
  fs::create_directories(to);
  for (const fs::directory_entry& entry : fs::directory_iterator(dataset)) {
    const std::string name = entry.path().filename().string();
    if (std::count(files.begin(), files.end(), name)) {
      fs::copy_file(entry.path(), to / name);
    } else {
      fs::create_directory_symlink(fs::absolute(entry.path()), to / name);
    }
  }
  return to;
}

TEST(ImportFuzz, DamagedImportSourcesGiveCleanErrors) {
  MVIBR_NEED_DATASET(lego, "nerf_synthetic_lego_400");
  MVIBR_NEED_DATASET(fern, "llff_fern");
  TempDir dir;
  const fs::path root = dir.str();
  ImportOptions two_views;
  two_views.max_views_per_split = 2;
  ImportOptions fern_eighth = two_views;
  fern_eighth.downsample = 8;

  std::vector<Source> sources;
  const std::vector<std::string> lego_files = {"transforms_train.json", "transforms_val.json",
                                               "transforms_test.json"};
  sources.push_back({"blender", linked_copy(lego, lego_files, root / "clean/blender"), lego_files,
                     [&](const std::string& p) { import_blender(p, two_views); }});
  sources.push_back({"llff",
                     linked_copy(fern, {"poses_bounds.npy"}, root / "clean/llff"),
                     {"poses_bounds.npy"},
                     [&](const std::string& p) { import_llff(p, fern_eighth); }});
  const ColmapTwins twins = colmap_twins();
  write_colmap_twin((root / "clean/colmap_binary").string(), twins, true);
  sources.push_back({"colmap binary",
                     root / "clean/colmap_binary",
                     {"sparse/0/cameras.bin", "sparse/0/images.bin", "sparse/0/points3D.bin"},
                     [](const std::string& p) { import_colmap(p, ImportOptions{}); }});
  write_colmap_twin((root / "clean/colmap_text").string(), twins, false);
  sources.push_back({"colmap text",
                     root / "clean/colmap_text",
                     {"sparse/0/cameras.txt", "sparse/0/images.txt", "sparse/0/points3D.txt"},
                     [](const std::string& p) { import_colmap(p, ImportOptions{}); }});
  SyntheticSceneOptions video;
  video.rig = "monocular";
  video.n_time_steps = 4;
  video.width = 24;
  video.height = 16;
  video.samples_per_side = 1;
  write_dynibar_folder(make_synthetic_scene(video), (root / "clean/dynibar").string());
  sources.push_back(
      {"dynibar",
       root / "clean/dynibar",
       {"dense/poses_bounds_cvd.npy", "dense/disp/00001.npy", "dense/flow_i1/00001_fwd.npz",
        "dense/flow_i2/00002_bwd.npz", "dense/dynamic_masks/1.png", "dense/static_masks/2.png"},
       [](const std::string& p) { import_dynibar(p, ImportOptions{}); }});
  write_panoptic(root / "clean/panoptic");
  PanopticOptions panoptic_crops;
  panoptic_crops.body_crop = 0.2;
  panoptic_crops.width = 12;
  sources.push_back({"panoptic",
                     root / "clean/panoptic",
                     {"calibration_seq.json", "hdPose3d_stage1_coco19/body3DScene_00000001.json"},
                     [&](const std::string& p) {
                       const Scene scene = import_panoptic(p, panoptic_crops);
                       for (size_t i = 0; i < scene.views.size(); ++i) scene.read_rgb(i);
                     }});

  const h36m_fixture::Processed human36m;
  human36m.write_metadata_xml(human36m.root / "metadata.xml");
  for (const char* calibration : {"cameras.h5", "metadata.xml"}) {
    sources.push_back({std::string("human36m, ") + calibration,
                       human36m.root,
                       {calibration, "S1/Directions-1/annot.h5"},
                       [calibration](const std::string& p) {
                         Human36mOptions options;
                         options.calibration = p + "/" + calibration;
                         const Scene scene = import_human36m(p, options);
                         for (size_t i = 0; i < scene.views.size(); ++i) scene.read_rgb(i);
                       }});
  }

  std::mt19937_64 rng(20261205);
  constexpr int kRoundsPerFile = 40;
  std::map<std::string, std::pair<int, int>> tally;  // source: clean errors, rounds
  for (const Source& source : sources) {
    // The clean source imports.
    ASSERT_NO_THROW(source.import(source.clean.string())) << source.name;
    for (const std::string& file : source.files) {
      ASSERT_TRUE(fs::exists(source.clean / file)) << source.name << ": " << file;
      for (int round = 0; round < kRoundsPerFile; ++round) {
        const fs::path damaged = root / "damaged";
        fs::remove_all(damaged);
        fs::copy(source.clean, damaged,
                 fs::copy_options::recursive | fs::copy_options::copy_symlinks);
        mvibr::testing::damage_file(damaged / file, round, rng);
        ++tally[source.name].second;
        try {
          source.import(damaged.string());
        } catch (const InvalidArgument& e) {
          ++tally[source.name].first;
          const std::string what = e.what();
          EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
          EXPECT_NE(what.find(damaged.string()), std::string::npos)
              << source.name << " " << file << " round " << round
              << ": the message names no file of the source: " << what;
        } catch (const std::exception& e) {
          ADD_FAILURE() << source.name << " " << file << " round " << round
                        << ": not a clean error: " << e.what();
        }
      }
    }
  }
  for (const auto& [name, counts] : tally) {
    std::printf("%s: %d damaged sources, %d clean errors\n", name.c_str(), counts.second,
                counts.first);
    EXPECT_GT(counts.first, counts.second / 4) << name << ": most damage must be caught";
  }
}

}  // namespace
}  // namespace mvibr::data::testing
