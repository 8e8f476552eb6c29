// Finding the tests' real data sets (see datasets.h); the folders come from test/CMakeLists.txt.
#include "support/datasets.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace mvibr::testing {

namespace {

std::string datasets_folder() {
  const char* chosen = std::getenv("MVIBR_DATASETS");
  return chosen && *chosen ? chosen : MVIBR_SHARED_DATASETS;
}

}  // namespace

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

std::string find_dataset(const std::string& name, std::string* missing) {
  const std::string folder = datasets_folder() + "/" + name;
  std::ifstream table(MVIBR_DATASETS_TABLE);
  for (std::string line; std::getline(table, line);) {
    const size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
    if (line.empty() || line[0] == '#' || tab2 == std::string::npos) continue;
    if (line.substr(0, tab1) != name) continue;
    const std::string file = folder + "/" + line.substr(tab1 + 1, tab2 - tab1 - 1);
    if (std::filesystem::exists(file)) return folder;
    *missing = "missing data set " + name + " (" + line.substr(tab2 + 1) + "): expected " + file +
               "; put it there or point MVIBR_DATASETS at a folder holding it";
    return "";
  }
  *missing = "data set '" + name + "' is not in " + MVIBR_DATASETS_TABLE;
  return "";
}

}  // namespace mvibr::testing
