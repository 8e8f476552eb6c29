// The pose model's own layers on the GPU: soft-argmax (nn/soft_argmax.h), the channel means in
// front of the confidence head (nn/channel_mean.h), the confidences' weights and the
// triangulation (geom/triangulation.h).
// - Each kernel runs the CPU backend's per-map, per-channel or per-joint MVIBR_HD math, one
//   thread per map, mean or joint: the layouts and semantics are those headers'.
// - Asynchronous on `stream`, device pointers; only in a build with the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mvibr/nn/cuda_layers.h"  // StreamHandle
#include "mvibr/nn/soft_argmax.h"

namespace mvibr::nn::cuda {

void soft_argmax_forward(int n, int height, int width, int channels, int joints,
                         const float* heatmaps, const SoftArgmaxOptions& options, float* points,
                         StreamHandle stream);
void soft_argmax_backward(int n, int height, int width, int channels, int joints,
                          const float* heatmaps, const SoftArgmaxOptions& options,
                          const float* grad_points, float* grad_heatmaps, StreamHandle stream);

void channel_mean_forward(int n, int cells, int channels, int first, int count, const float* maps,
                          float* means, StreamHandle stream);
void channel_mean_backward(int n, int cells, int channels, int first, int count,
                           const float* grad_means, float* grad_maps, StreamHandle stream);

void triangulation_weights(int batch, int views, int joints, const float* confidences,
                           float* weights, StreamHandle stream);
void triangulation_weights_backward(int batch, int views, int joints, const float* confidences,
                                    const float* grad_weights, float* grad_confidences,
                                    StreamHandle stream);
// ok [B, J]: 1 where the joint triangulated (the CPU's count of those not ok is the caller's).
void triangulate_joints(int batch, int views, int joints, const float* projections,
                        const float* points, const float* weights, float* joints_3d, uint8_t* ok,
                        StreamHandle stream);
void triangulate_joints_backward(int batch, int views, int joints, const float* projections,
                                 const float* points, const float* weights,
                                 const float* grad_joints_3d, float* grad_points,
                                 float* grad_weights, StreamHandle stream);

}  // namespace mvibr::nn::cuda
