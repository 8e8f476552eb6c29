// IBRNet's ResUNet feature network, forward and backward (see feature_net.h). The network is a
// fixed wiring of conv units (conv → instance norm → activation), so forward and backward are
// written out by hand in mirror order rather than through a graph: forward records each unit's
// input, convolution output and output in the workspace, backward walks the units in reverse.
#include "mvibr/nn/feature_net.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "mvibr/core/error.h"

namespace mvibr::nn {

struct ResUNet::Workspace::State {
  struct UnitRecord {
    MapBatch input, conv_output, output;  // conv_output: what the norm normalised
  };

  // Forward's tensors, handed out in the same order on every call of one size so that they are
  // allocated once. Inner vectors keep their storage when the outer one grows.
  std::vector<std::vector<float>> buffers;
  size_t next = 0;
  bool forward_done = false;
  std::vector<UnitRecord> units;
  MapBatch images, stages[3], up3, skip3, up2, skip2, features, out;

  // Scratch shared by all units: the padded input and its gradient; backward's gradients.
  std::vector<float> padded, grad_padded, grad_a, grad_b, grad_inner, grad_identity, grad_skip[2];

  float* take(size_t count) {
    if (next == buffers.size()) buffers.emplace_back();
    std::vector<float>& buffer = buffers[next++];
    buffer.resize(count);
    return buffer.data();
  }
  MapBatch take(int batch, int channels, int height, int width) {
    MapBatch maps{nullptr, batch, channels, height, width};
    maps.data = take(maps.size());
    return maps;
  }
};

ResUNet::Workspace::Workspace() : state_(std::make_unique<State>()) {}
ResUNet::Workspace::~Workspace() = default;

size_t ResUNet::Workspace::bytes() const {
  size_t floats = 0;
  for (const auto& buffer : state_->buffers) floats += buffer.capacity();
  for (const auto* scratch : {&state_->padded, &state_->grad_padded, &state_->grad_a,
                              &state_->grad_b, &state_->grad_inner, &state_->grad_identity,
                              &state_->grad_skip[0], &state_->grad_skip[1]}) {
    floats += scratch->capacity();
  }
  return floats * sizeof(float);
}

namespace {

float* ensure(std::vector<float>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

float* zeroed(float* data, size_t count) {
  std::fill(data, data + count, 0.0f);
  return data;
}

void add(float* target, const float* values, size_t count) {
  const long long n = static_cast<long long>(count);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i) target[i] += values[i];
}

// images [V, H, W, 3] (channels last, as mvibr stores them) → [V, 3, H, W].
void images_to_planar(const float* images, MapBatch maps) {
  const size_t plane = maps.plane_size();
#pragma omp parallel for schedule(static)
  for (int v = 0; v < maps.batch; ++v) {
    const float* in = images + size_t(v) * plane * 3;
    float* out = maps.data + size_t(v) * plane * 3;
    for (size_t i = 0; i < plane; ++i) {
      for (size_t c = 0; c < 3; ++c) out[c * plane + i] = in[i * 3 + c];
    }
  }
}

// Channels [first, first + count) of maps → [V, H, W, count] (the rendering core's layout), and
// its transpose back, which overwrites those channels of grad_maps.
void channels_to_last(const MapBatch& maps, int first, int count, float* out) {
  const size_t plane = maps.plane_size();
#pragma omp parallel for schedule(static)
  for (int v = 0; v < maps.batch; ++v) {
    const float* in = maps.data + (size_t(v) * size_t(maps.channels) + size_t(first)) * plane;
    float* result = out + size_t(v) * plane * size_t(count);
    for (size_t i = 0; i < plane; ++i) {
      for (size_t c = 0; c < size_t(count); ++c) result[i * size_t(count) + c] = in[c * plane + i];
    }
  }
}

void channels_from_last(const float* grad, int first, int count, MapBatch grad_maps) {
  const size_t plane = grad_maps.plane_size();
#pragma omp parallel for schedule(static)
  for (int v = 0; v < grad_maps.batch; ++v) {
    const float* in = grad + size_t(v) * plane * size_t(count);
    float* out = grad_maps.data + (size_t(v) * size_t(grad_maps.channels) + size_t(first)) * plane;
    for (size_t i = 0; i < plane; ++i) {
      for (size_t c = 0; c < size_t(count); ++c) out[c * plane + i] = in[i * size_t(count) + c];
    }
  }
}

// IBRNet's skipconnect(encoder, decoder): cat([decoder, pad(encoder)]) along channels, where
// pad zero-pads the encoder's maps to the decoder's size as F.pad(diff // 2 before, the rest
// after). Sizes differ by up to 3 where the image is not a multiple of 16.
struct SkipPlacement {
  int top, left;
};

SkipPlacement skip_placement(const MapBatch& decoder, const MapBatch& encoder) {
  return {(decoder.height - encoder.height) / 2, (decoder.width - encoder.width) / 2};
}

void skip_concat(const MapBatch& decoder, const MapBatch& encoder, MapBatch out) {
  const SkipPlacement at = skip_placement(decoder, encoder);
  const size_t plane = out.plane_size(), decoder_values = size_t(decoder.channels) * plane;
  const size_t encoder_plane = encoder.plane_size(), encoder_width = size_t(encoder.width);
#pragma omp parallel for schedule(static)
  for (int v = 0; v < out.batch; ++v) {
    float* view = out.data + size_t(v) * size_t(out.channels) * plane;
    std::copy_n(decoder.data + size_t(v) * decoder_values, decoder_values, view);
    float* padded = view + decoder_values;
    std::fill(padded, padded + size_t(encoder.channels) * plane, 0.0f);
    for (size_t c = 0; c < size_t(encoder.channels); ++c) {
      const float* source =
          encoder.data + (size_t(v) * size_t(encoder.channels) + c) * encoder_plane;
      float* target = padded + c * plane + size_t(at.top) * size_t(out.width) + size_t(at.left);
      for (size_t i = 0; i < size_t(encoder.height); ++i) {
        std::copy_n(source + i * encoder_width, encoder_width, target + i * size_t(out.width));
      }
    }
  }
}

// The gradient of skip_concat: the decoder's part (overwrites grad_decoder) and the encoder's,
// cropped back (overwrites grad_encoder).
void skip_concat_backward(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                          float* grad_decoder, float* grad_encoder) {
  const SkipPlacement at = skip_placement(decoder, encoder);
  const size_t plane = decoder.plane_size(), decoder_values = size_t(decoder.channels) * plane;
  const size_t encoder_plane = encoder.plane_size(), encoder_width = size_t(encoder.width);
  const size_t channels = size_t(decoder.channels + encoder.channels);
#pragma omp parallel for schedule(static)
  for (int v = 0; v < decoder.batch; ++v) {
    const float* view = grad_out + size_t(v) * channels * plane;
    std::copy_n(view, decoder_values, grad_decoder + size_t(v) * decoder_values);
    const float* padded = view + decoder_values;
    for (size_t c = 0; c < size_t(encoder.channels); ++c) {
      const float* source =
          padded + c * plane + size_t(at.top) * size_t(decoder.width) + size_t(at.left);
      float* target = grad_encoder + (size_t(v) * size_t(encoder.channels) + c) * encoder_plane;
      for (size_t i = 0; i < size_t(encoder.height); ++i) {
        std::copy_n(source + i * size_t(decoder.width), encoder_width, target + i * encoder_width);
      }
    }
  }
}

// The input as the convolution reads it: reflect-padded into `scratch`, or itself when pad is 0.
MapBatch reflect_padded(const MapBatch& input, int pad, std::vector<float>& scratch) {
  if (pad == 0) return input;
  MapBatch padded = input;
  padded.height += 2 * pad;
  padded.width += 2 * pad;
  padded.data = ensure(scratch, padded.size());
  reflect_pad_forward(input.batch * input.channels, input.height, input.width, pad, input.data,
                      padded.data);
  return padded;
}

ConvShape conv_shape(const MapBatch& input, int out_channels, int kernel, int stride) {
  return {input.batch, input.channels, out_channels, input.height, input.width, kernel, stride};
}

std::string stage_name(int stage, int block) {
  return "layer" + std::to_string(stage + 1) + "." + std::to_string(block) + ".";
}

}  // namespace

ResUNetOptions ResUNetOptions::preset(ResUNetPreset preset) {
  ResUNetOptions options;
  if (preset == ResUNetPreset::kSmall) {
    options.widths = {16, 32, 64};
    options.blocks = {1, 1, 1};
    options.decoder_widths = {32, 16};
    options.coarse_out_ch = 16;
    options.fine_out_ch = 16;
  }
  return options;
}

int ResUNet::add_unit(const std::string& conv_name, int in_channels, int out_channels, int kernel,
                      int stride, bool bias, Activation activation, const std::string& norm_name) {
  const auto feature = ParameterGroup::kFeature;
  ConvUnit unit;
  unit.name = conv_name;
  unit.weight = parameters_->add(prefix_ + conv_name + ".weight",
                                 {out_channels, in_channels, kernel, kernel}, feature);
  if (bias) unit.bias = parameters_->add(prefix_ + conv_name + ".bias", {out_channels}, feature);
  unit.gamma = parameters_->add(prefix_ + norm_name + ".weight", {out_channels}, feature);
  unit.beta = parameters_->add(prefix_ + norm_name + ".bias", {out_channels}, feature);
  unit.in_channels = in_channels;
  unit.out_channels = out_channels;
  unit.kernel = kernel;
  unit.stride = stride;
  unit.activation = activation;
  units_.push_back(unit);
  return int(units_.size()) - 1;
}

ResUNet::ResUNet(const ResUNetOptions& options, ParameterSet* parameters, const std::string& prefix)
    : options_(options), parameters_(parameters), prefix_(prefix) {
  const auto& w = options.widths;
  const auto& d = options.decoder_widths;
  const bool positive = std::min({w[0], w[1], w[2], options.blocks[0], options.blocks[1],
                                  options.blocks[2], d[0], d[1], options.coarse_out_ch}) > 0;
  if (!positive || (!options.coarse_only && options.fine_out_ch < 1)) {
    throw InvalidArgument("feature network: widths, blocks and output channels must be positive");
  }
  stem_ = add_unit("conv1", 3, w[0], 7, 2, false, Activation::kRelu, "bn1");
  int in_channels = w[0];
  for (int stage = 0; stage < 3; ++stage) {
    for (int b = 0; b < options.blocks[size_t(stage)]; ++b) {
      const std::string name = stage_name(stage, b);
      const int width = w[size_t(stage)], stride = b == 0 ? 2 : 1;
      Block block;
      block.conv1 = add_unit(name + "conv1", in_channels, width, 3, stride, false,
                             Activation::kRelu, name + "bn1");
      // The ReLU after conv2's norm comes after the identity is added (unit_forward's residual).
      block.conv2 =
          add_unit(name + "conv2", width, width, 3, 1, false, Activation::kRelu, name + "bn2");
      if (stride != 1 || in_channels != width) {
        block.downsample = add_unit(name + "downsample.0", in_channels, width, 1, stride, false,
                                    Activation::kNone, name + "downsample.1");
      }
      stages_[size_t(stage)].push_back(block);
      in_channels = width;
    }
  }
  upconv3_ =
      add_unit("upconv3.conv.conv", w[2], d[0], 3, 1, true, Activation::kElu, "upconv3.conv.bn");
  iconv3_ = add_unit("iconv3.conv", d[0] + w[1], d[0], 3, 1, true, Activation::kElu, "iconv3.bn");
  upconv2_ =
      add_unit("upconv2.conv.conv", d[0], d[1], 3, 1, true, Activation::kElu, "upconv2.conv.bn");
  const int out = options.out_channels();
  iconv2_ = add_unit("iconv2.conv", d[1] + w[0], out, 3, 1, true, Activation::kElu, "iconv2.bn");
  out_weight_ =
      parameters_->add(prefix_ + "out_conv.weight", {out, out, 1, 1}, ParameterGroup::kFeature);
  out_bias_ = parameters_->add(prefix_ + "out_conv.bias", {out}, ParameterGroup::kFeature);
}

void ResUNet::initialize(Initializer& initializer) {
  // In registration order, so that one seed gives one network whatever else shares the set.
  for (const ConvUnit& unit : units_) {
    const float bound = 1.0f / std::sqrt(float(unit.in_channels * unit.kernel * unit.kernel));
    initializer.uniform(parameters_->value(unit.weight), parameters_->info(unit.weight).size,
                        bound);
    if (unit.bias.index != SIZE_MAX) {
      initializer.uniform(parameters_->value(unit.bias), size_t(unit.out_channels), bound);
    }
    initializer.constant(parameters_->value(unit.gamma), size_t(unit.out_channels), 1.0f);
    initializer.constant(parameters_->value(unit.beta), size_t(unit.out_channels), 0.0f);
  }
  const int out = options_.out_channels();
  const float bound = 1.0f / std::sqrt(float(out));
  initializer.uniform(parameters_->value(out_weight_), size_t(out) * size_t(out), bound);
  initializer.uniform(parameters_->value(out_bias_), size_t(out), bound);
}

std::pair<int, int> ResUNet::output_size(int height, int width) {
  if (height < 17 || width < 17) {
    throw InvalidArgument("the feature network needs images of at least 17x17 pixels, not " +
                          std::to_string(width) + "x" + std::to_string(height));
  }
  // Four stride-2 layers, each rounding up; two x2 upsamplings back.
  return {4 * ((height + 15) / 16), 4 * ((width + 15) / 16)};
}

MapBatch ResUNet::unit_forward(int index, const MapBatch& input, const float* residual,
                               Workspace& workspace) const {
  const ConvUnit& unit = units_[size_t(index)];
  Workspace::State& state = *workspace.state_;
  const MapBatch conv_input = reflect_padded(input, (unit.kernel - 1) / 2, state.padded);
  const ConvShape shape = conv_shape(conv_input, unit.out_channels, unit.kernel, unit.stride);
  Workspace::State::UnitRecord record;
  record.input = input;
  record.conv_output =
      state.take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  record.output = state.take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  const float* bias = unit.bias.index != SIZE_MAX ? value(unit.bias) : nullptr;
  conv2d_forward(shape, conv_input.data, value(unit.weight), bias, record.conv_output.data);
  instance_norm_forward({input.batch, unit.out_channels, int(record.output.plane_size())},
                        record.conv_output.data, value(unit.gamma), value(unit.beta), residual,
                        unit.activation, record.output.data);
  state.units[size_t(index)] = record;
  return record.output;
}

void ResUNet::forward(int views, int height, int width, const float* images, Workspace* workspace,
                      float* coarse_out, float* fine_out) const {
  const auto [out_height, out_width] = output_size(height, width);
  if (views < 1 || !images || !workspace) {
    throw InvalidArgument("feature network forward: needs at least one view, images, workspace");
  }
  Workspace::State& state = *workspace->state_;
  state.next = 0;
  state.forward_done = false;
  state.units.assign(units_.size(), {});
  state.images = state.take(views, 3, height, width);
  images_to_planar(images, state.images);

  MapBatch x = unit_forward(stem_, state.images, nullptr, *workspace);
  for (int stage = 0; stage < 3; ++stage) {
    for (const Block& block : stages_[size_t(stage)]) {
      const MapBatch identity =
          block.downsample >= 0 ? unit_forward(block.downsample, x, nullptr, *workspace) : x;
      const MapBatch inner = unit_forward(block.conv1, x, nullptr, *workspace);
      x = unit_forward(block.conv2, inner, identity.data, *workspace);
    }
    state.stages[stage] = x;
  }

  // Decoder: upsample, conv, then the skip from the encoder at that resolution.
  const auto upsample = [&](const MapBatch& in) {
    MapBatch up = state.take(in.batch, in.channels, 2 * in.height, 2 * in.width);
    upsample2x_forward(in.batch * in.channels, in.height, in.width, in.data, up.data);
    return up;
  };
  const auto skip = [&](const MapBatch& decoder, const MapBatch& encoder) {
    MapBatch cat = state.take(decoder.batch, decoder.channels + encoder.channels, decoder.height,
                              decoder.width);
    skip_concat(decoder, encoder, cat);
    return cat;
  };
  state.up3 = upsample(state.stages[2]);
  state.skip3 = skip(unit_forward(upconv3_, state.up3, nullptr, *workspace), state.stages[1]);
  state.up2 = upsample(unit_forward(iconv3_, state.skip3, nullptr, *workspace));
  state.skip2 = skip(unit_forward(upconv2_, state.up2, nullptr, *workspace), state.stages[0]);
  state.features = unit_forward(iconv2_, state.skip2, nullptr, *workspace);

  const int out = options_.out_channels();
  state.out = state.take(views, out, out_height, out_width);
  conv2d_forward(conv_shape(state.features, out, 1, 1), state.features.data, value(out_weight_),
                 value(out_bias_), state.out.data);
  state.forward_done = true;
  if (coarse_out) channels_to_last(state.out, 0, options_.coarse_out_ch, coarse_out);
  if (fine_out && !options_.coarse_only) {
    channels_to_last(state.out, out - options_.fine_out_ch, options_.fine_out_ch, fine_out);
  }
}

std::vector<ResUNet::UnitOutput> ResUNet::unit_outputs(const Workspace& workspace) const {
  if (!workspace.state_->forward_done) {
    throw InvalidArgument("feature network: no forward through this workspace");
  }
  std::vector<UnitOutput> outputs;
  for (size_t i = 0; i < units_.size(); ++i) {
    outputs.push_back({units_[i].name, units_[i].activation, workspace.state_->units[i].output});
  }
  return outputs;
}

void ResUNet::unit_backward(int index, float* grad_out, float* grad_in, float* grad_residual,
                            Workspace& workspace) const {
  const ConvUnit& unit = units_[size_t(index)];
  Workspace::State& state = *workspace.state_;
  const Workspace::State::UnitRecord& record = state.units[size_t(index)];
  const MapBatch& input = record.input;
  activation_backward(unit.activation, record.output.size(), record.output.data, grad_out);
  if (grad_residual) add(grad_residual, grad_out, record.output.size());
  instance_norm_backward({input.batch, unit.out_channels, int(record.output.plane_size())},
                         record.conv_output.data, value(unit.gamma), grad_out, grad(unit.gamma),
                         grad(unit.beta));

  // The padded input is rebuilt rather than kept: it costs one copy and saves its memory.
  const int pad = (unit.kernel - 1) / 2;
  const MapBatch conv_input = reflect_padded(input, pad, state.padded);
  const ConvShape shape = conv_shape(conv_input, unit.out_channels, unit.kernel, unit.stride);
  // No bias gradient: the instance norm subtracts each plane's mean, so it is exactly zero.
  conv2d_backward_weights(shape, conv_input.data, grad_out, grad(unit.weight), nullptr);
  if (!grad_in) return;
  float* grad_conv_input = ensure(state.grad_padded, conv_input.size());
  conv2d_backward_data(shape, value(unit.weight), grad_out, grad_conv_input);
  if (pad > 0) {
    reflect_pad_backward(input.batch * input.channels, input.height, input.width, pad,
                         grad_conv_input, grad_in);
  } else {
    add(grad_in, grad_conv_input, input.size());
  }
}

void ResUNet::block_backward(const Block& block, float* grad_out, float* grad_in,
                             Workspace& workspace) const {
  Workspace::State& state = *workspace.state_;
  const size_t inner_size = state.units[size_t(block.conv1)].output.size();
  float* grad_inner = zeroed(ensure(state.grad_inner, inner_size), inner_size);
  // Without a downsample the identity is the input itself: its gradient goes straight in.
  float* grad_identity =
      block.downsample >= 0 ? zeroed(ensure(state.grad_identity, inner_size), inner_size) : grad_in;
  unit_backward(block.conv2, grad_out, grad_inner, grad_identity, workspace);
  if (block.downsample >= 0) {
    unit_backward(block.downsample, grad_identity, grad_in, nullptr, workspace);
  }
  unit_backward(block.conv1, grad_inner, grad_in, nullptr, workspace);
}

void ResUNet::backward(Workspace* workspace, const float* grad_coarse,
                       const float* grad_fine) const {
  if (!workspace || !workspace->state_->forward_done) {
    throw InvalidArgument("feature network backward: no forward through this workspace");
  }
  Workspace::State& state = *workspace->state_;
  size_t largest = state.out.size();
  for (const auto& record : state.units) {
    largest = std::max({largest, record.input.size(), record.output.size()});
  }
  float* grad_a = ensure(state.grad_a, largest);
  float* grad_b = ensure(state.grad_b, largest);
  const auto spare = [&](const float* in_use) { return in_use == grad_a ? grad_b : grad_a; };

  // out_conv, from the two channels-last outputs.
  const int out = options_.out_channels();
  MapBatch grad_out = state.out;
  grad_out.data = zeroed(grad_a, state.out.size());
  if (grad_coarse) channels_from_last(grad_coarse, 0, options_.coarse_out_ch, grad_out);
  if (grad_fine && !options_.coarse_only) {
    channels_from_last(grad_fine, out - options_.fine_out_ch, options_.fine_out_ch, grad_out);
  }
  const ConvShape out_shape = conv_shape(state.features, out, 1, 1);
  conv2d_backward_weights(out_shape, state.features.data, grad_out.data, grad(out_weight_),
                          grad(out_bias_));
  float* g = grad_b;
  conv2d_backward_data(out_shape, value(out_weight_), grad_out.data, g);

  // Decoder levels, finest first: iconv ← skip ← upconv ← upsample.
  struct Level {
    int iconv, upconv;
    const MapBatch& skip;
    int encoder_stage;
    const MapBatch& up;
  };
  for (const Level& level : {Level{iconv2_, upconv2_, state.skip2, 0, state.up2},
                             Level{iconv3_, upconv3_, state.skip3, 1, state.up3}}) {
    float* grad_skip = zeroed(spare(g), level.skip.size());
    unit_backward(level.iconv, g, grad_skip, nullptr, *workspace);
    const MapBatch& encoder = state.stages[level.encoder_stage];
    const MapBatch& decoder = state.units[size_t(level.upconv)].output;
    skip_concat_backward(grad_skip, decoder, encoder, g,
                         ensure(state.grad_skip[level.encoder_stage], encoder.size()));
    float* grad_up = zeroed(spare(g), level.up.size());
    unit_backward(level.upconv, g, grad_up, nullptr, *workspace);
    upsample2x_backward(level.up.batch * level.up.channels, level.up.height / 2, level.up.width / 2,
                        grad_up, g);
  }

  // Encoder, last block first; a stage's input gradient starts from the skip's.
  for (int stage = 2; stage >= 0; --stage) {
    const std::vector<Block>& blocks = stages_[size_t(stage)];
    for (size_t b = blocks.size(); b-- > 0;) {
      const size_t in_size = state.units[size_t(blocks[b].conv1)].input.size();
      float* grad_in =
          b == 0 && stage > 0 ? state.grad_skip[stage - 1].data() : zeroed(spare(g), in_size);
      block_backward(blocks[b], g, grad_in, *workspace);
      g = grad_in;
    }
  }
  // The images need no gradient, so conv1's data pass is skipped.
  unit_backward(stem_, g, nullptr, nullptr, *workspace);
}

}  // namespace mvibr::nn
