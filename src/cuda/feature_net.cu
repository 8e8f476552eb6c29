// The GPU ResUNet (see nn/cuda_feature_net.h): nn::ResUNet's forward and backward
// (src/nn/feature_net.cpp) line for line, with each CPU layer call replaced by its GPU layer
// (nn/cuda_layers.h) and the CPU's data-movement helpers by kernels/feature_maps.cu. Keeping the
// two in mirror order is what makes them comparable: the same units, the same buffers in the
// same roles, the same accumulation order of every gradient.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "feature_maps.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_feature_net.h"

namespace mvibr::nn::cuda {

namespace {

constexpr size_t kNoBias = SIZE_MAX;

ConvShape conv_shape(const MapBatch& input, int out_channels, int kernel, int stride) {
  return {input.batch, input.channels, out_channels, input.height, input.width, kernel, stride};
}

InstanceNormShape norm_shape(const MapBatch& maps) {
  return {maps.batch, maps.channels, int(maps.plane_size())};
}

float* zeroed(float* data, size_t count, StreamHandle stream) {
  MVIBR_CUDA_CHECK(cudaMemsetAsync(data, 0, count * sizeof(float), stream));
  return data;
}

}  // namespace

struct ResUNet::Impl {
  // A conv unit of nn::ResUNet with its parameters as offsets into the flat buffers.
  struct Unit {
    std::string name;
    size_t weight = 0, bias = kNoBias, gamma = 0, beta = 0;
    int in_channels = 0, out_channels = 0, kernel = 1, stride = 1;
    Activation activation = Activation::kNone;
  };
  struct UnitRecord {
    MapBatch input, conv_output, output;  // conv_output: what the norm normalised
  };
  using Block = nn::ResUNet::Block;

  ResUNetOptions options;
  std::vector<Unit> units;
  std::array<std::vector<Block>, 3> stages;
  int stem = -1, upconv3 = -1, iconv3 = -1, upconv2 = -1, iconv2 = -1;
  size_t out_weight = 0, out_bias = 0;

  // The workspace, as nn::ResUNet::Workspace: forward's tensors handed out in the same order on
  // every call, so that they are allocated once; then the scratch shared by all units.
  std::vector<DeviceArray<float>> buffers;
  size_t next = 0;
  bool forward_done = false;
  std::vector<UnitRecord> records;
  MapBatch images, stage_outputs[3], up3, skip3, up2, skip2, features, out;
  DeviceArray<float> padded, grad_padded, grad_a, grad_b, grad_inner, grad_identity, grad_skip[2];

  MapBatch take(int batch, int channels, int height, int width) {
    MapBatch maps{nullptr, batch, channels, height, width};
    if (next == buffers.size()) buffers.emplace_back();
    maps.data = buffers[next++].reserve(maps.size());
    return maps;
  }

  // The input as the convolution reads it: reflect-padded into `padded`, or itself when pad is 0.
  MapBatch reflect_padded(const MapBatch& input, int pad, StreamHandle stream) {
    if (pad == 0) return input;
    MapBatch result = input;
    result.height += 2 * pad;
    result.width += 2 * pad;
    result.data = padded.reserve(result.size());
    reflect_pad_forward(input.batch * input.channels, input.height, input.width, pad, input.data,
                        result.data, stream);
    return result;
  }

