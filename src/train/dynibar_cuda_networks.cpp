// DynIBaR's networks on a CUDA device (see dynibar_device.h): the CPU model's network calls
// replaced by their device counterparts, on one stream, buffers kept from step to step.
// Compiled only in a build with the CUDA backend; cuda_unavailable.cpp stands in without.
#include <array>
#include <memory>
#include <tuple>
#include <vector>

#include "cuda_precision.h"
#include "device_parameters.h"
#include "dynibar_device.h"
#include "mvibr/core/device.h"
#include "mvibr/core/error.h"
#include "mvibr/nn/cuda_aggregator.h"
#include "mvibr/nn/cuda_feature_net.h"
#include "mvibr/nn/cuda_layers.h"
#include "mvibr/nn/cuda_motion_mlp.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr::train {
namespace {

// Reads `count` values back into `host` (nothing when null), each times `factor`.
void download(float* host, const float* device, size_t count, double factor = 1) {
  if (!host || !count) return;
  copy_device_to_host(host, device, count * sizeof(float));
  if (factor == 1) return;
  for (size_t i = 0; i < count; ++i) host[i] = float(double(host[i]) * factor);
}

// As DeviceArray::upload, each value times `factor` (fp16's loss scale for the gradients a backward
// starts from); `scaled` holds the host's scaled copy.
float* upload_scaled(DeviceArray<float>* buffer, const float* host, size_t count, double factor,
                     std::vector<float>* scaled) {
  if (factor == 1) return buffer->upload(host, count);
  scaled->resize(count);
  for (size_t i = 0; i < count; ++i) (*scaled)[i] = float(double(host[i]) * factor);
  return buffer->upload(scaled->data(), count);
}

// A set's images and feature maps, and the maps' gradients.
struct DeviceSet {
  int n_views = 0, height = 0, width = 0, map_height = 0, map_width = 0;
  bool has_maps = false;
  DeviceArray<float> images, maps, grad_maps;
  size_t image_size() const { return size_t(height) * size_t(width) * 3; }
  size_t map_size(int channels) const {
    return size_t(map_height) * size_t(map_width) * size_t(channels);
  }
};

// One branch of a micro-batch: its inputs, the gather's outputs and the network's activations
// (a network object of its own, since the dynamic network runs in two branches).
struct DeviceBranch {
  std::unique_ptr<nn::cuda::IbrnetAggregator> net;
  DynibarSet set = DynibarSet::kDynamic;
  int n_rays = 0, n_samples = 0, n_views = 0, first_view = 0;
  DeviceArray<PinholeCamera<float>> cameras;
  DeviceArray<float> points, moved, xyz, src_rays, target_rays, time, view_dir;
  DeviceArray<float> rgb_features, ray_diff, mask, network_mask, rgb, sigma;
  DeviceArray<float> grad_rgb, grad_sigma, grad_rgb_features, grad_moved, grad_xyz;
};

// A run of the motion MLP: its inputs, kept activations and outputs.
struct DeviceMotion {
  DeviceArray<float> xyzt, saved, coefficients, grad_coefficients, grad_xyzt, scratch;
};

class CudaDynibarNetworks final : public OnDeviceTrainingState<DynibarDeviceNetworks> {
 public:
  CudaDynibarNetworks(const TrainConfig& config, const DynibarNetworks& n)
      : OnDeviceTrainingState(config, "DynIBaR"),
        channels_(config.coarse_feat_dim),
        feature_net_(n.feature_net),
        feature_net_st_(n.feature_net_st),
        net_st_(n.net_st),
        net_dy_(n.net_dy),
        motion_mlp_(n.motion_mlp),
        motion_offset_(n.motion_mlp.parameter_offset()),
        st_offset_(n.net_st.parameter_offset()),
        dy_offset_(n.net_dy.parameter_offset()) {
    context_.set_gemm_precision(gemm_precision(config.precision));
  }

  void set_images(DynibarSet which, int n_views, int height, int width,
                  const float* images) override {
    DeviceSet& set = sets_[size_t(which)];
    set.n_views = n_views;
    set.height = height;
    set.width = width;
    std::tie(set.map_height, set.map_width) = nn::ResUNet::output_size(height, width, true);
    set.images.upload(images, size_t(n_views) * set.image_size());
    set.has_maps = false;
  }

  void features(DynibarSet which, bool training) override {
    DeviceSet& set = sets_[size_t(which)];
    const size_t maps = size_t(set.n_views) * set.map_size(channels_);
    (which == DynibarSet::kStatic ? feature_net_st_ : feature_net_)
        .forward(context_, set.n_views, set.height, set.width, set.images.data(),
                 parameters_.values(), set.maps.reserve(maps), nullptr);
    set.has_maps = true;
    if (training) {
      set.grad_maps.reserve(maps);
      device_memset_zero(set.grad_maps.data(), maps * sizeof(float));
    }
  }

