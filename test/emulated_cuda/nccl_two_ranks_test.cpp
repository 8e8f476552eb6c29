// The NCCL communicator on the emulated device at 2 ranks (mpirun -np 2): the unique id from rank
// 0 over the MPI bootstrap, ncclCommInitRank on both, and every collective on device memory
// against the same collective over MPI on the host. A peer that does not join ends the wait at
// the timeout with the communicator aborted, whatever the timing: rank 1 joins only after rank
// 0 has given up (an MPI barrier between them).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../mpi/mpi_test_main.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/dist/mpi_session.h"
#include "mvibr/dist/nccl_communicator.h"

namespace mvibr::dist {
namespace {

TEST(EmulatedNcclTwoRanks, CollectivesEqualMpis) {
  const std::unique_ptr<Communicator> world = testing::mpi_session().world();
  ASSERT_EQ(world->size(), 2);
  const int device = select_device(testing::mpi_session().topology());
  const std::unique_ptr<Communicator> nccl = make_nccl_communicator(*world, device, 60);
  EXPECT_EQ(nccl->backend(), "nccl");
  EXPECT_EQ(nccl->rank(), world->rank());
  const int rank = world->rank();
  std::vector<float> values(1025);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * float(i) * float(rank + 1) - 3.0f;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
    std::vector<float> expected = values;
    world->all_reduce(expected.data(), expected.size(), op);
    DeviceArray<float> on_device(values);
    nccl->all_reduce(on_device.data(), on_device.size(), op);
    EXPECT_EQ(on_device.to_host(), expected) << "op " << int(op);
  }
  std::vector<double> doubles = {1e-300 * (rank + 1), -2.5, 3e300 / (rank + 1)};
  std::vector<double> expected_doubles = doubles;
  world->all_reduce(expected_doubles.data(), doubles.size(), ReduceOp::kSum);
  DeviceArray<double> device_doubles(doubles);
  nccl->all_reduce(device_doubles.data(), doubles.size(), ReduceOp::kSum);
  EXPECT_EQ(device_doubles.to_host(), expected_doubles);
  // bf16 sums: one addition of the two ranks' values, rounded to bf16.
  std::vector<uint16_t> halves;
  for (float v : values) halves.push_back(to_bf16(v));
  std::vector<uint16_t> both(2 * halves.size());
  world->all_gather(halves.data(), halves.size() * 2, both.data());
  DeviceArray<uint16_t> device_halves(halves);
  nccl->all_reduce_bf16_sum(device_halves.data(), halves.size());
  const std::vector<uint16_t> summed = device_halves.to_host();
  for (size_t i = 0; i < halves.size(); ++i) {
    const float sum = from_bf16(both[i]) + from_bf16(both[halves.size() + i]);
    ASSERT_EQ(summed[i], to_bf16(sum)) << i;
  }
  DeviceArray<float> source(values), gathered(2 * values.size());
  nccl->all_gather(source.data(), values.size() * sizeof(float), gathered.data());
  std::vector<float> expected_gather(2 * values.size());
  world->all_gather(values.data(), values.size() * sizeof(float), expected_gather.data());
  EXPECT_EQ(gathered.to_host(), expected_gather);
  DeviceArray<float> broadcast(values);
  nccl->broadcast(broadcast.data(), values.size() * sizeof(float), 1);
  std::vector<float> expected_broadcast = values;
  world->broadcast(expected_broadcast.data(), values.size() * sizeof(float), 1);
  EXPECT_EQ(broadcast.to_host(), expected_broadcast);
  nccl->barrier();
}

TEST(EmulatedNcclTwoRanks, AStalledPeerEndsTheWaitAtTheTimeout) {
  const std::unique_ptr<Communicator> world = testing::mpi_session().world();
  const int rank = world->rank();
  // Rank 1's timeout only guards against a hang: it joins a collective that rank 0 has posted.
  const std::unique_ptr<Communicator> nccl = make_nccl_communicator(
      *world, select_device(testing::mpi_session().topology()), rank == 0 ? 0.5 : 60);
  DeviceArray<float> values(std::vector<float>(64, 1.0f));
  if (rank == 0) {
    try {
      nccl->all_reduce(values.data(), values.size(), ReduceOp::kSum);
      ADD_FAILURE() << "the all-reduce returned without its peer";
    } catch (const RuntimeFailure& e) {
      EXPECT_EQ(std::string(e.what()),
                "ncclAllReduce on rank 0 has not completed after 0.5 s: another rank has failed or "
                "stalls; NCCL communicator aborted");
    }
    EXPECT_THROW(nccl->all_reduce(values.data(), values.size(), ReduceOp::kSum), RuntimeFailure);
  }
  world->barrier();  // rank 1 waits here until rank 0 has given up
  if (rank == 1) {
    // Rank 0's abandoned collective still matches: this one completes, with rank 0's values.
    nccl->all_reduce(values.data(), values.size(), ReduceOp::kSum);
    EXPECT_EQ(values.to_host(), std::vector<float>(64, 2.0f));
  }
  world->barrier();
}

}  // namespace
}  // namespace mvibr::dist
