// The rendering core split over MPI ranks (run under mpirun -np 2): each rank takes its slice
// of the global batch, keyed by the global ray index, and the result must be the single-process
// result. Sampling is bit-identical (Philox keyed by ray); the feature-map gradient, summed over
// ranks with MPI_Allreduce, equals the whole batch's gradient to rounding.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"

namespace mvibr {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

TEST(MpiRenderCore, RunsOnMoreThanOneRank) {
  EXPECT_GE(world_size(), 2);
}

TEST(MpiRenderCore, RanksDrawTheSameSamplesAsOneProcess) {
  const int per_rank = 37, ranks = world_size(), rank = world_rank();
  const DepthSampling coarse{2.0, 6.0, 24, true, false};
  const ImportanceSampling fine{24, 16, true, false};
  const RandomKey key{99, 5};
  const int n_total = fine.n_coarse + fine.n_importance;

  std::vector<float> depths(size_t(per_rank) * 24), weights, merged(size_t(per_rank) * n_total);
  cpu::sample_coarse_depths(per_rank, coarse, key, uint32_t(rank * per_rank), depths.data());
  weights = synthetic::cast_values<float>(synthetic::random_values(depths.size(), 0, 1, 7 + rank));
  cpu::sample_importance_depths(per_rank, fine, depths.data(), weights.data(), key,
                                uint32_t(rank * per_rank), merged.data());

  std::vector<float> all_depths(depths.size() * ranks), all_weights(weights.size() * ranks),
      all_merged(merged.size() * ranks);
  MPI_Allgather(depths.data(), int(depths.size()), MPI_FLOAT, all_depths.data(), int(depths.size()),
                MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Allgather(weights.data(), int(weights.size()), MPI_FLOAT, all_weights.data(),
                int(weights.size()), MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Allgather(merged.data(), int(merged.size()), MPI_FLOAT, all_merged.data(), int(merged.size()),
                MPI_FLOAT, MPI_COMM_WORLD);

  std::vector<float> single_depths(all_depths.size()), single_merged(all_merged.size());
  cpu::sample_coarse_depths(per_rank * ranks, coarse, key, 0, single_depths.data());
  cpu::sample_importance_depths(per_rank * ranks, fine, single_depths.data(), all_weights.data(),
                                key, 0, single_merged.data());
  EXPECT_EQ(all_depths, single_depths);
  EXPECT_EQ(all_merged, single_merged);
}

TEST(MpiRenderCore, AllReducedFeatureGradientEqualsTheWholeBatch) {
  synthetic::RandomSceneSize size;
  size.n_rays = 40 * world_size();
  size.feature_channels = 6;
  const auto scene = synthetic::make_random_scene(size, 31);  // the same scene on every rank
  const int S = 12, V = size.n_views, width = 3 + size.feature_channels;
  const int R = size.n_rays, per_rank = R / world_size(), first = world_rank() * per_rank;
  std::vector<double> origins(size_t(R) * 3), directions(size_t(R) * 3), depths(size_t(R) * S);
  cpu::generate_rays(scene.target, scene.pixels.data(), R, origins.data(), directions.data());
  cpu::sample_coarse_depths(R, {scene.near_depth, scene.far_depth, S, false, false}, {3, 4}, 0,
                            depths.data());
  const auto upstream = synthetic::random_values(size_t(R) * S * V * width, -1, 1, 32);
  const SourceViews<double> views = synthetic::scene_views(
      scene, scene.sources.data(), scene.images.data(), scene.features.data());

  std::vector<double> mine(scene.features.size(), 0.0), whole(scene.features.size(), 0.0);
  cpu::gather_samples_backward(per_rank, S, origins.data() + 3 * first,
                               directions.data() + 3 * first, depths.data() + size_t(first) * S,
                               views, upstream.data() + size_t(first) * S * V * width,
                               static_cast<double*>(nullptr), mine.data());
  MPI_Allreduce(MPI_IN_PLACE, mine.data(), int(mine.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  cpu::gather_samples_backward(R, S, origins.data(), directions.data(), depths.data(), views,
                               upstream.data(), static_cast<double*>(nullptr), whole.data());
  double difference = 0, scale = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    difference = std::max(difference, std::abs(mine[i] - whole[i]));
    scale = std::max(scale, std::abs(whole[i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(difference, 1e-12 * scale);
}

}  // namespace
}  // namespace mvibr
