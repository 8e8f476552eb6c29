// CUDA launchers of the pose model's own layers (see nn/cuda_pose.h): soft-argmax, the channel
// means before the confidence head, the confidences' weights and the triangulation. Each kernel
// runs the CPU backend's MVIBR_HD math on one map, mean or joint per thread, so the GPU computes
// what the CPU computes, expression for expression. These layers are tiny beside the backbone
// (B V J maps of Hf Wf cells; B J joints of V views): one thread per item is enough.
#include <string>

#include "common.h"
#include "mvibr/core/error.h"
#include "mvibr/geom/triangulation.h"
#include "mvibr/nn/channel_mean.h"
#include "mvibr/nn/cuda_pose.h"

namespace mvibr::nn::cuda {

namespace {

// Thread m: map m = (sample, joint) of the channels-last heatmaps.
__global__ void soft_argmax_forward_kernel(int maps, int joints, size_t map_size, HeatmapView view,
                                           SoftArgmaxOptions options, const float* heatmaps,
                                           float* points) {
  for (size_t m = grid_thread_index(); m < size_t(maps); m += grid_thread_count()) {
    const float* map = heatmaps + (m / size_t(joints)) * map_size + m % size_t(joints);
    soft_argmax_map(map, view, options, points + 2 * m);
  }
}

__global__ void soft_argmax_backward_kernel(int maps, int joints, size_t map_size, HeatmapView view,
                                            SoftArgmaxOptions options, const float* heatmaps,
                                            const float* grad_points, float* grad_heatmaps) {
  for (size_t m = grid_thread_index(); m < size_t(maps); m += grid_thread_count()) {
    const size_t first = (m / size_t(joints)) * map_size + m % size_t(joints);
    soft_argmax_map_backward(heatmaps + first, view, options, grad_points + 2 * m,
                             grad_heatmaps + first);
  }
}

// Thread e: mean e = (sample, channel k) of channels [first, first + count).
__global__ void channel_mean_forward_kernel(int n, int cells, int channels, int first, int count,
                                            const float* maps, float* means) {
  for (size_t e = grid_thread_index(); e < size_t(n) * count; e += grid_thread_count()) {
    const size_t i = e / size_t(count);
    const int k = int(e % size_t(count));
    means[e] = channel_mean(maps + i * cells * channels, cells, channels, first + k);
  }
}

// Thread e: element e = (sample, cell, k) of the gradient's channels [first, first + count).
__global__ void channel_mean_backward_kernel(int n, int cells, int channels, int first, int count,
                                             const float* grad_means, float* grad_maps) {
  const size_t total = size_t(n) * cells * count;
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t k = e % size_t(count), cell_of_all = e / size_t(count);
    const size_t i = cell_of_all / size_t(cells);
    grad_maps[cell_of_all * channels + first + k] =
        channel_mean_gradient(grad_means[i * count + k], cells);
  }
}

// Thread bj: joint (sample b, joint j), whose views are [b, v, j] in the [B, V, J] layouts.
__global__ void triangulation_weights_kernel(int batch, int views, int joints,
                                             const float* confidences, float* weights) {
  for (size_t bj = grid_thread_index(); bj < size_t(batch) * joints; bj += grid_thread_count()) {
    const size_t first = (bj / size_t(joints)) * views * joints + bj % size_t(joints);
    mvibr::triangulation_weights(views, confidences + first, joints, weights + first);
  }
}

__global__ void triangulation_weights_backward_kernel(int batch, int views, int joints,
                                                      const float* confidences,
                                                      const float* grad_weights,
                                                      float* grad_confidences) {
  for (size_t bj = grid_thread_index(); bj < size_t(batch) * joints; bj += grid_thread_count()) {
    const size_t first = (bj / size_t(joints)) * views * joints + bj % size_t(joints);
    mvibr::triangulation_weights_backward(views, confidences + first, joints, grad_weights + first,
                                          grad_confidences + first);
  }
}

__global__ void triangulate_joints_kernel(int batch, int views, int joints,
                                          const float* projections, const float* points,
                                          const float* weights, float* joints_3d, uint8_t* ok) {
  for (size_t bj = grid_thread_index(); bj < size_t(batch) * joints; bj += grid_thread_count()) {
    const JointViews<float> v =
        batch_joint_views(int(bj / size_t(joints)), int(bj % size_t(joints)), views, joints,
                          projections, points, weights);
    ok[bj] = triangulate_joint(v, joints_3d + 3 * bj) ? 1 : 0;
  }
}

__global__ void triangulate_joints_backward_kernel(int batch, int views, int joints,
                                                   const float* projections, const float* points,
                                                   const float* weights,
                                                   const float* grad_joints_3d, float* grad_points,
                                                   float* grad_weights) {
  for (size_t bj = grid_thread_index(); bj < size_t(batch) * joints; bj += grid_thread_count()) {
    const int b = int(bj / size_t(joints)), j = int(bj % size_t(joints));
    const JointViews<float> v =
        batch_joint_views(b, j, views, joints, projections, points, weights);
    const size_t first = size_t(b) * views * joints + size_t(j);
    triangulate_joint_backward(v, grad_joints_3d + 3 * bj, grad_points + 2 * first,
                               grad_weights + first);
  }
}

void check_maps(int n, int height, int width, int channels, int joints) {
  if (n < 0 || height < 1 || width < 1 || joints < 1 || joints > channels) {
    throw InvalidArgument("soft-argmax on the GPU: " + std::to_string(joints) + " heatmaps of " +
                          std::to_string(height) + "x" + std::to_string(width) + " in " +
                          std::to_string(channels) + " channels, " + std::to_string(n) +
                          " samples (needs 1 <= joints <= channels and a non-empty map)");
  }
}

void check_means(int n, int cells, int channels, int first, int count) {
  if (n < 0 || cells < 1 || first < 0 || count < 0 || first + count > channels) {
    throw InvalidArgument("channel means on the GPU: channels [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") of " + std::to_string(channels) +
                          ", " + std::to_string(cells) + " cells");
  }
}

