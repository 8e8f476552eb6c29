// The NCCL communicator on one GPU: a one-rank job (the MPI bootstrap replaced by the
// single-process communicator), every collective on device memory against what one rank must
// give, and a call after an abort. Asking for a device that does not exist (or for NCCL in a
// build without CUDA) is a clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/dist/nccl_communicator.h"

namespace mvibr::dist {
namespace {

TEST(Nccl, AskingForAMissingDeviceIsAClearError) {
  auto bootstrap = single_process_communicator();
  EXPECT_EQ(select_device(Topology{}), cuda_device_count() > 0 ? 0 : -1);
  EXPECT_THROW(make_nccl_communicator(*bootstrap, cuda_device_count(), 10), RuntimeFailure);
  EXPECT_THROW(make_nccl_communicator(*bootstrap, -1, 10), RuntimeFailure);
}

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    bootstrap_ = single_process_communicator();
    const int device = select_device(Topology{});
    ASSERT_EQ(device, 0);
    nccl_ = make_nccl_communicator(*bootstrap_, device, 60);
  }
  std::unique_ptr<Communicator> bootstrap_, nccl_;
};

TEST_F(NcclOneRank, CollectivesOnDeviceMemory) {
  EXPECT_EQ(nccl_->backend(), "nccl");
  EXPECT_EQ(nccl_->size(), 1);
  std::vector<float> values(4097);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * float(i) - 7.0f;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
    DeviceArray<float> device(values);
    device_synchronize();  // the upload is final before NCCL's own stream reads it
    nccl_->all_reduce(device.data(), device.size(), op);
    EXPECT_EQ(device.to_host(), values);  // one rank: every reduction is the identity
  }
  const std::vector<double> doubles = {1e-300, -2.5, 3e300};
  DeviceArray<double> device_doubles(doubles);
  device_synchronize();
  nccl_->all_reduce(device_doubles.data(), doubles.size(), ReduceOp::kSum);
  EXPECT_EQ(device_doubles.to_host(), doubles);

  std::vector<uint16_t> halves;
  for (float v : values) halves.push_back(to_bf16(v));
  DeviceArray<uint16_t> device_halves(halves);
  device_synchronize();
  nccl_->all_reduce_bf16_sum(device_halves.data(), halves.size());
  EXPECT_EQ(device_halves.to_host(), halves);

  DeviceArray<float> source(values), gathered(values.size());
  device_synchronize();
  nccl_->all_gather(source.data(), values.size() * sizeof(float), gathered.data());
  EXPECT_EQ(gathered.to_host(), values);
  nccl_->broadcast(source.data(), values.size() * sizeof(float), 0);
  EXPECT_EQ(source.to_host(), values);
  nccl_->barrier();
}

TEST_F(NcclOneRank, ACallAfterAnAbortThrowsNamingIt) {
  DeviceArray<float> values(std::vector<float>(8, 1.0f));
  device_synchronize();
  nccl_->all_reduce(values.data(), values.size(), ReduceOp::kSum);
  nccl_->abort();
  try {
    nccl_->all_reduce(values.data(), values.size(), ReduceOp::kSum);
    ADD_FAILURE() << "an all-reduce on an aborted communicator returned";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("ncclAllReduce on rank 0: the NCCL communicator was "
                                         "aborted"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(nccl_->barrier(), RuntimeFailure);
  nccl_->abort();  // twice: nothing more to do
}

}  // namespace
}  // namespace mvibr::dist
