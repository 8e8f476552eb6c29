// Cross-view fusion on the GPU (see nn/cuda_pose.h): the CPU layer's (nn/cross_view_fusion.h)
// own-view term as one element-wise kernel, and each instant's view pairs as cuBLAS GEMMs read
// and written straight in the backbone's channels-last maps.
//
// cuBLAS is column-major: instant i's view v of the maps [cells, channels] row-major is, to
// cuBLAS, h^T [joints, cells] with leading dimension `channels` (its first `joints` rows), the
// fused map and its gradient g^T [joints, cells] with leading dimension `joints`, and a pair's
// weight W [P, P] row-major is W^T with leading dimension P (P = cells). So, with a = a_other:
//   forward       fused_t^T      += a h_s^T W          Sgemm(N, T, joints, cells, cells)
//   grad heatmap  grad_h_s^T     += a g_t^T W^T        Sgemm(N, N, joints, cells, cells)
//   grad weight   grad_W_ts^T    += a g_t h_s^T        Sgemm(T, N, cells, cells, joints)
// every one with beta 1, instant by instant; the own-view terms 0.4 h_t and 0.4 g_s come first.
// fp32 (the pose model's GPU step is fp32 only).
#include <string>

#include "../src/cuda/nn_context.h"
#include "common.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_pose.h"

namespace mvibr::nn::cuda {

namespace {

// out[e] (=, or += with accumulate) own_weight * in[e] over e = (sample-cell, joint): `in` has
// `in_channels` channels a cell, `out` has `out_channels`; both their first `joints`.
__global__ void own_view_kernel(size_t sample_cells, int joints, int in_channels, int out_channels,
                                float own_weight, bool accumulate, const float* in, float* out) {
  for (size_t e = grid_thread_index(); e < sample_cells * size_t(joints);
       e += grid_thread_count()) {
    const size_t cell = e / size_t(joints), j = e % size_t(joints);
    const float value = own_weight * in[cell * size_t(in_channels) + j];
    float& target = out[cell * size_t(out_channels) + j];
    target = accumulate ? target + value : value;
  }
}

// The own-view term over every instant's views: out (=, or += with accumulate) 0.4 in, where
// `in` has in_channels channels a cell and `out` out_channels, both their first `joints`.
void own_view(cudaStream_t stream, const CrossViewFusion& layer, int instants, int joints,
              int in_channels, int out_channels, bool accumulate, const float* in, float* out) {
  const size_t sample_cells = size_t(instants) * size_t(layer.views()) * size_t(layer.pixels());
  launch_threads(sample_cells * size_t(joints), stream, own_view_kernel, sample_cells, joints,
                 in_channels, out_channels, float(CrossViewFusion::kOwnWeight), accumulate, in,
                 out);
}

void check_fusion(const CrossViewFusion& layer, int instants, int channels, int joints) {
  if (instants < 1 || joints < 1 || channels < joints) {
    throw InvalidArgument("cross-view fusion on the GPU: " + std::to_string(instants) +
                          " instants of " + std::to_string(joints) + " heatmaps in " +
                          std::to_string(channels) + " channels (" + std::to_string(layer.views()) +
                          " views): needs an instant and a heatmap, and the heatmaps among the "
                          "channels");
  }
}

}  // namespace

void cross_view_fusion_forward(Context& context, const CrossViewFusion& layer, const float* weights,
                               int instants, int channels, int joints, const float* maps,
                               float* fused) {
  check_fusion(layer, instants, channels, joints);
  Context::Impl& c = context.impl();
  const int V = layer.views(), P = layer.pixels();
  const size_t in_map = size_t(P) * size_t(channels), out_map = size_t(P) * size_t(joints);
  own_view(c.stream, layer, instants, joints, channels, joints, false, maps, fused);
  const float alpha = float(layer.other_weight()), one = 1.0f;
  for (int i = 0; i < instants; ++i) {
    for (int t = 0; t < V; ++t) {
      float* out = fused + (size_t(i) * size_t(V) + size_t(t)) * out_map;
      for (int s = 0; s < V; ++s) {
        if (s == t) continue;
        const float* source = maps + (size_t(i) * size_t(V) + size_t(s)) * in_map;
        MVIBR_CUBLAS_CHECK(
            cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_T, joints, P, P, &alpha, source, channels,
                        weights + layer.weight_offset(layer.pair(t, s)), P, &one, out, joints));
      }
    }
  }
}

void cross_view_fusion_backward(Context& context, const CrossViewFusion& layer,
                                const float* weights, float* grad_weights, int instants,
                                int channels, int joints, const float* maps,
                                const float* grad_fused, float* grad_maps) {
  check_fusion(layer, instants, channels, joints);
  Context::Impl& c = context.impl();
  const int V = layer.views(), P = layer.pixels();
  const size_t in_map = size_t(P) * size_t(channels), out_map = size_t(P) * size_t(joints);
  own_view(c.stream, layer, instants, joints, joints, channels, true, grad_fused, grad_maps);
  const float alpha = float(layer.other_weight()), one = 1.0f;
  for (int i = 0; i < instants; ++i) {
    for (int s = 0; s < V; ++s) {
      const size_t source = (size_t(i) * size_t(V) + size_t(s)) * in_map;
      for (int t = 0; t < V; ++t) {
        if (t == s) continue;
        const size_t weight = layer.weight_offset(layer.pair(t, s));
        const float* grad_target = grad_fused + (size_t(i) * size_t(V) + size_t(t)) * out_map;
        MVIBR_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_N, CUBLAS_OP_N, joints, P, P, &alpha,
                                       grad_target, joints, weights + weight, P, &one,
                                       grad_maps + source, channels));
        MVIBR_CUBLAS_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, P, P, joints, &alpha,
                                       grad_target, joints, maps + source, channels, &one,
                                       grad_weights + weight, P));
      }
    }
  }
}

}  // namespace mvibr::nn::cuda
