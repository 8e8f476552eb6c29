// The GPU ResUNet's data movement (see src/cuda/feature_maps.h): channels-last <-> NCHW for its
// images and outputs, the skip connections' concatenation and its split, and the residual
// gradient's add. All memory-bound copies: one thread per element written, in a grid-stride
// loop, so each output is written once (no atomics) and consecutive threads write consecutive
// addresses.
#include <string>

#include "../src/cuda/feature_maps.h"
#include "common.h"
#include "mvibr/core/error.h"

namespace mvibr::nn::cuda {

namespace {

// Thread e writes maps element (view, first + c, i), e in (view, c, i) order.
__global__ void channels_last_to_planar_kernel(size_t total, size_t plane, int channels, int first,
                                               int count, const float* in, float* maps) {
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t i = e % plane, rest = e / plane;
    const size_t c = rest % size_t(count), view = rest / size_t(count);
    maps[(view * size_t(channels) + size_t(first) + c) * plane + i] =
        in[(view * plane + i) * size_t(count) + c];
  }
}

// Thread e writes out[e], e in (view, i, c) order.
__global__ void planar_to_channels_last_kernel(size_t total, size_t plane, int channels, int first,
                                               int count, const float* maps, float* out) {
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const size_t c = e % size_t(count), rest = e / size_t(count);
    const size_t i = rest % plane, view = rest / plane;
    out[e] = maps[(view * size_t(channels) + size_t(first) + c) * plane + i];
  }
}

// The shapes of one skip connection: decoder [batch, decoder_channels, height, width], encoder
// [batch, encoder_channels, encoder_height, encoder_width] at (top, left) inside it.
struct SkipShape {
  int decoder_channels, encoder_channels, height, width, encoder_height, encoder_width, top, left;
};

SkipShape skip_shape(const MapBatch& decoder, const MapBatch& encoder) {
  if (encoder.batch != decoder.batch || encoder.height > decoder.height ||
      encoder.width > decoder.width) {
    throw InvalidArgument("skip connection on the GPU: encoder maps " +
                          std::to_string(encoder.batch) + "x" + std::to_string(encoder.height) +
                          "x" + std::to_string(encoder.width) + " do not fit decoder maps " +
                          std::to_string(decoder.batch) + "x" + std::to_string(decoder.height) +
                          "x" + std::to_string(decoder.width));
  }
  return {decoder.channels,
          encoder.channels,
          decoder.height,
          decoder.width,
          encoder.height,
          encoder.width,
          (decoder.height - encoder.height) / 2,
          (decoder.width - encoder.width) / 2};
}

// Element e of the concatenation [batch, channels, height, width].
struct SkipElement {
  size_t view;
  int channel, y, x;
};

__device__ __forceinline__ SkipElement skip_element(const SkipShape& s, size_t e) {
  const int x = int(e % size_t(s.width));
  size_t rest = e / size_t(s.width);
  const int y = int(rest % size_t(s.height));
  rest /= size_t(s.height);
  const size_t channels = size_t(s.decoder_channels + s.encoder_channels);
  return {rest / channels, int(rest % channels), y, x};
}

// Where a decoder channel's element comes from: its index in the decoder's view.
__device__ __forceinline__ size_t decoder_index(const SkipShape& s, const SkipElement& at) {
  return (size_t(at.channel) * size_t(s.height) + size_t(at.y)) * size_t(s.width) + size_t(at.x);
}

// Where an encoder channel's element comes from: its index in the encoder's view, or -1 in the
// zero padding around it.
__device__ __forceinline__ long long encoder_index(const SkipShape& s, const SkipElement& at) {
  const int y = at.y - s.top, x = at.x - s.left;
  if (y < 0 || y >= s.encoder_height || x < 0 || x >= s.encoder_width) return -1;
  const long long channel = at.channel - s.decoder_channels;
  return (channel * s.encoder_height + y) * s.encoder_width + x;
}

__global__ void skip_concat_forward_kernel(size_t total, SkipShape s, const float* decoder,
                                           const float* encoder, float* out) {
  const size_t decoder_view = size_t(s.decoder_channels) * s.height * s.width;
  const size_t encoder_view = size_t(s.encoder_channels) * s.encoder_height * s.encoder_width;
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const SkipElement at = skip_element(s, e);
    if (at.channel < s.decoder_channels) {
      out[e] = decoder[at.view * decoder_view + decoder_index(s, at)];
    } else {
      const long long source = encoder_index(s, at);
      out[e] = source < 0 ? 0.0f : encoder[at.view * encoder_view + size_t(source)];
    }
  }
}

