// The real data sets some tests read, and what such a test does when one is missing.
// - The folder is MVIBR_DATASETS when set, else ../shared/datasets beside the source tree; the
//   sets are listed in test/datasets.tsv (what each is, where it is published).
// - A missing set is one line naming it and its public source: the test fails under CI=true
//   (CI must never pass by skipping) and is skipped elsewhere (a clone without the data).
// - test/integration/lib.sh's need_dataset says the same for the shell tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace mvibr::testing {

bool running_in_ci();

// The folder of data set `name`; "" with `*missing` set to the line to report when it is absent.
// What each set is and the file a test needs in it come from test/datasets.tsv.
std::string find_dataset(const std::string& name, std::string* missing);

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
