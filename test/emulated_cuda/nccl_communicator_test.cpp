// The NCCL communicator's failure paths on the emulated device, with faults a GPU cannot be
// made to give on demand: a construction that fails after ncclCommInitRank releases what it
// made; the barrier sends memory it has written (the emulated NCCL refuses memory nothing
// wrote); ncclInProgress is an error on a blocking communicator.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "../../src/cuda/nccl_check.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/dist/nccl_communicator.h"
#include "nccl.h"

namespace mvibr::dist {
namespace {

TEST(NcclCommunicator, AFailedConstructionReleasesWhatItMade) {
  const auto bootstrap = single_process_communicator();
  const size_t allocations = emulated::live_allocations(), streams = emulated::live_streams();
  const int communicators = emulated::live_nccl_communicators();
  emulated::fail_allocation(1);  // the first cudaMalloc after ncclCommInitRank and the stream
  EXPECT_THROW(make_nccl_communicator(*bootstrap, 0, 10), RuntimeFailure);
  EXPECT_EQ(emulated::live_allocations(), allocations);
  EXPECT_EQ(emulated::live_streams(), streams);
  EXPECT_EQ(emulated::live_nccl_communicators(), communicators);
  // And one made whole afterwards is counted, then released.
  {
    const auto nccl = make_nccl_communicator(*bootstrap, 0, 10);
    EXPECT_EQ(emulated::live_nccl_communicators(), communicators + 1);
  }
  EXPECT_EQ(emulated::live_nccl_communicators(), communicators);
}

TEST(NcclCommunicator, TheBarrierSendsAWrittenValue) {
  const auto bootstrap = single_process_communicator();
  const auto nccl = make_nccl_communicator(*bootstrap, 0, 10);
  nccl->barrier();  // no kernel has run since the communicator allocated its value
  nccl->barrier();
}

TEST(NcclCommunicator, UnwrittenDeviceMemoryIsRefused) {
  const auto bootstrap = single_process_communicator();
  const auto nccl = make_nccl_communicator(*bootstrap, 0, 10);
  DeviceArray<float> fresh(16);
  EXPECT_THROW(nccl->all_reduce(fresh.data(), fresh.size(), ReduceOp::kSum), RuntimeFailure);
}

TEST(NcclCommunicator, InProgressIsAnErrorOnABlockingCommunicator) {
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "ncclAllReduce"));
  try {
    check_nccl(ncclInProgress, "ncclAllReduce");
    ADD_FAILURE() << "ncclInProgress passed";
  } catch (const RuntimeFailure& e) {
    EXPECT_EQ(std::string(e.what()),
              "ncclAllReduce failed: NCCL operation in progress (on a blocking communicator)");
  }
  EXPECT_THROW(check_nccl(ncclRemoteError, "ncclAllReduce"), RuntimeFailure);
}

}  // namespace
}  // namespace mvibr::dist
