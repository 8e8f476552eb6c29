// The whole training step against PyTorch: IbrnetModel::train_step (float32, every backward
// hand-written) and test/reference/ibrnet_model_reference.py (float64 autograd, composed from the
// op, aggregator and feature-net references) on the same weights (the reference loads our
// checkpoint by parameter name), the same sample and the same Philox draws. Each op and network
// is checked on its own elsewhere; this checks their composition: which maps feed which pass,
// the ray masks, the stop-gradient of the importance samples, the two losses and where their
// gradients accumulate. Bounds as normwise relative errors max|ours - ref| / max|ref|: the
// losses within 1e-5, every parameter's gradient within 1e-4 (the project's fp32 bounds).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ibrnet_model_case.h"
#include "mvibr/core/philox.h"
#include "mvibr/data/synthetic_scene.h"
#include "mvibr/nn/feature_net.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/ray_batch.h"
#include "npy.h"
#include "relu_masks.h"
#include "training_fixture.h"

namespace mvibr::train {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;

// The fp32 side's ReLU masks in the feature net (1 where the output is positive), from a copy
// of the model's feature net on the same images: same code, same weights, same bits. The
// reference follows them (feature_net_reference.relu_on_our_side, which checks that they differ
// from float64's signs only within rounding of the kink): otherwise a pre-activation within fp32
// rounding of zero takes the other branch on one side, and that channel's parameters get a
// different gradient, not a rounding error (feature_net_test.cpp found it in every other case).
void write_relu_masks(const TrainConfig& config, const nn::ParameterSet& model,
                      const data::TrainingSample& sample, const fs::path& dir) {
  nn::ParameterSet copy;
  const nn::ResUNet net(feature_net_options(config), &copy, "feature_net.");
  for (const nn::ParameterInfo& info : copy.infos()) {
    const float* values = model.value(model.find(info.name));
    std::copy(values, values + info.size, copy.values().begin() + long(info.offset));
  }
  const int height = sample.target.camera.height, width = sample.target.camera.width;
  std::vector<float> images;
  for (const data::View& view : sample.sources) {
    for (uint8_t value : view.rgb) images.push_back(float(value) / 255.0f);
  }
  const auto [hf, wf] = nn::ResUNet::output_size(height, width);
  const size_t cells = sample.sources.size() * size_t(hf) * size_t(wf);
  std::vector<float> coarse(cells * size_t(config.coarse_feat_dim));
  std::vector<float> fine(cells * size_t(config.fine_feat_dim));
  nn::ResUNet::Workspace workspace;
  net.forward(int(sample.sources.size()), height, width, images.data(), &workspace, coarse.data(),
              fine.data());
  for (const auto& [unit, mask] : test::relu_masks(net, workspace)) {
    test::write_npy(dir / ("mask_" + unit + ".npy"), mask);
  }
}

double relative_error(double ours, double ref) {
  return std::abs(ours - ref) / std::abs(ref);
}

// max|ours - ref| / scale over one parameter's gradient; scale 0: max|ref|.
double normwise_error(const float* ours, const NpyArray& ref, double scale) {
  double difference = 0, largest = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    if (std::isnan(ours[i]) || std::isnan(ref.data[i])) return INFINITY;
    difference = std::max(difference, std::abs(double(ours[i]) - ref.data[i]));
    largest = std::max(largest, std::abs(ref.data[i]));
  }
  if (scale == 0) scale = largest;
  return scale > 0 ? difference / scale : difference;
}

double max_abs(const std::vector<double>& values) {
  double m = 0;
  for (double v : values) m = std::max(m, std::abs(v));
  return m;
}