  void features_backward() override {
    for (DynibarSet which : {DynibarSet::kStatic, DynibarSet::kDynamic}) {
      DeviceSet& set = sets_[size_t(which)];
      if (!set.has_maps) continue;
      (which == DynibarSet::kStatic ? feature_net_st_ : feature_net_)
          .backward(context_, parameters_.values(), parameters_.grads(), set.grad_maps.data(),
                    nullptr);
    }
  }

  void branch_forward(int batch, DynibarBranch which, const DynibarBranchInputs& in, bool training,
                      float* rgb, float* sigma, float* mask) override {
    DeviceBranch& br = branch(batch, which);
    const bool is_static = which == DynibarBranch::kStatic;
    br.set = is_static ? DynibarSet::kStatic : DynibarSet::kDynamic;
    br.n_rays = in.n_rays;
    br.n_samples = in.n_samples;
    br.n_views = in.n_views;
    br.first_view = in.first_view;
    const size_t samples = size_t(in.n_rays) * size_t(in.n_samples);
    const size_t rows = samples * size_t(in.n_views);
    br.cameras.upload(in.cameras, size_t(in.n_views));
    br.points.upload(in.points, samples * 3);
    br.moved.upload(in.moved, rows * 3);
    const SourceViews<float> views = source_views(br);
    const size_t width = 3 + size_t(views.feature_channels);
    cuda::gather_moved_samples(
        in.n_rays, in.n_samples, br.points.data(), br.moved.data(), in.target_center, views,
        GatherOutputs<float>{br.rgb_features.reserve(rows * width), br.ray_diff.reserve(rows * 4),
                             br.mask.reserve(rows)},
        context_.stream());
    if (!rgb) {  // the gather alone
      context_.synchronize();
      download(mask, br.mask.data(), rows);
      return;
    }
    nn::AggregatorInputs<float> net_in;
    net_in.rgb_features = br.rgb_features.data();
    net_in.ray_diff = br.ray_diff.data();
    net_in.xyz = br.xyz.upload(in.network.xyz, samples * 3);
    if (is_static) {
      cuda::mask_unseen_colours(rows, int(width), br.rgb_features.data(), br.mask.data(),
                                br.network_mask.reserve(rows), context_.stream());
      net_in.mask = br.network_mask.data();
      net_in.src_rays = br.src_rays.upload(in.network.src_rays, rows * 6);
      net_in.target_rays = br.target_rays.upload(in.network.target_rays, size_t(in.n_rays) * 6);
    } else {
      net_in.mask = br.mask.data();
      net_in.time = br.time.upload(in.network.time, size_t(in.n_rays));
      net_in.view_dir = br.view_dir.upload(in.network.view_dir, size_t(in.n_rays) * 3);
    }
    if (!br.net) {
      br.net = std::make_unique<nn::cuda::IbrnetAggregator>(is_static ? net_st_ : net_dy_);
    }
    const float* params = parameters_.values() + (is_static ? st_offset_ : dy_offset_);
    float* device_rgb = br.rgb.reserve(samples * 3);
    float* device_sigma = br.sigma.reserve(samples);
    if (training) {
      br.net->forward(context_, in.n_rays, in.n_samples, in.n_views, params, net_in, device_rgb,
                      device_sigma);
    } else {
      br.net->infer(context_, in.n_rays, in.n_samples, in.n_views, params, net_in, device_rgb,
                    device_sigma);
    }
    context_.synchronize();
    download(rgb, device_rgb, samples * 3);
    download(sigma, device_sigma, samples);
    download(mask, br.mask.data(), rows);
  }

