// The main of the tests under mpirun (see mpi_test_main.h).
#include "mpi_test_main.h"

#include <gtest/gtest.h>

namespace mvibr::testing {
namespace {
dist::MpiSession* session = nullptr;
}  // namespace

dist::MpiSession& mpi_session() {
  return *session;
}

}  // namespace mvibr::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  mvibr::dist::MpiSession mpi(&argc, &argv);
  mvibr::testing::session = &mpi;
  if (mpi.topology().rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
