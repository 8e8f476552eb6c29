// Monitoring pieces on their own: CRC-32C and TFRecord's mask against published and independently
// computed values, the event file's framing, the load-balance verdict on hand-made rank times, the
// job's backend on one CPU rank, and the progress line on a terminal and off one. (TensorBoard
// itself reads a real run's event files in test/integration/monitoring_cli_test.sh.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "mvibr/train/monitor.h"
#include "mvibr/train/tensorboard.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;

using Parts = std::vector<std::pair<std::string, double>>;

TEST(Crc32c, MatchesTheCheckValueAndTensorBoardsMask) {
  const char* text = "123456789";
  // The CRC-32C check value (RFC 3720, iSCSI).
  EXPECT_EQ(crc32c(text, 9), 0xE3069283u);
  // Computed by TensorBoard's own reader (tensorboard.compat.tensorflow_stub.pywrap_tensorflow).
  EXPECT_EQ(masked_crc32c(text, 9), 0xC78AB0E5u);
  const uint64_t zero = 0;
  EXPECT_EQ(masked_crc32c(&zero, 8), 0x07980329u);
}

TEST(EventWriter, EveryRecordIsFramedAndChecked) {
  const fs::path dir = fs::temp_directory_path() / ("mvibr-events-" + std::to_string(::getpid()));
  std::string path;
  {
    EventWriter writer((dir / "tb").string());
    path = writer.path();
    writer.scalars(7, {{"loss/total", 0.25}, {"lr/mlp", 5e-4}});
    writer.image("heldout/rgb", 7, RgbImage{2, 1, {0, 0.5f, 1, 1, 0, 0}});
  }
  EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // file_version, the scalars, the image: each length, its CRC, the event, its CRC.
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(bytes.data() + at + 12, length));
    const std::string event = bytes.substr(at + 12, length);
    const char* expected[] = {"brain.Event:2", "loss/total", "\x89PNG"};
    if (records < 3) {
      EXPECT_NE(event.find(expected[records]), std::string::npos) << records;
    }
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);
  fs::remove_all(dir);
}

TEST(Imbalance, NamesTheSlowRankAndThePartWhereItLosesMostTime) {
  // Rank 2 is busy 0.5 s against 0.3 s: most of its extra time is in the aggregation network.
  const std::vector<Parts> parts = {
      {{"data_wait", 0.01}, {"aggregator_forward", 0.10}, {"features_forward", 0.19}},
      {{"data_wait", 0.01}, {"aggregator_forward", 0.11}, {"features_forward", 0.20}},
      {{"data_wait", 0.04}, {"aggregator_forward", 0.26}, {"features_forward", 0.20}}};
  const Imbalance m = assess_imbalance(parts);
  EXPECT_EQ(m.slow_rank, 2);
  EXPECT_DOUBLE_EQ(m.busy_max, 0.50);
  EXPECT_DOUBLE_EQ(m.busy_min, 0.30);
  EXPECT_NEAR(m.imbalance, 0.5 / 0.3 - 1, 1e-12);
  EXPECT_EQ(m.slow_part, "aggregator_forward");
  EXPECT_DOUBLE_EQ(m.slow_part_seconds, 0.26);
  EXPECT_NEAR(m.others_part_seconds, 0.105, 1e-12);

  const std::string warning = imbalance_warning(m, 0.2, 11, 20);
  EXPECT_NE(warning.find("steps 11-20"), std::string::npos) << warning;
  EXPECT_NE(warning.find("rank 2 is busy 0.5000 s per update, 67% longer"), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("its slow phase is aggregator_forward (0.2600 s against 0.1050 s"),
            std::string::npos)
      << warning;
  EXPECT_EQ(warning.back(), '\n');
}

TEST(Imbalance, WarnsOnlyAboveTheThreshold) {
  const auto two_ranks = [](double slow) {
    return std::vector<Parts>{{{"sampling", 1.0}}, {{"sampling", slow}}};
  };
  EXPECT_EQ(imbalance_warning(assess_imbalance(two_ranks(1.19)), 0.2, 1, 10), "");
  EXPECT_EQ(imbalance_warning(assess_imbalance(two_ranks(1.20)), 0.2, 1, 10), "");
  EXPECT_NE(imbalance_warning(assess_imbalance(two_ranks(1.21)), 0.2, 1, 10), "");
  // 50% slower, but by 5 ms: noise, not a slow rank.
  EXPECT_EQ(imbalance_warning(assess_imbalance({{{"sampling", 0.010}}, {{"sampling", 0.015}}}), 0.2,
                              1, 10),
            "");
  // The slow rank may be rank 0.
  const Imbalance first = assess_imbalance({{{"sampling", 2.0}}, {{"sampling", 1.0}}});
  EXPECT_EQ(first.slow_rank, 0);
  EXPECT_NEAR(first.imbalance, 1.0, 1e-12);
  // One rank: nothing to compare.
  const Imbalance alone = assess_imbalance({{{"sampling", 1.0}}});
  EXPECT_EQ(alone.imbalance, 0);
  EXPECT_EQ(alone.slow_part, "");
  EXPECT_EQ(imbalance_warning(alone, 0.2, 1, 10), "");
}