  void branch_backward(int batch, DynibarBranch which, const float* grad_rgb,
                       const float* grad_sigma, float* grad_moved, float* grad_xyz) override {
    DeviceBranch& br = branch(batch, which);
    if (!br.net) throw InvalidArgument("DynIBaR on the device: a branch's backward before forward");
    const bool is_static = which == DynibarBranch::kStatic;
    const size_t samples = size_t(br.n_rays) * size_t(br.n_samples);
    const size_t rows = samples * size_t(br.n_views);
    const SourceViews<float> views = source_views(br);
    const size_t width = 3 + size_t(views.feature_channels);
    const size_t offset = is_static ? st_offset_ : dy_offset_;
    br.net->backward(context_, parameters_.values() + offset, parameters_.grads() + offset,
                     upload_scaled(&br.grad_rgb, grad_rgb, samples * 3, gradient_scale_, &scaled_),
                     upload_scaled(&br.grad_sigma, grad_sigma, samples, gradient_scale_, &scaled_),
                     br.grad_rgb_features.reserve(rows * width),
                     grad_xyz ? br.grad_xyz.reserve(samples * 3) : nullptr);
    const DeviceSet& set = sets_[size_t(br.set)];
    float* grad_maps = set.has_maps ? set_grad_maps(br) : nullptr;
    cuda::gather_moved_samples_backward(br.n_rays, br.n_samples, br.moved.data(), views,
                                        br.grad_rgb_features.data(),
                                        grad_moved ? br.grad_moved.reserve(rows * 3) : nullptr,
                                        nullptr, grad_maps, context_.stream());
    context_.synchronize();
    download(grad_moved, br.grad_moved.data(), rows * 3, 1 / gradient_scale_);
    download(grad_xyz, br.grad_xyz.data(), samples * 3, 1 / gradient_scale_);
  }

  nn::MotionMlpCalls<float> motion_mlp(int batch, DynibarMotionRun run) override {
    if (motions_.size() <= size_t(batch)) motions_.resize(size_t(batch) + 1);
    DeviceMotion* m = &motions_[size_t(batch)][size_t(run)];
    const size_t outputs = size_t(motion_mlp_.outputs());
    nn::MotionMlpCalls<float> calls;
    calls.forward = [this, m, outputs](size_t n, const float* xyzt, float* coefficients) {
      motion_mlp_.forward(context_, parameters_.values() + motion_offset_, n,
                          m->xyzt.upload(xyzt, n * 4), m->saved.reserve(motion_mlp_.saved_size(n)),
                          m->coefficients.reserve(n * outputs));
      context_.synchronize();
      download(coefficients, m->coefficients.data(), n * outputs);
    };
    calls.backward = [this, m, outputs](size_t n, const float* grad_coefficients,
                                        float* grad_xyzt) {
      motion_mlp_.backward(context_, parameters_.values() + motion_offset_,
                           parameters_.grads() + motion_offset_, n, m->saved.data(),
                           upload_scaled(&m->grad_coefficients, grad_coefficients, n * outputs,
                                         gradient_scale_, &scaled_),
                           grad_xyzt ? m->grad_xyzt.reserve(n * 4) : nullptr,
                           m->scratch.reserve(motion_mlp_.scratch_size(n)));
      context_.synchronize();
      download(grad_xyzt, m->grad_xyzt.data(), n * 4, 1 / gradient_scale_);
    };
    return calls;
  }

 private:
  DeviceBranch& branch(int batch, DynibarBranch which) {
    if (branches_.size() <= size_t(batch)) branches_.resize(size_t(batch) + 1);
    return branches_[size_t(batch)][size_t(which)];
  }

  // The branch's views as the gather reads them: its run of its set's images and maps.
  SourceViews<float> source_views(DeviceBranch& br) {
    DeviceSet& set = sets_[size_t(br.set)];
    if (br.first_view + br.n_views > set.n_views) {
      throw InvalidArgument("DynIBaR on the device: a branch reads views its set does not have");
    }
    SourceViews<float> v;
    v.n_views = br.n_views;
    v.cameras = br.cameras.data();
    v.image_height = set.height;
    v.image_width = set.width;
    v.images = set.images.data() + size_t(br.first_view) * set.image_size();
    v.feature_height = set.map_height;
    v.feature_width = set.map_width;
    v.feature_channels = set.has_maps ? channels_ : 0;
    v.features =
        set.has_maps ? set.maps.data() + size_t(br.first_view) * set.map_size(channels_) : nullptr;
    return v;
  }

  float* set_grad_maps(const DeviceBranch& br) {
    DeviceSet& set = sets_[size_t(br.set)];
    return set.grad_maps.data() + size_t(br.first_view) * set.map_size(channels_);
  }

  int channels_;
  nn::cuda::ResUNet feature_net_, feature_net_st_;
  const nn::IbrnetAggregator& net_st_;
  const nn::IbrnetAggregator& net_dy_;
  nn::cuda::MotionMlp motion_mlp_;
  size_t motion_offset_, st_offset_, dy_offset_;
  std::vector<float> scaled_;
  std::array<DeviceSet, 2> sets_;
  std::vector<std::array<DeviceBranch, kDynibarBranches>> branches_;
  std::vector<std::array<DeviceMotion, 2>> motions_;
};

}  // namespace

std::unique_ptr<DynibarDeviceNetworks> make_dynibar_device_networks(
    const TrainConfig& config, const DynibarNetworks& networks) {
  return std::make_unique<CudaDynibarNetworks>(config, networks);
}

}  // namespace mvibr::train
