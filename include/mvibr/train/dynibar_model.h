// The DynIBaR model (a TrainableModel) for a monocular video: google/dynibar's DynibarMono trained
// as train.py's loop, render_ray.py's render_rays_mono.
// - Networks, named as DynibarMono's checkpoint: feature_net (the dynamic and cross-time
//   sources) and feature_net_st (the static sources, their moving pixels blacked out), both
//   shallow ResUNets of which the coarse half of the output is read; net_coarse_st
//   (DynibarStatic), net_coarse_dy (DynibarDynamic), motion_mlp and trajectory_basis [frames, K].
// - Parameter groups as DynibarMono's optimiser: the static network and its feature net at half
//   rate (kStaticMlp, kStaticFeature), the basis at a quarter of lrate_mlp (kTrajectoryBasis);
//   rates follow dynibar_learning_rate, loss weights dynibar_loss_weights, both from the update
//   count, so a resumed run and any number of ranks see one schedule.
// - A step: per micro-batch, samples in inverse depth along the target's rays; their motion at
//   the target's time; the dynamic network on the sources at t +- 1..3 read where each sample has
//   moved to; the static network on the static sources; the composite, its components and the
//   two single-component renders; the rendered flow; cross-time rendering at the anchor time.
//   During the static bootstrap only the static branch runs (the rest gets no gradient there).
// - Data parallelism: every loss term is a ratio of sums over rays, so accumulate runs the
//   forward and returns every term's numerator and denominator (LossSums); end_step takes the
//   sums over ranks and micro-batches and runs each micro-batch's backward with the whole batch's
//   denominators: 1 rank of 2B rays computes what 2 ranks of B do.
// - Sources a target lacks (its dynamic frames past the video's ends) are left out: their flows
//   and trajectory terms are not computed, as their flow validity is 0.
// - device = cuda: the networks (feature nets, gathers, static and dynamic networks, motion MLP)
//   run on the GPU, in config.precision, the rest of the step as on the CPU
//   (train/dynibar_device.h); the parameters, their gradients (NCCL all-reduces them) and Adam's
//   moments (Adam or AdamW) live on the GPU too.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/render/dynibar_schedule.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

// The config with num_frames set to the video's in its datadir when 0 (model = dynibar; any other
// config comes back unchanged). InvalidArgument when the config names another count, or the
// data holds no video with motion data.
TrainConfig with_video_frames(const TrainConfig& config);
// The source sets the config asks for: static views over +-max_range, two per num_source_views.
data::DynibarSourceOptions dynibar_source_options(const TrainConfig& config);
// The schedule's options from the config (num_frames must be set).
DynibarScheduleOptions dynibar_schedule_options(const TrainConfig& config);
// The shallow feature networks' options (the config's preset, layer1 as wide as the output).
nn::ResUNetOptions dynibar_feature_net_options(const TrainConfig& config);

class DynibarModel final : public TrainableModel {
 public:
  // The networks and the optimiser at the config's rates (configure_optimizer sets others).
  // InvalidArgument unless num_frames > num_basis, N_importance = 0, and the precision is fp32 or
  // the networks run on the GPU.
  explicit DynibarModel(const TrainConfig& config);
  ~DynibarModel() override;
  DynibarModel(const DynibarModel&) = delete;
  DynibarModel& operator=(const DynibarModel&) = delete;

  const nn::ParameterSet& parameters() const override;
  nn::ParameterSet& parameters() override;
  const nn::Adam& optimizer() const override;
  nn::Adam& optimizer() override;
  // With DynibarMono's group multipliers and schedule, whatever `options` says of them.
  void configure_optimizer(const nn::AdamOptions& options) override;
  void initialize(uint64_t seed) override;  // nn.Linear's and nn.Conv2d's defaults, DCT basis
  uint64_t updates() const override;
  double learning_rate(nn::ParameterGroup group) const override;
  bool on_device() const override;

  // Every term's numerator and denominator (dynibar_losses.h's fractions), then the composite's
  // squared error and valid rays (for the PSNR).
  size_t loss_sums_size() const override;
  std::vector<ParameterRange> gradient_ready_order() const override;
  void set_loss_scale(double scale) override;  // 1 only: the CPU step is fp32
  // The sample must carry DynIBaR's source sets (ReaderOptions::dynibar_sources).
  void begin_step(const data::TrainingSample& sample) override;
  LossSums accumulate(RandomKey key, int batch) override;
  StepResult end_step(const LossSums& global,
                      const std::function<void(ParameterRange)>& ready) override;
  float* gradients() override;
  double gradient_norm() override;
  void update(double gradient_norm) override;
  const PhaseTimes& phase_times() const override;
  StepWork step_work() const override;
  // The composite at the target's time: colour and depth.
  void render(const data::TrainingSample& sample, const std::vector<float>& pixels, RandomKey key,
              std::vector<float>* rgb, std::vector<float>* depth,
              const std::function<void(int, int)>& on_chunk = {},
              RenderedParts* parts = nullptr) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mvibr::train
