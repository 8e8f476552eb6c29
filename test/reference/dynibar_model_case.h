// The case folder of one DynIBaR training step, as test/reference/dynibar_model_reference.py
// and bench/dynibar_torch_step.py read it (the list of files is in dynibar_model_reference.py):
// the model's current weights as an mvibr checkpoint, the three source sets' images and cameras,
// the rays, their depth samples and the target's data at them, the fp32 side's ReLU masks, and
// case.json (the step and the schedule). Written by the whole-step parity test and by the
// DynIBaR step benchmark, so that the PyTorch side runs exactly the step mvibr runs.
#pragma once

#include <filesystem>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/train/config.h"
#include "mvibr/train/dynibar_model.h"

namespace mvibr::test {

// The step accumulate(key, 0) runs with `config` on `sample` (which carries DynIBaR's source
// sets) from the model's current weights and update count, into `dir` (created if needed).
void write_dynibar_case(const train::TrainConfig& config, const train::DynibarModel& model,
                        const data::TrainingSample& sample, RandomKey key,
                        const std::filesystem::path& dir);

}  // namespace mvibr::test
