// Every trainable parameter of a model in one flat float buffer, with its gradient in a second
// flat buffer of the same layout. Flat because the data-parallel layer all-reduces gradients in
// buckets of contiguous memory and the optimiser sweeps one array; named because checkpoints
// store each parameter under the PyTorch module path it corresponds to in IBRNet
// ("net_coarse.base_fc.0.weight"), so weights can be compared with and converted from PyTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mvibr::nn {

// Which learning rate a parameter trains with: IBRNet's lrate_feature and lrate_mlp, DynIBaR's
// groups at multiples of them (its static network and feature net, its trajectory basis;
// AdamOptions says how much), and the pose model's cross-view fusion weights at lrate_fusion
// (appended last, so the other groups' numbers, and checkpoints' counts, keep their places).
enum class ParameterGroup : uint8_t {
  kFeature = 0,
  kMlp = 1,
  kStaticFeature = 2,
  kStaticMlp = 3,
  kTrajectoryBasis = 4,
  kFusion = 5
};
constexpr int kParameterGroupCount = 6;

struct ParameterInfo {
  std::string name;        // PyTorch module path
  std::vector<int> shape;  // PyTorch's shape (Linear weight: [out, in]; Conv2d: [out, in, kh, kw])
  size_t offset = 0, size = 0;
  ParameterGroup group = ParameterGroup::kMlp;
};

// A handle to one parameter: valid for the lifetime of its ParameterSet, across growth.
struct Parameter {
  size_t index = SIZE_MAX;
};

class ParameterSet {
 public:
  // Adds a parameter (values zero). Throws InvalidArgument on a repeated name.
  Parameter add(const std::string& name, std::vector<int> shape, ParameterGroup group);

  float* value(Parameter p) { return values_.data() + infos_.at(p.index).offset; }
  const float* value(Parameter p) const { return values_.data() + infos_.at(p.index).offset; }
  float* grad(Parameter p) { return grads_.data() + infos_.at(p.index).offset; }
  const float* grad(Parameter p) const { return grads_.data() + infos_.at(p.index).offset; }
  const ParameterInfo& info(Parameter p) const { return infos_.at(p.index); }

  const std::vector<ParameterInfo>& infos() const { return infos_; }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }
  std::vector<float>& grads() { return grads_; }
  const std::vector<float>& grads() const { return grads_; }
  size_t size() const { return values_.size(); }
  // The parameter with this name, or an InvalidArgument naming it.
  Parameter find(const std::string& name) const;
  void zero_grads();

 private:
  std::vector<ParameterInfo> infos_;
  std::vector<float> values_, grads_;
};

// Deterministic initialisation from a seed, as PyTorch's initialisers define the distributions
// (the numbers differ from PyTorch's own generator): IBRNet's weights_init is kaiming_normal_
// (std = sqrt(2 / fan_in)); nn.Linear and nn.Conv2d default to kaiming_uniform_(a = sqrt(5)) for
// weights, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for biases.
class Initializer {
 public:
  explicit Initializer(uint64_t seed) : state_(seed) {}
  void kaiming_normal(float* values, size_t count, int fan_in);
  void uniform(float* values, size_t count, float bound);
  void constant(float* values, size_t count, float value);

 private:
  double next_unit();  // uniform in [0, 1), 53 random bits
  uint64_t state_;
};

}  // namespace mvibr::nn
