// The tests that run under mpirun share one main (mpi_test_main.cpp): an MPI session for the
// process, and gtest's output from rank 0 alone (every rank's failures still fail the test
// through its exit code).
#pragma once

#include "mvibr/dist/mpi_session.h"

namespace mvibr::testing {

// The process's MPI session, made by main before any test runs.
dist::MpiSession& mpi_session();

}  // namespace mvibr::testing