TEST(IntervalTimes, BusyPartsSumToTheTimeNotSpentWaitingForOtherRanks) {
  StepReport r;
  r.seconds = 1.0;
  r.data_wait = 0.1;
  r.phases.aggregator_forward = 0.3;
  r.phases.features_backward = 0.2;
  r.loss_allreduce = 0.05;
  r.allreduce = 0.3;  // mostly hidden behind the backward pass
  r.allreduce_exposed = 0.15;
  r.optimizer = 0.1;
  IntervalTimes interval;
  interval.add(r);
  interval.add(r);
  EXPECT_EQ(interval.steps, 2u);
  EXPECT_NEAR(interval.busy(), 2 * (1.0 - 0.05 - 0.15), 1e-12);
  double sum = 0, other = -1, aggregator = -1;
  for (const auto& [name, seconds] : interval.busy_parts()) {
    sum += seconds;
    if (name == "other") other = seconds;
    if (name == "aggregator_forward") aggregator = seconds;
  }
  EXPECT_NEAR(sum, interval.busy(), 1e-12);
  EXPECT_NEAR(aggregator, 0.6, 1e-12);
  EXPECT_NEAR(other, 2 * (0.8 - 0.1 - 0.3 - 0.2 - 0.1), 1e-12);
  EXPECT_EQ(interval.busy_parts().front().first, "data_wait");
  // Every timed part, the all-reduces too, in the step's order.
  const Parts timed = interval.timed_parts();
  EXPECT_EQ(timed.front(), (std::pair<std::string, double>{"data_wait", 0.2}));
  EXPECT_EQ(timed[timed.size() - 3].first, "loss_allreduce");
  EXPECT_NEAR(timed[timed.size() - 2].second, 0.3, 1e-12);  // allreduce_exposed
  EXPECT_EQ(timed.back().first, "optimizer");
  EXPECT_NEAR(interval.allreduce_hidden_fraction(), 0.5, 1e-12);
  EXPECT_EQ(IntervalTimes{}.allreduce_hidden_fraction(), 0);
}

TEST(Imbalance, OfBusyTimesAloneNamesTheSlowestRank) {
  const Imbalance m = busy_imbalance({1.0, 1.5, 1.2});
  EXPECT_EQ(m.slow_rank, 1);
  EXPECT_NEAR(m.imbalance, 0.5, 1e-12);
  EXPECT_EQ(m.slow_part, "");
  const Parts parts = {{"sampling", 1.0}};
  EXPECT_EQ(busy_imbalance({1.0, 2.0}).imbalance,
            assess_imbalance({parts, {{"sampling", 2.0}}}).imbalance);
  EXPECT_EQ(busy_imbalance({0.0, 1.0}).imbalance, 0);
}

TEST(JobBackend, OneCpuRankReducesNothing) {
  TrainConfig config;
  config.device = Device::kCpu;
  const auto world = dist::single_process_communicator();
  const JobBackend b = job_backend(config, *world, dist::Topology{});
  EXPECT_EQ(b.ranks, 1);
  EXPECT_EQ(b.reduction, "none");
  EXPECT_EQ(b.device, -1);
  EXPECT_EQ(b.device_description, "");
  EXPECT_EQ(b.precision, config.precision);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(2 * 3600 + 7 * 60 + 59), "2h07m");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, RedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  {
    Progress progress(out, 40, 0, 10, 512);
    ASSERT_TRUE(progress.in_place());
    progress.update(10, 0.0123456, 21.5);  // the last step is always drawn
    const std::string line = out.str();
    EXPECT_EQ(line.substr(0, 12), "\rstep 10/10 ");
    EXPECT_EQ(line.substr(line.size() - 3), "\033[K");
    // Cut at 39 columns: the text between "\r" and the clear is at most the width less one.
    EXPECT_EQ(line.size(), 1 + 39 + 3) << line;
    progress.print("kept\n");
    EXPECT_EQ(out.str().substr(line.size()), "\r\033[Kkept\n" + line.substr(1)) << out.str();
  }
  EXPECT_EQ(out.str().back(), '\n');  // the line in place is ended

  std::ostringstream wide;
  {
    Progress progress(wide, 200, 0, 10, 512);
    progress.update(10, 0.0123456, 21.5);
  }
  EXPECT_NE(wide.str().find("steps/s"), std::string::npos) << wide.str();
  EXPECT_NE(wide.str().find("rays/s  eta 0s  loss 0.01235  psnr 21.50"), std::string::npos)
      << wide.str();
}

TEST(Progress, DrawsNothingOffATerminal) {
  std::ostringstream out;
  {
    Progress progress(out, 0, 0, 10, 512);
    EXPECT_FALSE(progress.in_place());
    progress.update(5, 0.1, 10);
    progress.update(10, 0.1, 10);
    progress.print("kept\n");
  }
  EXPECT_EQ(out.str(), "kept\n");
}

}  // namespace
}  // namespace mvibr::train
