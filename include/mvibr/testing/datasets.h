// The real data sets some tests read, and what such a test does when one is missing.
// - The folder is MVIBR_DATASETS when set, else ../shared/datasets beside the source tree; the
//   sets are listed in test/datasets.tsv (what each is, where it is published).
// - A missing set is one line naming it and its public source: the test fails under CI=true
//   (CI must never pass by skipping) and is skipped elsewhere (a clone without the data).
// - test/integration/lib.sh's need_dataset says the same for the shell tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace mvibr::testing {

inline std::string datasets_folder() {
  const char* chosen = std::getenv("MVIBR_DATASETS");
  return chosen && *chosen ? chosen : MVIBR_SHARED_DATASETS;
}

inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// The folder of data set `name`; "" with `*missing` set to the line to report when it is absent.
// What each set is and the file a test needs in it come from test/datasets.tsv.
inline std::string find_dataset(const std::string& name, std::string* missing) {
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

// Declares std::string `path` holding data set `name`'s folder, or ends the test: failed under
// CI=true, skipped elsewhere, with the one line that says what is missing and where to get it.
#define MVIBR_NEED_DATASET(path, name)                                         \
  std::string path;                                                            \
  {                                                                            \
    std::string mvibr_missing_dataset_;                                        \
    path = ::mvibr::testing::find_dataset(name, &mvibr_missing_dataset_);      \
    if (!mvibr_missing_dataset_.empty()) {                                     \
      if (::mvibr::testing::running_in_ci()) FAIL() << mvibr_missing_dataset_; \
      GTEST_SKIP() << mvibr_missing_dataset_;                                  \
    }                                                                          \
  }