void check_joints(int batch, int views, int joints) {
  if (batch < 0 || views < 1 || joints < 1) {
    throw InvalidArgument("triangulation on the GPU: " + std::to_string(batch) + " samples of " +
                          std::to_string(views) + " views and " + std::to_string(joints) +
                          " joints");
  }
}

}  // namespace

void soft_argmax_forward(int n, int height, int width, int channels, int joints,
                         const float* heatmaps, const SoftArgmaxOptions& options, float* points,
                         StreamHandle stream) {
  check_maps(n, height, width, channels, joints);
  launch_threads(size_t(n) * joints, stream, soft_argmax_forward_kernel, n * joints, joints,
                 size_t(height) * width * channels, HeatmapView{height, width, channels}, options,
                 heatmaps, points);
}

void soft_argmax_backward(int n, int height, int width, int channels, int joints,
                          const float* heatmaps, const SoftArgmaxOptions& options,
                          const float* grad_points, float* grad_heatmaps, StreamHandle stream) {
  check_maps(n, height, width, channels, joints);
  launch_threads(size_t(n) * joints, stream, soft_argmax_backward_kernel, n * joints, joints,
                 size_t(height) * width * channels, HeatmapView{height, width, channels}, options,
                 heatmaps, grad_points, grad_heatmaps);
}

void channel_mean_forward(int n, int cells, int channels, int first, int count, const float* maps,
                          float* means, StreamHandle stream) {
  check_means(n, cells, channels, first, count);
  launch_threads(size_t(n) * count, stream, channel_mean_forward_kernel, n, cells, channels, first,
                 count, maps, means);
}

void channel_mean_backward(int n, int cells, int channels, int first, int count,
                           const float* grad_means, float* grad_maps, StreamHandle stream) {
  check_means(n, cells, channels, first, count);
  launch_threads(size_t(n) * cells * count, stream, channel_mean_backward_kernel, n, cells,
                 channels, first, count, grad_means, grad_maps);
}

void triangulation_weights(int batch, int views, int joints, const float* confidences,
                           float* weights, StreamHandle stream) {
  check_joints(batch, views, joints);
  launch_threads(size_t(batch) * joints, stream, triangulation_weights_kernel, batch, views, joints,
                 confidences, weights);
}

void triangulation_weights_backward(int batch, int views, int joints, const float* confidences,
                                    const float* grad_weights, float* grad_confidences,
                                    StreamHandle stream) {
  check_joints(batch, views, joints);
  launch_threads(size_t(batch) * joints, stream, triangulation_weights_backward_kernel, batch,
                 views, joints, confidences, grad_weights, grad_confidences);
}

void triangulate_joints(int batch, int views, int joints, const float* projections,
                        const float* points, const float* weights, float* joints_3d, uint8_t* ok,
                        StreamHandle stream) {
  check_joints(batch, views, joints);
  launch_threads(size_t(batch) * joints, stream, triangulate_joints_kernel, batch, views, joints,
                 projections, points, weights, joints_3d, ok);
}

void triangulate_joints_backward(int batch, int views, int joints, const float* projections,
                                 const float* points, const float* weights,
                                 const float* grad_joints_3d, float* grad_points,
                                 float* grad_weights, StreamHandle stream) {
  check_joints(batch, views, joints);
  launch_threads(size_t(batch) * joints, stream, triangulate_joints_backward_kernel, batch, views,
                 joints, projections, points, weights, grad_joints_3d, grad_points, grad_weights);
}

}  // namespace mvibr::nn::cuda
