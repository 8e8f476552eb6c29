// The GPU ResUNet (see nn/cuda_feature_net.h): the graph the CPU network runs
// (nn/resunet_graph.h), over the GPU layers (nn/cuda_layers.h) and the data movement of
// kernels/feature_maps.cu, on one Context's stream.
#include <memory>

#include "check.h"
#include "feature_maps.h"
#include "mvibr/core/device.h"
#include "mvibr/nn/cuda_feature_net.h"

namespace mvibr::nn::cuda {

namespace {

class DeviceBuffer final : public MapBuffer {
 public:
  float* reserve(size_t count) override { return values_.reserve(count); }
  size_t capacity() const override { return values_.size(); }

 private:
  DeviceArray<float> values_;
};

// MapOps on a Context: each call queued on its stream.
class CudaMapOps final : public MapOps {
 public:
  explicit CudaMapOps(Context* context) : context_(context) {}
  void bind(Context* context) { context_ = context; }

  std::unique_ptr<MapBuffer> make_buffer() const override {
    return std::make_unique<DeviceBuffer>();
  }
  MapLayout layout() const override { return MapLayout::kPlanar; }  // cuDNN's NCHW
  void zero(float* data, size_t count) override {
    MVIBR_CUDA_CHECK(cudaMemsetAsync(data, 0, count * sizeof(float), stream()));
  }
  void channels_last_to_maps(const float* in, int first, int count, const MapBatch& maps) override {
    cuda::channels_last_to_planar(in, first, count, maps, stream());
  }
  void maps_to_channels_last(const MapBatch& maps, int first, int count, float* out) override {
    cuda::planar_to_channels_last(maps, first, count, out, stream());
  }
  void skip_concat_forward(const MapBatch& decoder, const MapBatch& encoder, float* out) override {
    cuda::skip_concat_forward(decoder, encoder, out, stream());
  }
  void skip_concat_backward(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                            float* grad_decoder, float* grad_encoder) override {
    cuda::skip_concat_backward(grad_out, decoder, encoder, grad_decoder, grad_encoder, stream());
  }
  // Padding again on the GPU is one cheap kernel; nothing is kept.
  size_t conv2d_kept_input_floats(const ConvShape&) const override { return 0; }
  void conv2d_forward(const ConvShape& shape, const float* x, const float* weight,
                      const float* bias, float* y, float*) override {
    cuda::conv2d_forward(*context_, shape, x, weight, bias, y);
  }
  void conv2d_backward(const ConvShape& shape, const float* x, const float* weight,
                       const float* grad_y, const ConvGradients& grads, const float*,
                       const uint16_t*) override {
    cuda::conv2d_backward(*context_, shape, x, weight, grad_y, grads);
  }
  bool conv2d_rounds_output_gradient(const ConvShape&) const override { return false; }  // fp32
  // No statistics kept: the backward kernel takes them again.
  void instance_norm_forward(const InstanceNormShape& shape, const float* x, const float* gamma,
                             const float* beta, const float* residual, Activation activation,
                             float* out, float*) override {
    cuda::instance_norm_forward(*context_, shape, x, gamma, beta, residual, activation, out);
  }
  // Its three kernels in turn (the CPU's runs the three on each plane while it is in cache).
  void instance_norm_backward(const InstanceNormShape& shape, const float* x, const float* gamma,
                              const float*, Activation activation, const float* out, float* grad,
                              float* grad_residual, float* grad_gamma, float* grad_beta,
                              uint16_t*) override {
    const size_t count = size_t(shape.batch) * size_t(shape.channels) * size_t(shape.plane_size);
    cuda::activation_backward(activation, count, out, grad, stream());
    if (grad_residual) cuda::add_into(count, grad, grad_residual, stream());
    cuda::instance_norm_backward(*context_, shape, x, gamma, grad, grad_gamma, grad_beta);
  }

 private:
  StreamHandle stream() const { return context_->stream(); }
  Context* context_;
};

}  // namespace

struct ResUNet::Impl {
  explicit Impl(const nn::ResUNet& network)
      : options(network.options()), graph(network.graph()), ops(nullptr), workspace(ops) {}
  ResUNetOptions options;
  ResUNetGraph graph;
  CudaMapOps ops;  // bound to the calling Context for each forward and backward
  ResUNetGraph::Workspace workspace;
};

ResUNet::ResUNet(const nn::ResUNet& network) : impl_(std::make_unique<Impl>(network)) {}

ResUNet::~ResUNet() = default;

const ResUNetOptions& ResUNet::options() const {
  return impl_->options;
}

size_t ResUNet::workspace_bytes() const {
  return impl_->workspace.bytes();
}

void ResUNet::forward(Context& context, int views, int height, int width, const float* images,
                      const float* params, float* coarse_out, float* fine_out) {
  Impl& s = *impl_;
  s.ops.bind(&context);
  s.graph.forward(s.ops, s.workspace, views, height, width, images, params, coarse_out, fine_out);
}

void ResUNet::backward(Context& context, const float* params, float* grads,
                       const float* grad_coarse, const float* grad_fine) {
  Impl& s = *impl_;
  s.ops.bind(&context);
  s.graph.backward(s.ops, s.workspace, params, grads, grad_coarse, grad_fine);
}

std::vector<ResUNet::UnitOutput> ResUNet::unit_outputs() const {
  return impl_->graph.unit_outputs(impl_->workspace);
}

}  // namespace mvibr::nn::cuda
