// The pose model's own layers on the GPU: soft-argmax (nn/soft_argmax.h), the channel means in
// front of the confidence head (nn/channel_mean.h), the confidences' weights and the
// triangulation (geom/triangulation.h), and cross-view fusion (nn/cross_view_fusion.h).
// - Each kernel runs the CPU backend's per-map, per-channel or per-joint MVIBR_HD math, one
//   thread per map, mean or joint: the layouts and semantics are those headers'.
// - The fusion is the CPU layer's arithmetic on another layout: its GEMMs on cuBLAS, straight on
//   the backbone's channels-last maps (no gather into rows, no transposed points).
// - Asynchronous on `stream` (the fusion on the Context's), device pointers; only in a build with
//   the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mvibr/nn/cross_view_fusion.h"
#include "mvibr/nn/cuda_layers.h"  // StreamHandle, Context
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

// Cross-view fusion of B instants' channels-last maps [B, V, cells, channels] (V and cells the
// layer's): the first `joints` channels are the heatmaps, fused into [B, V, cells, joints], which
// soft_argmax_forward reads with channels = joints. `weights`: the layer's block values on the
// device (pair k at layer.weight_offset(k)). InvalidArgument on shapes the layer does not fuse.
void cross_view_fusion_forward(Context& context, const CrossViewFusion& layer, const float* weights,
                               int instants, int channels, int joints, const float* maps,
                               float* fused);
// grad_maps' first `joints` channels += the heatmaps' gradients (the other channels untouched);
// the weights' gradients accumulate into grad_weights (the block's gradients, as `weights`).
void cross_view_fusion_backward(Context& context, const CrossViewFusion& layer,
                                const float* weights, float* grad_weights, int instants,
                                int channels, int joints, const float* maps,
                                const float* grad_fused, float* grad_maps);

}  // namespace mvibr::nn::cuda