  MapBatch unit_forward(Context& context, int index, const MapBatch& input, const float* residual,
                        const float* params);
  void unit_backward(Context& context, int index, const float* params, float* grads,
                     float* grad_out, float* grad_in, float* grad_residual);
  void block_backward(Context& context, const Block& block, const float* params, float* grads,
                      float* grad_out, float* grad_in);
};

ResUNet::ResUNet(const nn::ResUNet& network) : impl_(std::make_unique<Impl>()) {
  const nn::ResUNet::Wiring wiring = network.wiring();
  const auto offset = [&](Parameter p) { return wiring.parameters.info(p).offset; };
  Impl& s = *impl_;
  s.options = network.options();
  for (const nn::ResUNet::ConvUnit& unit : wiring.units) {
    Impl::Unit resolved;
    resolved.name = unit.name;
    resolved.weight = offset(unit.weight);
    if (unit.bias.index != SIZE_MAX) resolved.bias = offset(unit.bias);
    resolved.gamma = offset(unit.gamma);
    resolved.beta = offset(unit.beta);
    resolved.in_channels = unit.in_channels;
    resolved.out_channels = unit.out_channels;
    resolved.kernel = unit.kernel;
    resolved.stride = unit.stride;
    resolved.activation = unit.activation;
    s.units.push_back(resolved);
  }
  s.stages = wiring.stages;
  s.stem = wiring.stem;
  s.upconv3 = wiring.upconv3;
  s.iconv3 = wiring.iconv3;
  s.upconv2 = wiring.upconv2;
  s.iconv2 = wiring.iconv2;
  s.out_weight = offset(wiring.out_weight);
  s.out_bias = offset(wiring.out_bias);
}

ResUNet::~ResUNet() = default;

const ResUNetOptions& ResUNet::options() const {
  return impl_->options;
}

size_t ResUNet::workspace_bytes() const {
  const Impl& s = *impl_;
  size_t floats = 0;
  for (const auto& buffer : s.buffers) floats += buffer.size();
  for (const auto* scratch : {&s.padded, &s.grad_padded, &s.grad_a, &s.grad_b, &s.grad_inner,
                              &s.grad_identity, &s.grad_skip[0], &s.grad_skip[1]}) {
    floats += scratch->size();
  }
  return floats * sizeof(float);
}

MapBatch ResUNet::Impl::unit_forward(Context& context, int index, const MapBatch& input,
                                     const float* residual, const float* params) {
  const Unit& unit = units[size_t(index)];
  const MapBatch conv_input = reflect_padded(input, (unit.kernel - 1) / 2, context.stream());
  const ConvShape shape = conv_shape(conv_input, unit.out_channels, unit.kernel, unit.stride);
  UnitRecord record;
  record.input = input;
  record.conv_output = take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  record.output = take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  const float* bias = unit.bias != kNoBias ? params + unit.bias : nullptr;
  conv2d_forward(context, shape, conv_input.data, params + unit.weight, bias,
                 record.conv_output.data);
  instance_norm_forward(context, norm_shape(record.output), record.conv_output.data,
                        params + unit.gamma, params + unit.beta, residual, unit.activation,
                        record.output.data);
  records[size_t(index)] = record;
  return record.output;
}

void ResUNet::forward(Context& context, int views, int height, int width, const float* images,
                      const float* params, float* coarse_out, float* fine_out) {
  const auto [out_height, out_width] = nn::ResUNet::output_size(height, width);
  if (views < 1 || !images || !params) {
    throw InvalidArgument(
        "GPU feature network forward: needs at least one view, images and parameters");
  }
  Impl& s = *impl_;
  const StreamHandle stream = context.stream();
  s.next = 0;
  s.forward_done = false;
  s.records.assign(s.units.size(), {});
  s.images = s.take(views, 3, height, width);
  channels_last_to_planar(images, 0, 3, s.images, stream);

  MapBatch x = s.unit_forward(context, s.stem, s.images, nullptr, params);
  for (int stage = 0; stage < 3; ++stage) {
    for (const Impl::Block& block : s.stages[size_t(stage)]) {
      const MapBatch identity =
          block.downsample >= 0 ? s.unit_forward(context, block.downsample, x, nullptr, params) : x;
      const MapBatch inner = s.unit_forward(context, block.conv1, x, nullptr, params);
      x = s.unit_forward(context, block.conv2, inner, identity.data, params);
    }
    s.stage_outputs[stage] = x;
  }

  // Decoder: upsample, conv, then the skip from the encoder at that resolution.
  const auto upsample = [&](const MapBatch& in) {
    MapBatch up = s.take(in.batch, in.channels, 2 * in.height, 2 * in.width);
    upsample2x_forward(in.batch * in.channels, in.height, in.width, in.data, up.data, stream);
    return up;
  };
  const auto skip = [&](const MapBatch& decoder, const MapBatch& encoder) {
    MapBatch cat =
        s.take(decoder.batch, decoder.channels + encoder.channels, decoder.height, decoder.width);
    skip_concat_forward(decoder, encoder, cat.data, stream);
    return cat;
  };
  s.up3 = upsample(s.stage_outputs[2]);
  s.skip3 = skip(s.unit_forward(context, s.upconv3, s.up3, nullptr, params), s.stage_outputs[1]);
  s.up2 = upsample(s.unit_forward(context, s.iconv3, s.skip3, nullptr, params));
  s.skip2 = skip(s.unit_forward(context, s.upconv2, s.up2, nullptr, params), s.stage_outputs[0]);
  s.features = s.unit_forward(context, s.iconv2, s.skip2, nullptr, params);

  const int out = s.options.out_channels();
  s.out = s.take(views, out, out_height, out_width);
  conv2d_forward(context, conv_shape(s.features, out, 1, 1), s.features.data, params + s.out_weight,
                 params + s.out_bias, s.out.data);
  s.forward_done = true;
  if (coarse_out) planar_to_channels_last(s.out, 0, s.options.coarse_out_ch, coarse_out, stream);
  if (fine_out && !s.options.coarse_only) {
    planar_to_channels_last(s.out, out - s.options.fine_out_ch, s.options.fine_out_ch, fine_out,
                            stream);
  }
}

std::vector<ResUNet::UnitOutput> ResUNet::unit_outputs() const {
  const Impl& s = *impl_;
  if (!s.forward_done) {
    throw InvalidArgument("GPU feature network: no forward yet");
  }
  std::vector<UnitOutput> outputs;
  for (size_t i = 0; i < s.units.size(); ++i) {
    outputs.push_back({s.units[i].name, s.units[i].activation, s.records[i].output});
  }
  return outputs;
}

void ResUNet::Impl::unit_backward(Context& context, int index, const float* params, float* grads,
                                  float* grad_out, float* grad_in, float* grad_residual) {
  const Unit& unit = units[size_t(index)];
  const UnitRecord& record = records[size_t(index)];
  const MapBatch& input = record.input;
  const StreamHandle stream = context.stream();
  activation_backward(unit.activation, record.output.size(), record.output.data, grad_out, stream);
  if (grad_residual) add_into(record.output.size(), grad_out, grad_residual, stream);
  instance_norm_backward(context, norm_shape(record.output), record.conv_output.data,
                         params + unit.gamma, grad_out, grads + unit.gamma, grads + unit.beta);

  // The padded input is rebuilt rather than kept: it costs one copy and saves its memory.
  const int pad = (unit.kernel - 1) / 2;
  const MapBatch conv_input = reflect_padded(input, pad, stream);
  const ConvShape shape = conv_shape(conv_input, unit.out_channels, unit.kernel, unit.stride);
  // No bias gradient: the instance norm subtracts each plane's mean, so it is exactly zero.
  conv2d_backward_weights(context, shape, conv_input.data, grad_out, grads + unit.weight, nullptr);
  if (!grad_in) return;
  float* grad_conv_input = grad_padded.reserve(conv_input.size());
  conv2d_backward_data(context, shape, params + unit.weight, grad_out, grad_conv_input);
  if (pad > 0) {
    reflect_pad_backward(input.batch * input.channels, input.height, input.width, pad,
                         grad_conv_input, grad_in, stream);
  } else {
    add_into(input.size(), grad_conv_input, grad_in, stream);
  }
}

void ResUNet::Impl::block_backward(Context& context, const Block& block, const float* params,
                                   float* grads, float* grad_out, float* grad_in) {
  const StreamHandle stream = context.stream();
  const size_t inner_size = records[size_t(block.conv1)].output.size();
  float* inner = zeroed(grad_inner.reserve(inner_size), inner_size, stream);
  // Without a downsample the identity is the input itself: its gradient goes straight in.
  float* identity = block.downsample >= 0
                        ? zeroed(grad_identity.reserve(inner_size), inner_size, stream)
                        : grad_in;
  unit_backward(context, block.conv2, params, grads, grad_out, inner, identity);
  if (block.downsample >= 0) {
    unit_backward(context, block.downsample, params, grads, identity, grad_in, nullptr);
  }
  unit_backward(context, block.conv1, params, grads, inner, grad_in, nullptr);
}

void ResUNet::backward(Context& context, const float* params, float* grads,
                       const float* grad_coarse, const float* grad_fine) {
  Impl& s = *impl_;
  if (!s.forward_done) {
    throw InvalidArgument("GPU feature network backward: no forward yet");
  }
  if (!params || !grads) {
    throw InvalidArgument("GPU feature network backward: needs parameters and gradients");
  }
  const StreamHandle stream = context.stream();
  size_t largest = s.out.size();
  for (const auto& record : s.records) {
    largest = std::max({largest, record.input.size(), record.output.size()});
  }
  float* grad_a = s.grad_a.reserve(largest);
  float* grad_b = s.grad_b.reserve(largest);
  const auto spare = [&](const float* in_use) { return in_use == grad_a ? grad_b : grad_a; };

  // out_conv, from the two channels-last outputs.
  const int out = s.options.out_channels();
  MapBatch grad_out = s.out;
  grad_out.data = zeroed(grad_a, s.out.size(), stream);
  if (grad_coarse)
    channels_last_to_planar(grad_coarse, 0, s.options.coarse_out_ch, grad_out, stream);
  if (grad_fine && !s.options.coarse_only) {
    channels_last_to_planar(grad_fine, out - s.options.fine_out_ch, s.options.fine_out_ch, grad_out,
                            stream);
  }
  const ConvShape out_shape = conv_shape(s.features, out, 1, 1);
  conv2d_backward_weights(context, out_shape, s.features.data, grad_out.data, grads + s.out_weight,
                          grads + s.out_bias);
  float* g = grad_b;
  conv2d_backward_data(context, out_shape, params + s.out_weight, grad_out.data, g);

  // Decoder levels, finest first: iconv ← skip ← upconv ← upsample.
  struct Level {
    int iconv, upconv;
    const MapBatch& skip;
    int encoder_stage;
    const MapBatch& up;
  };
  for (const Level& level : {Level{s.iconv2, s.upconv2, s.skip2, 0, s.up2},
                             Level{s.iconv3, s.upconv3, s.skip3, 1, s.up3}}) {
    float* grad_skip = zeroed(spare(g), level.skip.size(), stream);
    s.unit_backward(context, level.iconv, params, grads, g, grad_skip, nullptr);
    const MapBatch& encoder = s.stage_outputs[level.encoder_stage];
    const MapBatch& decoder = s.records[size_t(level.upconv)].output;
    skip_concat_backward(grad_skip, decoder, encoder, g,
                         s.grad_skip[level.encoder_stage].reserve(encoder.size()), stream);
    float* grad_up = zeroed(spare(g), level.up.size(), stream);
    s.unit_backward(context, level.upconv, params, grads, g, grad_up, nullptr);
    upsample2x_backward(level.up.batch * level.up.channels, level.up.height / 2, level.up.width / 2,
                        grad_up, g, stream);
  }

  // Encoder, last block first; a stage's input gradient starts from the skip's.
  for (int stage = 2; stage >= 0; --stage) {
    const std::vector<Impl::Block>& blocks = s.stages[size_t(stage)];
    for (size_t b = blocks.size(); b-- > 0;) {
      const size_t in_size = s.records[size_t(blocks[b].conv1)].input.size();
      float* grad_in =
          b == 0 && stage > 0 ? s.grad_skip[stage - 1].data() : zeroed(spare(g), in_size, stream);
      s.block_backward(context, blocks[b], params, grads, g, grad_in);
      g = grad_in;
    }
  }
  // The images need no gradient, so conv1's data pass is skipped.
  s.unit_backward(context, s.stem, params, grads, g, nullptr, nullptr);
}

}  // namespace mvibr::nn::cuda
