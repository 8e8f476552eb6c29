// The ResUNet graph's forward and backward (see resunet_graph.h): the network's fixed wiring of
// conv units, written out in mirror order, each layer call going to the backend's MapOps.
#include "mvibr/nn/resunet_graph.h"

#include <algorithm>

#include "mvibr/core/error.h"

namespace mvibr::nn {

namespace {

// backward's scratch buffers, shared by all units.
enum Scratch {
  kGradA,
  kGradB,
  kGradInner,
  kGradIdentity,
  kGradRounded,  // a unit's output gradient rounded to bf16 (MapOps::conv2d_rounds_output_gradient)
  kGradSkip0,    // kGradSkip0 + stage: the gradient of encoder stage 0 or 1 from its skip
  kScratchSlots = kGradSkip0 + 2
};

// Reflect-padded by (kernel - 1) / 2: the size kept (upsampled, twice the input's).
ConvShape conv_shape(const MapBatch& input, int out_channels, int kernel, int stride,
                     const ResUNetGraph& graph, bool upsample = false) {
  const int scale = upsample ? 2 : 1;
  return {input.batch,         input.channels, out_channels,     scale * input.height,
          scale * input.width, kernel,         stride,           graph.conv_algorithm,
          graph.conv_operands, input.layout,   (kernel - 1) / 2, upsample};
}

ConvShape conv_shape(const MapBatch& input, const ResUNetGraph::Unit& unit,
                     const ResUNetGraph& graph) {
  return conv_shape(input, unit.out_channels, unit.kernel, unit.stride, graph, unit.upsample);
}

InstanceNormShape norm_shape(const MapBatch& maps) {
  return {maps.batch, maps.channels, int(maps.plane_size()), maps.layout};
}

float* zeroed(MapOps& ops, float* data, size_t count) {
  ops.zero(data, count);
  return data;
}

}  // namespace

ResUNetGraph::Workspace::Workspace(const MapOps& ops) : ops_(ops) {
  for (int slot = 0; slot < kScratchSlots; ++slot) scratch_.push_back(ops.make_buffer());
}

size_t ResUNetGraph::Workspace::bytes() const {
  size_t floats = 0;
  for (const auto& buffer : buffers_) floats += buffer->capacity();
  for (const auto& buffer : scratch_) floats += buffer->capacity();
  return floats * sizeof(float);
}

MapBatch ResUNetGraph::Workspace::take(int batch, int channels, int height, int width) {
  MapBatch maps{nullptr, batch, channels, height, width, layout_};
  if (next_ == buffers_.size()) buffers_.push_back(ops_.make_buffer());
  maps.data = buffers_[next_++]->reserve(maps.size());
  return maps;
}

float* ResUNetGraph::Workspace::scratch(int slot, size_t count) {
  return scratch_[size_t(slot)]->reserve(count);
}

std::pair<int, int> ResUNetGraph::output_size(int height, int width, bool shallow) {
  const int least = shallow ? 8 : 17;
  if (height < least || width < least) {
    throw InvalidArgument("the feature network needs images of at least " + std::to_string(least) +
                          "x" + std::to_string(least) + " pixels, not " + std::to_string(width) +
                          "x" + std::to_string(height));
  }
  // Shallow: two stride-2 layers, each rounding up. Else four, and two x2 upsamplings back.
  if (shallow) return {(height + 3) / 4, (width + 3) / 4};
  return {4 * ((height + 15) / 16), 4 * ((width + 15) / 16)};
}

MapBatch ResUNetGraph::unit_forward(MapOps& ops, Workspace& ws, int index, const MapBatch& input,
                                    const float* residual, const float* params) const {
  const Unit& unit = units[size_t(index)];
  const ConvShape shape = conv_shape(input, unit, *this);
  Workspace::UnitRecord record;
  record.input = input;
  record.conv_output =
      ws.take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  record.output = ws.take(input.batch, unit.out_channels, shape.out_height(), shape.out_width());
  record.norm_statistics =
      ws.take(input.batch, unit.out_channels, 1, int(kInstanceNormStatisticsFloats)).data;
  if (const size_t kept = ops.conv2d_kept_input_floats(shape)) {
    record.kept_input = ws.take(1, 1, 1, int(kept)).data;
  }
  const float* bias = unit.bias != kNoBias ? params + unit.bias : nullptr;
  ops.conv2d_forward(shape, input.data, params + unit.weight, bias, record.conv_output.data,
                     record.kept_input);
  ops.instance_norm_forward(norm_shape(record.output), record.conv_output.data, params + unit.gamma,
                            params + unit.beta, residual, unit.activation, record.output.data,
                            record.norm_statistics);
  ws.records_[size_t(index)] = record;
  return record.output;
}

void ResUNetGraph::forward(MapOps& ops, Workspace& ws, int views, int height, int width,
                           const float* images, const float* params, float* coarse_out,
                           float* fine_out) const {
  const auto [out_height, out_width] = output_size(height, width, shallow);
  if (views < 1 || !images || !params) {
    throw InvalidArgument("feature network forward: needs at least one view, images, parameters");
  }
  ws.next_ = 0;
  ws.layout_ = ops.layout();
  ws.forward_done_ = false;
  ws.records_.assign(units.size(), {});
  // Channels last, the images are already the stem's input maps. They are read in place where
  // the stem's convolution keeps its own copy for the backward (the caller may reuse them before
  // it); else copied.
  ws.images_ = {const_cast<float*>(images), views, 3, height, width, ws.layout_};
  const ConvShape stem_shape = conv_shape(ws.images_, units[size_t(stem)], *this);
  if (ws.layout_ != MapLayout::kChannelsLast || ops.conv2d_kept_input_floats(stem_shape) == 0) {
    ws.images_ = ws.take(views, 3, height, width);
    ops.channels_last_to_maps(images, 0, 3, ws.images_);
  }

  MapBatch x = unit_forward(ops, ws, stem, ws.images_, nullptr, params);
  for (int stage = 0; stage < (shallow ? 1 : 3); ++stage) {
    for (const Block& block : stages[size_t(stage)]) {
      const MapBatch identity =
          block.downsample >= 0 ? unit_forward(ops, ws, block.downsample, x, nullptr, params) : x;
      const MapBatch inner = unit_forward(ops, ws, block.conv1, x, nullptr, params);
      x = unit_forward(ops, ws, block.conv2, inner, identity.data, params);
    }
    ws.stages_[stage] = x;
  }

  // Decoder: upsample and conv (one unit), then the skip from the encoder at that resolution.
  const auto skip = [&](const MapBatch& decoder, const MapBatch& encoder) {
    MapBatch cat =
        ws.take(decoder.batch, decoder.channels + encoder.channels, decoder.height, decoder.width);
    ops.skip_concat_forward(decoder, encoder, cat.data);
    return cat;
  };
  if (shallow) {
    ws.features_ = ws.stages_[0];
  } else {
    ws.skip3_ = skip(unit_forward(ops, ws, upconv3, ws.stages_[2], nullptr, params), ws.stages_[1]);
    const MapBatch decoded3 = unit_forward(ops, ws, iconv3, ws.skip3_, nullptr, params);
    ws.skip2_ = skip(unit_forward(ops, ws, upconv2, decoded3, nullptr, params), ws.stages_[0]);
    ws.features_ = unit_forward(ops, ws, iconv2, ws.skip2_, nullptr, params);
  }

  const int out = out_channels();
  ws.out_ = ws.take(views, out, out_height, out_width);
  // A 1x1 in fp32 (Operands): it keeps nothing.
  ops.conv2d_forward(conv_shape(ws.features_, out, 1, 1, *this), ws.features_.data,
                     params + out_weight, params + out_bias, ws.out_.data, nullptr);
  ws.forward_done_ = true;
  if (coarse_out) ops.maps_to_channels_last(ws.out_, 0, coarse_channels, coarse_out);
  if (fine_out && fine_channels > 0) {
    ops.maps_to_channels_last(ws.out_, coarse_channels, fine_channels, fine_out);
  }
}

std::vector<ResUNetGraph::UnitOutput> ResUNetGraph::unit_outputs(const Workspace& ws) const {
  if (!ws.forward_done_)
    throw InvalidArgument("feature network: no forward through this workspace");
  std::vector<UnitOutput> outputs;
  for (size_t i = 0; i < units.size(); ++i) {  // the units that ran (a shallow forward skips some)
    if (ws.records_[i].output.data) {
      outputs.push_back({units[i].name, units[i].activation, ws.records_[i].output});
    }
  }
  return outputs;
}

void ResUNetGraph::unit_backward(MapOps& ops, Workspace& ws, int index, const float* params,
                                 float* grads, float* grad_out, float* grad_in, bool grad_in_fresh,
                                 float* grad_residual) const {
  const Unit& unit = units[size_t(index)];
  const Workspace::UnitRecord& record = ws.records_[size_t(index)];
  const MapBatch& input = record.input;
  const ConvShape shape = conv_shape(input, unit, *this);
  // A convolution on bf16 operands takes its output gradient rounded: the norm rounds it as it
  // makes it.
  uint16_t* rounded = nullptr;
  if (ops.conv2d_rounds_output_gradient(shape)) {
    const size_t values = record.output.size();
    rounded = reinterpret_cast<uint16_t*>(ws.scratch(kGradRounded, (values + 1) / 2));
  }
  ops.instance_norm_backward(norm_shape(record.output), record.conv_output.data,
                             params + unit.gamma, record.norm_statistics, unit.activation,
                             record.output.data, grad_out, grad_residual, grads + unit.gamma,
                             grads + unit.beta, rounded);

  // No bias gradient: the instance norm subtracts each plane's mean, so it is exactly zero.
  ConvGradients gradients;
  gradients.x = grad_in;
  gradients.weight = grads + unit.weight;
  gradients.overwrite_x = grad_in_fresh;
  ops.conv2d_backward(shape, input.data, params + unit.weight, grad_out, gradients,
                      record.kept_input, rounded);
}

void ResUNetGraph::block_backward(MapOps& ops, Workspace& ws, const Block& block,
                                  const float* params, float* grads, float* grad_out,
                                  float* grad_in, bool grad_in_fresh) const {
  const size_t inner_size = ws.records_[size_t(block.conv1)].output.size();
  float* inner = ws.scratch(kGradInner, inner_size);  // conv2's input gradient writes it
  // The residual's gradient is added to the identity's: a downsample's output gradient, or
  // without one the block's input gradient itself.
  float* identity = grad_in;
  if (block.downsample >= 0) {
    identity = zeroed(ops, ws.scratch(kGradIdentity, inner_size), inner_size);
  } else if (grad_in_fresh) {
    zeroed(ops, grad_in, ws.records_[size_t(block.conv1)].input.size());
    grad_in_fresh = false;
  }
  unit_backward(ops, ws, block.conv2, params, grads, grad_out, inner, true, identity);
  if (block.downsample >= 0) {
    unit_backward(ops, ws, block.downsample, params, grads, identity, grad_in, grad_in_fresh,
                  nullptr);
  }
  unit_backward(ops, ws, block.conv1, params, grads, inner, grad_in, false, nullptr);
}

void ResUNetGraph::backward(MapOps& ops, Workspace& ws, const float* params, float* grads,
                            const float* grad_coarse, const float* grad_fine) const {
  if (!ws.forward_done_) {
    throw InvalidArgument("feature network backward: no forward through this workspace");
  }
  if (!params || !grads) {
    throw InvalidArgument("feature network backward: needs parameters and gradients");
  }
  size_t largest = ws.out_.size();
  for (const auto& record : ws.records_) {
    largest = std::max({largest, record.input.size(), record.output.size()});
  }
  float* grad_a = ws.scratch(kGradA, largest);
  float* grad_b = ws.scratch(kGradB, largest);
  const auto spare = [&](const float* in_use) { return in_use == grad_a ? grad_b : grad_a; };

  // out_conv, from the two channels-last outputs.
  const int out = out_channels();
  MapBatch grad_out = ws.out_;
  grad_out.data = grad_a;
  if (!grad_coarse || (fine_channels > 0 && !grad_fine)) zeroed(ops, grad_a, ws.out_.size());
  if (grad_coarse) ops.channels_last_to_maps(grad_coarse, 0, coarse_channels, grad_out);
  if (grad_fine && fine_channels > 0) {
    ops.channels_last_to_maps(grad_fine, coarse_channels, fine_channels, grad_out);
  }
  const ConvShape out_shape = conv_shape(ws.features_, out, 1, 1, *this);
  float* g = grad_b;
  ConvGradients out_gradients;
  out_gradients.x = g;
  out_gradients.weight = grads + out_weight;
  out_gradients.bias = grads + out_bias;
  out_gradients.overwrite_x = true;
  ops.conv2d_backward(out_shape, ws.features_.data, params + out_weight, grad_out.data,
                      out_gradients, nullptr, nullptr);

  // Decoder levels, finest first: iconv ← skip ← upconv (with its upsampling).
  struct Level {
    int iconv, upconv;
    const MapBatch& skip;
    int encoder_stage;
  };
  for (const Level& level :
       {Level{iconv2, upconv2, ws.skip2_, 0}, Level{iconv3, upconv3, ws.skip3_, 1}}) {
    if (shallow) break;  // out_conv read layer1's output: g is its gradient
    float* grad_skip = spare(g);
    unit_backward(ops, ws, level.iconv, params, grads, g, grad_skip, true, nullptr);
    const MapBatch& encoder = ws.stages_[level.encoder_stage];
    const MapBatch& decoder = ws.records_[size_t(level.upconv)].output;
    float* grad_encoder = ws.scratch(kGradSkip0 + level.encoder_stage, encoder.size());
    ws.grad_skip_[level.encoder_stage] = grad_encoder;
    ops.skip_concat_backward(grad_skip, decoder, encoder, g, grad_encoder);
    float* grad_below = spare(g);
    unit_backward(ops, ws, level.upconv, params, grads, g, grad_below, true, nullptr);
    g = grad_below;
  }

  // Encoder, last block first; a stage's input gradient starts from the skip's.
  for (int stage = shallow ? 0 : 2; stage >= 0; --stage) {
    const std::vector<Block>& blocks = stages[size_t(stage)];
    for (size_t b = blocks.size(); b-- > 0;) {
      const bool from_skip = b == 0 && stage > 0;
      float* grad_in = from_skip ? ws.grad_skip_[stage - 1] : spare(g);
      block_backward(ops, ws, blocks[b], params, grads, g, grad_in, !from_skip);
      g = grad_in;
    }
  }
  // The images need no gradient, so conv1's data pass is skipped.
  unit_backward(ops, ws, stem, params, grads, g, nullptr, false, nullptr);
}

}  // namespace mvibr::nn
