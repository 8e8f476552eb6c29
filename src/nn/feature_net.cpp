// IBRNet's ResUNet feature network on the CPU (see feature_net.h): the parameters' registration
// and initialisation, and the CPU's MapOps, which the graph (resunet_graph.cpp) runs.
#include "mvibr/nn/feature_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mvibr/core/error.h"

namespace mvibr::nn {

namespace {

// Channels [first, first + count) of maps → [V, H, W, count] (the rendering core's layout), and
// its transpose back, which overwrites those channels of `maps`. Channels-last maps: a slice of
// each pixel's channels.
void channels_to_last(const MapBatch& maps, int first, int count, float* out) {
  const size_t plane = maps.plane_size();
  if (maps.layout == MapLayout::kChannelsLast) {
    const size_t pixels = size_t(maps.batch) * plane, c = size_t(count);
    if (count == maps.channels) {  // all of them: the maps as they are
      std::copy_n(maps.data, pixels * c, out);
      return;
    }
    for (size_t i = 0; i < pixels; ++i) {
      const float* in = maps.data + i * size_t(maps.channels) + size_t(first);
      for (size_t k = 0; k < c; ++k) out[i * c + k] = in[k];
    }
    return;
  }
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
  if (grad_maps.layout == MapLayout::kChannelsLast) {
    const size_t pixels = size_t(grad_maps.batch) * plane, c = size_t(count);
    if (count == grad_maps.channels) {
      std::copy_n(grad, pixels * c, grad_maps.data);
      return;
    }
    for (size_t i = 0; i < pixels; ++i) {
      float* out = grad_maps.data + i * size_t(grad_maps.channels) + size_t(first);
      for (size_t k = 0; k < c; ++k) out[k] = grad[i * c + k];
    }
    return;
  }
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

// Whether decoder pixel (y, x) has an encoder pixel, and which: (y - top, x - left).
bool encoder_pixel(const SkipPlacement& at, const MapBatch& encoder, int y, int x) {
  return y >= at.top && y - at.top < encoder.height && x >= at.left && x - at.left < encoder.width;
}

// One pixel's `count` channels: blocks of 16 as fixed-size moves, then the rest (a memmove call
// per pixel had cost more than the copying).
void copy_pixel(const float* from, size_t count, float* to) {
  size_t k = 0;
  for (; k + 16 <= count; k += 16) std::memcpy(to + k, from + k, 16 * sizeof(float));
  for (; k < count; ++k) to[k] = from[k];
}

// Channels last: each pixel's decoder channels, then its encoder channels or zeros.
void skip_concat_channels_last(const MapBatch& decoder, const MapBatch& encoder, MapBatch out) {
  const SkipPlacement at = skip_placement(decoder, encoder);
  const size_t decoder_channels = size_t(decoder.channels);
  const size_t encoder_channels = size_t(encoder.channels);
#pragma omp parallel for schedule(static)
  for (int v = 0; v < out.batch; ++v) {
    for (int y = 0; y < out.height; ++y) {
      for (int x = 0; x < out.width; ++x) {
        float* target = out.data + out.offset(v, 0, y, x);
        copy_pixel(decoder.data + decoder.offset(v, 0, y, x), decoder_channels, target);
        if (encoder_pixel(at, encoder, y, x)) {
          copy_pixel(encoder.data + encoder.offset(v, 0, y - at.top, x - at.left), encoder_channels,
                     target + decoder_channels);
        } else {
          std::fill_n(target + decoder_channels, encoder_channels, 0.0f);
        }
      }
    }
  }
}

void skip_concat(const MapBatch& decoder, const MapBatch& encoder, MapBatch out) {
  if (out.layout == MapLayout::kChannelsLast) {
    skip_concat_channels_last(decoder, encoder, out);
    return;
  }
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
void skip_concat_gradient(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                          float* grad_decoder, float* grad_encoder) {
  const SkipPlacement at = skip_placement(decoder, encoder);
  if (decoder.layout == MapLayout::kChannelsLast) {
    const size_t decoder_channels = size_t(decoder.channels);
    const size_t encoder_channels = size_t(encoder.channels);
    const size_t channels = decoder_channels + encoder_channels;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < decoder.batch; ++v) {
      for (int y = 0; y < decoder.height; ++y) {
        for (int x = 0; x < decoder.width; ++x) {
          const size_t pixel = decoder.offset(v, 0, y, x) / decoder_channels;
          const float* source = grad_out + pixel * channels;
          copy_pixel(source, decoder_channels, grad_decoder + pixel * decoder_channels);
          if (encoder_pixel(at, encoder, y, x)) {
            copy_pixel(source + decoder_channels, encoder_channels,
                       grad_encoder + encoder.offset(v, 0, y - at.top, x - at.left));
          }
        }
      }
    }
    return;
  }
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

std::string stage_name(int stage, int block) {
  return "layer" + std::to_string(stage + 1) + "." + std::to_string(block) + ".";
}

class HostBuffer final : public MapBuffer {
 public:
  float* reserve(size_t count) override {
    if (values_.size() < count) values_.resize(count);
    return values_.data();
  }
  size_t capacity() const override { return values_.capacity(); }

 private:
  std::vector<float> values_;
};

class CpuMapOps final : public MapOps {
 public:
  explicit CpuMapOps(MapLayout layout) : layout_(layout) {}
  std::unique_ptr<MapBuffer> make_buffer() const override { return std::make_unique<HostBuffer>(); }
  MapLayout layout() const override { return layout_; }
  void zero(float* data, size_t count) override { std::fill(data, data + count, 0.0f); }
  void channels_last_to_maps(const float* in, int first, int count, const MapBatch& maps) override {
    channels_from_last(in, first, count, maps);
  }
  void maps_to_channels_last(const MapBatch& maps, int first, int count, float* out) override {
    channels_to_last(maps, first, count, out);
  }
  void skip_concat_forward(const MapBatch& decoder, const MapBatch& encoder, float* out) override {
    skip_concat(decoder, encoder,
                MapBatch{out, decoder.batch, decoder.channels + encoder.channels, decoder.height,
                         decoder.width, decoder.layout});
  }
  void skip_concat_backward(const float* grad_out, const MapBatch& decoder, const MapBatch& encoder,
                            float* grad_decoder, float* grad_encoder) override {
    skip_concat_gradient(grad_out, decoder, encoder, grad_decoder, grad_encoder);
  }
  size_t conv2d_kept_input_floats(const ConvShape& shape) const override {
    return nn::conv2d_kept_input_floats(shape);
  }
  void conv2d_forward(const ConvShape& shape, const float* x, const float* weight,
                      const float* bias, float* y, float* kept_input) override {
    nn::conv2d_forward(shape, x, weight, bias, y, kept_input);
  }
  void conv2d_backward(const ConvShape& shape, const float* x, const float* weight,
                       const float* grad_y, const ConvGradients& grads, const float* kept_input,
                       const uint16_t* rounded_grad_y) override {
    nn::conv2d_backward(shape, x, weight, grad_y, grads, kept_input, rounded_grad_y);
  }
  bool conv2d_rounds_output_gradient(const ConvShape& shape) const override {
    return nn::conv2d_rounds_output_gradient(shape);
  }
  void instance_norm_forward(const InstanceNormShape& shape, const float* x, const float* gamma,
                             const float* beta, const float* residual, Activation activation,
                             float* out, float* statistics) override {
    nn::instance_norm_forward(shape, x, gamma, beta, residual, activation, out, statistics);
  }
  void instance_norm_backward(const InstanceNormShape& shape, const float* x, const float* gamma,
                              const float* statistics, Activation activation, const float* out,
                              float* grad, float* grad_residual, float* grad_gamma,
                              float* grad_beta, uint16_t* rounded_grad) override {
    nn::instance_norm_backward(shape, x, gamma, statistics, activation, out, grad, grad_residual,
                               grad_gamma, grad_beta, rounded_grad);
  }

 private:
  MapLayout layout_;
};

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
  const ParameterGroup feature = options_.group;
  const auto offset = [&](const std::string& name, std::vector<int> shape) {
    return parameters_->info(parameters_->add(prefix_ + name, std::move(shape), feature)).offset;
  };
  ResUNetGraph::Unit unit;
  unit.name = conv_name;
  unit.weight = offset(conv_name + ".weight", {out_channels, in_channels, kernel, kernel});
  if (bias) unit.bias = offset(conv_name + ".bias", {out_channels});
  unit.gamma = offset(norm_name + ".weight", {out_channels});
  unit.beta = offset(norm_name + ".bias", {out_channels});
  unit.in_channels = in_channels;
  unit.out_channels = out_channels;
  unit.kernel = kernel;
  unit.stride = stride;
  unit.activation = activation;
  graph_.units.push_back(unit);
  return int(graph_.units.size()) - 1;
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
  if (options.shallow && w[0] != options.out_channels()) {
    throw InvalidArgument("feature network: a shallow network's layer1 width (" +
                          std::to_string(w[0]) + ") must equal its output channels (" +
                          std::to_string(options.out_channels()) + ")");
  }
  graph_.coarse_channels = options.coarse_out_ch;
  graph_.fine_channels = options.coarse_only ? 0 : options.fine_out_ch;
  graph_.shallow = options.shallow;
  graph_.conv_algorithm = options.conv_algorithm;
  graph_.conv_operands = options.conv_operands;
  graph_.stem = add_unit("conv1", 3, w[0], 7, 2, false, Activation::kRelu, "bn1");
  int in_channels = w[0];
  for (int stage = 0; stage < 3; ++stage) {
    for (int b = 0; b < options.blocks[size_t(stage)]; ++b) {
      const std::string name = stage_name(stage, b);
      const int width = w[size_t(stage)], stride = b == 0 ? 2 : 1;
      ResUNetGraph::Block block;
      block.conv1 = add_unit(name + "conv1", in_channels, width, 3, stride, false,
                             Activation::kRelu, name + "bn1");
      // The ReLU after conv2's norm comes after the identity is added (unit_forward's residual).
      block.conv2 =
          add_unit(name + "conv2", width, width, 3, 1, false, Activation::kRelu, name + "bn2");
      if (stride != 1 || in_channels != width) {
        block.downsample = add_unit(name + "downsample.0", in_channels, width, 1, stride, false,
                                    Activation::kNone, name + "downsample.1");
      }
      graph_.stages[size_t(stage)].push_back(block);
      in_channels = width;
    }
  }
  graph_.upconv3 =
      add_unit("upconv3.conv.conv", w[2], d[0], 3, 1, true, Activation::kElu, "upconv3.conv.bn");
  graph_.units[size_t(graph_.upconv3)].upsample = true;
  graph_.iconv3 =
      add_unit("iconv3.conv", d[0] + w[1], d[0], 3, 1, true, Activation::kElu, "iconv3.bn");
  graph_.upconv2 =
      add_unit("upconv2.conv.conv", d[0], d[1], 3, 1, true, Activation::kElu, "upconv2.conv.bn");
  graph_.units[size_t(graph_.upconv2)].upsample = true;
  const int out = options.out_channels();
  graph_.iconv2 =
      add_unit("iconv2.conv", d[1] + w[0], out, 3, 1, true, Activation::kElu, "iconv2.bn");
  graph_.out_weight =
      parameters_
          ->info(parameters_->add(prefix_ + "out_conv.weight", {out, out, 1, 1}, options.group))
          .offset;
  graph_.out_bias =
      parameters_->info(parameters_->add(prefix_ + "out_conv.bias", {out}, options.group)).offset;
}

void ResUNet::initialize(Initializer& initializer) {
  // In registration order, so that one seed gives one network whatever else shares the set.
  float* values = parameters_->values().data();
  for (const ResUNetGraph::Unit& unit : graph_.units) {
    const size_t fan_in = size_t(unit.in_channels) * size_t(unit.kernel) * size_t(unit.kernel);
    const float bound = 1.0f / std::sqrt(float(fan_in));
    initializer.uniform(values + unit.weight, size_t(unit.out_channels) * fan_in, bound);
    if (unit.bias != ResUNetGraph::kNoBias) {
      initializer.uniform(values + unit.bias, size_t(unit.out_channels), bound);
    }
    initializer.constant(values + unit.gamma, size_t(unit.out_channels), 1.0f);
    initializer.constant(values + unit.beta, size_t(unit.out_channels), 0.0f);
  }
  const int out = options_.out_channels();
  const float bound = 1.0f / std::sqrt(float(out));
  initializer.uniform(values + graph_.out_weight, size_t(out) * size_t(out), bound);
  initializer.uniform(values + graph_.out_bias, size_t(out), bound);
}

MapOps& cpu_map_ops(MapLayout layout) {
  static CpuMapOps planar(MapLayout::kPlanar), channels_last(MapLayout::kChannelsLast);
  return layout == MapLayout::kPlanar ? planar : channels_last;
}

void ResUNet::forward(int views, int height, int width, const float* images, Workspace* workspace,
                      float* coarse_out, float* fine_out) const {
  if (!workspace) throw InvalidArgument("feature network forward: needs a workspace");
  graph_.forward(cpu_map_ops(options_.map_layout), *workspace, views, height, width, images,
                 parameters_->values().data(), coarse_out, fine_out);
}

void ResUNet::backward(Workspace* workspace, const float* grad_coarse,
                       const float* grad_fine) const {
  if (!workspace) throw InvalidArgument("feature network backward: needs a workspace");
  graph_.backward(cpu_map_ops(options_.map_layout), *workspace, parameters_->values().data(),
                  parameters_->grads().data(), grad_coarse, grad_fine);
}

}  // namespace mvibr::nn
