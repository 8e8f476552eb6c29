// The layers a convolutional network runs over feature maps, as one interface that each backend
// implements: the CPU's (conv_layers.h) and the CUDA one (cuda_layers.h).
// - A graph written against MapOps (resunet_graph.h) is the same network on both backends.
// - Semantics are conv_layers.h's, call for call; a CUDA implementation queues on its stream.
// - Pointers are the backend's memory (host or device); make_buffer gives that memory.
// - Maps are in the ops' layout(): the CUDA ones planar, the CPU's either (cpu_map_ops).
#pragma once

#include <cstddef>
#include <memory>

#include "mvibr/nn/conv_layers.h"

namespace mvibr::nn {

// Backend memory for a workspace: reserve(count) returns at least `count` floats; growing may
// lose the contents.
class MapBuffer {
 public:
  virtual ~MapBuffer() = default;
  virtual float* reserve(size_t count) = 0;
  virtual size_t capacity() const = 0;  // floats
};

class MapOps {
 public:
  virtual ~MapOps() = default;
  virtual std::unique_ptr<MapBuffer> make_buffer() const = 0;
  virtual MapLayout layout() const = 0;  // of every map these ops read and write

  // Data movement.
  virtual void zero(float* data, size_t count) = 0;
  // Channels-last in [B, H, W, count] -> channels [first, first + count) of maps (overwritten).
  virtual void channels_last_to_maps(const float* in, int first, int count,
                                     const MapBatch& maps) = 0;
  // Channels [first, first + count) of maps -> channels-last out [B, H, W, count].
  virtual void maps_to_channels_last(const MapBatch& maps, int first, int count, float* out) = 0;
  // IBRNet's skipconnect: cat([decoder, encoder zero-padded to the decoder's size]) along
  // channels (F.pad's split: diff // 2 before); the backward overwrites both gradients.
  virtual void skip_concat_forward(const MapBatch& decoder, const MapBatch& encoder,
                                   float* out) = 0;
  virtual void skip_concat_backward(const float* grad_out, const MapBatch& decoder,
                                    const MapBatch& encoder, float* grad_decoder,
                                    float* grad_encoder) = 0;

  // Layers (conv_layers.h). kept_input: conv2d_kept_input_floats(shape) floats (may be 0: the
  // GPU's keeps none, and may then be null) that the forward fills for the backward.
  virtual size_t conv2d_kept_input_floats(const ConvShape& shape) const = 0;
  virtual void conv2d_forward(const ConvShape& shape, const float* x, const float* weight,
                              const float* bias, float* y, float* kept_input) = 0;
  virtual void conv2d_backward(const ConvShape& shape, const float* x, const float* weight,
                               const float* grad_y, const ConvGradients& grads,
                               const float* kept_input, const uint16_t* rounded_grad_y) = 0;
  virtual bool conv2d_rounds_output_gradient(const ConvShape& shape) const = 0;
  // statistics: kInstanceNormStatisticsFloats per plane, which the forward may fill for the
  // backward (the CPU's does; the GPU's backward takes them again).
  virtual void instance_norm_forward(const InstanceNormShape& shape, const float* x,
                                     const float* gamma, const float* beta, const float* residual,
                                     Activation activation, float* out, float* statistics) = 0;
  // rounded_grad: as conv_layers.h's, where conv2d_rounds_output_gradient (never on the GPU).
  virtual void instance_norm_backward(const InstanceNormShape& shape, const float* x,
                                      const float* gamma, const float* statistics,
                                      Activation activation, const float* out, float* grad,
                                      float* grad_residual, float* grad_gamma, float* grad_beta,
                                      uint16_t* rounded_grad) = 0;
};

// The CPU's, on host memory, for maps in `layout` (stateless; OpenMP inside the layers).
MapOps& cpu_map_ops(MapLayout layout = MapLayout::kPlanar);

}  // namespace mvibr::nn