// One training step on both sides; `name` names its case folder.
void check_step(bool inv_uniform, const std::string& name) {
  // On the CPU (the config's device): the ReLU masks below come from its bits.
  const TrainConfig config = testing::three_source_config(inv_uniform);
  const data::TrainingSample sample = testing::three_source_sample();
  const RandomKey key{7, 3};
  const RayBatch rays = select_rays(sample.target, config.N_rand, SampleMode::kCenter, 0.8, key, 0);
  IbrnetModel model(config);
  model.initialize(11);

  // <root>/<case>/step: the reference runs on every case under <root>/<case>, this one alone.
  const fs::path root =
      fs::temp_directory_path() / ("mvibr-model-parity-" + std::to_string(::getpid()));
  const fs::path dir = root / name / "step";
  test::write_model_case(config, model, sample, rays, key, dir);
  write_relu_masks(config, model.parameters(), sample, dir);
  model.parameters().zero_grads();
  const StepResult ours = model.train_step(sample, rays, key, 0);
  // Enough rays count that the losses mean something (IBRNet's mask drops the rest).
  EXPECT_GE(ours.valid_rays, config.N_rand / 2);

  const char* source = std::getenv("MVIBR_SOURCE_DIR");
  const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                             "/test/reference/ibrnet_model_reference.py";
  const std::string command = "/usr/bin/python3 " + script + " " + dir.parent_path().string();
  ASSERT_EQ(std::system(command.c_str()), 0)
      << "the PyTorch reference failed (needs /usr/bin/python3 with torch and h5py: "
         "scripts/setup.sh installs them)";

  const NpyArray ref_loss = test::read_npy(dir / "ref_loss.npy");
  const double coarse_error = relative_error(ours.term("mse_coarse"), ref_loss.data[0]);
  const double fine_error = relative_error(ours.term("mse_fine"), ref_loss.data[1]);
  EXPECT_LE(coarse_error, 1e-5) << ours.term("mse_coarse") << " vs " << ref_loss.data[0];
  EXPECT_LE(fine_error, 1e-5) << ours.term("mse_fine") << " vs " << ref_loss.data[1];

  const nn::ParameterSet& params = model.parameters();
  double worst = 0;
  std::string worst_name;
  for (const nn::ParameterInfo& info : params.infos()) {
    const NpyArray ref = test::read_npy(dir / ("ref_grad." + info.name + ".npy"));
    ASSERT_EQ(ref.data.size(), info.size) << info.name;
    const float* grad = params.grads().data() + info.offset;
    // The decoder's conv biases feed an instance norm, which cancels them: their gradient is
    // exactly zero, ours is 0 and the reference's is rounding noise (as in feature_net_test.cpp).
    const bool cancelled = info.name.find("conv.bias") != std::string::npos &&
                           info.name.find("out_conv") == std::string::npos;
    if (cancelled) {
      const std::string weight = info.name.substr(0, info.name.size() - 4) + "weight";
      EXPECT_EQ(*std::max_element(grad, grad + info.size), 0.0f) << info.name;
      EXPECT_EQ(*std::min_element(grad, grad + info.size), 0.0f) << info.name;
      EXPECT_LE(max_abs(ref.data),
                1e-10 * max_abs(test::read_npy(dir / ("ref_grad." + weight + ".npy")).data))
          << info.name;
      continue;
    }
    // rgb_fc.4.bias shifts all blending logits of a sample alike, which the softmax over views
    // ignores: its gradient is zero but for rounding on both sides, so it is measured on its
    // weight's scale (as in aggregator_test.cpp).
    double scale = 0;
    const size_t blend_bias = info.name.find("rgb_fc.4.bias");
    if (blend_bias != std::string::npos) {
      const std::string weight = info.name.substr(0, blend_bias) + "rgb_fc.4.weight";
      scale = max_abs(test::read_npy(dir / ("ref_grad." + weight + ".npy")).data);
    }
    const double error = normwise_error(grad, ref, scale);
    EXPECT_LE(error, 1e-4) << info.name;
    if (std::getenv("MVIBR_VERBOSE")) std::printf("    %-50s %.2e\n", info.name.c_str(), error);
    if (error >= worst) {
      worst = error;
      worst_name = info.name;
    }
  }
  std::printf("  %s: loss coarse %.1e, fine %.1e; worst gradient %.1e (%s)\n", name.c_str(),
              coarse_error, fine_error, worst, worst_name.c_str());
  // A failing case stays for a look by hand.
  if (!::testing::Test::HasFailure()) {
    fs::remove_all(dir.parent_path());
    std::error_code ignored;
    fs::remove(root, ignored);  // only once empty
  }
}

TEST(ModelParity, StepWithUniformDepthsMatchesPyTorch) {
  check_step(false, "uniform");
}

TEST(ModelParity, StepWithInverseDepthsMatchesPyTorch) {
  check_step(true, "inv_uniform");
}

}  // namespace
}  // namespace mvibr::train