// Every element of the concatenation's gradient goes back to the one place it came from, if
// any, so each element of grad_decoder and grad_encoder is written exactly once.
__global__ void skip_concat_backward_kernel(size_t total, SkipShape s, const float* grad_out,
                                            float* grad_decoder, float* grad_encoder) {
  const size_t decoder_view = size_t(s.decoder_channels) * s.height * s.width;
  const size_t encoder_view = size_t(s.encoder_channels) * s.encoder_height * s.encoder_width;
  for (size_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const SkipElement at = skip_element(s, e);
    if (at.channel < s.decoder_channels) {
      grad_decoder[at.view * decoder_view + decoder_index(s, at)] = grad_out[e];
    } else {
      const long long source = encoder_index(s, at);
      if (source >= 0) grad_encoder[at.view * encoder_view + size_t(source)] = grad_out[e];
    }
  }
}

__global__ void add_into_kernel(size_t count, const float* values, float* target) {
  for (size_t i = grid_thread_index(); i < count; i += grid_thread_count()) {
    target[i] = __fadd_rn(target[i], values[i]);
  }
}

void check_channels(const MapBatch& maps, int first, int count) {
  if (first < 0 || count < 1 || first + count > maps.channels) {
    throw InvalidArgument("channels [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") of maps with " +
                          std::to_string(maps.channels) + " channels");
  }
}

// Channels [first, first + count) of `maps` from `from` to `to`, by one of the two kernels above.
void copy_channels(void (*kernel)(size_t, size_t, int, int, int, const float*, float*),
                   const MapBatch& maps, int first, int count, const float* from, float* to,
                   StreamHandle stream) {
  check_channels(maps, first, count);
  const size_t total = size_t(maps.batch) * size_t(count) * maps.plane_size();
  if (total == 0) return;
  MVIBR_LAUNCH(kernel, blocks_for(total, kThreadsPerBlock), kThreadsPerBlock, 0, stream)
  (total, maps.plane_size(), maps.channels, first, count, from, to);
  MVIBR_CUDA_CHECK_LAUNCH();
}

size_t concat_size(const MapBatch& decoder, const MapBatch& encoder) {
  return size_t(decoder.batch) * size_t(decoder.channels + encoder.channels) * decoder.plane_size();
}

}  // namespace

void channels_last_to_planar(const float* in, int first, int count, const MapBatch& maps,
                             StreamHandle stream) {
  copy_channels(channels_last_to_planar_kernel, maps, first, count, in, maps.data, stream);
}

void planar_to_channels_last(const MapBatch& maps, int first, int count, float* out,
                             StreamHandle stream) {
  copy_channels(planar_to_channels_last_kernel, maps, first, count, maps.data, out, stream);
}

void skip_concat_forward(const MapBatch& decoder, const MapBatch& encoder, float* out,
                         StreamHandle stream) {
  const SkipShape shape = skip_shape(decoder, encoder);
  const size_t total = concat_size(decoder, encoder);
  if (total == 0) return;
  MVIBR_LAUNCH(skip_concat_forward_kernel, blocks_for(total, kThreadsPerBlock), kThreadsPerBlock, 0,
               stream)
  (total, shape, decoder.data, encoder.data, out);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void skip_concat_backward(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                          float* grad_decoder, float* grad_encoder, StreamHandle stream) {
  const SkipShape shape = skip_shape(decoder, encoder);
  const size_t total = concat_size(decoder, encoder);
  if (total == 0) return;
  MVIBR_LAUNCH(skip_concat_backward_kernel, blocks_for(total, kThreadsPerBlock), kThreadsPerBlock,
               0, stream)
  (total, shape, grad_out, grad_decoder, grad_encoder);
  MVIBR_CUDA_CHECK_LAUNCH();
}

void add_into(size_t count, const float* values, float* target, StreamHandle stream) {
  if (count == 0) return;
  MVIBR_LAUNCH(add_into_kernel, blocks_for(count, kThreadsPerBlock), kThreadsPerBlock, 0, stream)
  (count, values, target);
  MVIBR_CUDA_CHECK_LAUNCH();
}

}  // namespace mvibr::nn::cuda
