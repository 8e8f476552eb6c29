// One module's contiguous run of the ParameterSet (see layers.h).
#include "mvibr/core/error.h"
#include "mvibr/nn/layers.h"

namespace mvibr::nn {

ParameterBlock::ParameterBlock(ParameterSet& set, std::string prefix, ParameterGroup group)
    : set_(&set), prefix_(std::move(prefix)), group_(group), offset_(set.size()) {}

size_t ParameterBlock::add(const std::string& name, std::vector<int> shape) {
  const Parameter p = set_->add(prefix_ + name, std::move(shape), group_);
  const ParameterInfo& info = set_->info(p);
  if (info.offset != offset_ + size_) {
    throw InvalidArgument("parameters of '" + prefix_ + "' must be registered back to back; '" +
                          info.name + "' came after another module's");
  }
  size_ += info.size;
  return info.offset - offset_;
}

}  // namespace mvibr::nn
