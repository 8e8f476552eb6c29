// Choosing an importer: by name, or by the files a scene directory holds (importers.h).
#include "mvibr/data/importers.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "mvibr/core/error.h"

namespace mvibr::data {

namespace fs = std::filesystem;

std::string detect_format(const std::string& path) {
  const fs::path p(path);
  if (fs::is_regular_file(p)) {
    if (p.extension() == ".npz") return "dnerf";
    if (p.extension() == ".json") return "blender";
    if (p.filename() == "poses_bounds.npy") return "llff";
    if (p.filename() == "poses_bounds_cvd.npy") return "dynibar";
  } else if (fs::is_directory(p)) {
    if (fs::exists(p / "poses_bounds_cvd.npy") ||
        fs::exists(p / "dense" / "poses_bounds_cvd.npy")) {
      return "dynibar";
    }
    for (const char* file : {"transforms_train.json", "transforms_val.json", "transforms_test.json",
                             "transforms.json"}) {
      if (fs::exists(p / file)) return "blender";
    }
    if (fs::exists(p / "poses_bounds.npy")) return "llff";
    for (const fs::path& model : {p / "sparse" / "0", p / "sparse", p}) {
      if (fs::exists(model / "cameras.txt") || fs::exists(model / "cameras.bin")) return "colmap";
    }
  }
  throw InvalidArgument(
      path +
      ": cannot tell the scene format (looked for transforms*.json, poses_bounds.npy, "
      "poses_bounds_cvd.npy in the folder or dense/, cameras.bin or cameras.txt in sparse/0, "
      "sparse or the folder, *.npz)");
}

std::vector<std::string> parse_test_ids(const std::string& list) {
  std::string text = list;
  if (fs::is_regular_file(list)) {
    std::ifstream in(list);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw InvalidArgument(list + ": cannot read (--test_ids)");
  }
  std::vector<std::string> ids;
  std::string id;
  for (const char c : text + ",") {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!id.empty()) ids.push_back(id);
      id.clear();
    } else {
      id += c;
    }
  }
  if (ids.empty()) throw InvalidArgument("--test_ids: no ids in '" + list + "'");
  return ids;
}

Scene import_scene(const std::string& format, const std::string& path,
                   const ImportOptions& options) {
  const std::string chosen = format == "auto" ? detect_format(path) : format;
  if (chosen == "blender") return import_blender(path, options);
  if (chosen == "llff") return import_llff(path, options);
  if (chosen == "colmap") return import_colmap(path, options);
  if (chosen == "dnerf") return import_dnerf(path, options);
  if (chosen == "dynibar") {
    // The file itself names its folder, as for LLFF.
    const fs::path p(path);
    return import_dynibar(fs::is_regular_file(p) ? p.parent_path().string() : path, options);
  }
  throw InvalidArgument("unknown scene format '" + format +
                        "' (auto, blender, llff, colmap, dnerf or dynibar)");
}

}  // namespace mvibr::data
