// The case folder of one IBRNet training step, as test/reference/ibrnet_model_reference.py and
// bench/ibrnet_torch_step.py read it (the list of files is in ibrnet_model_reference.py): the
// model's current weights as an mvibr checkpoint, the sample, the rays, the Philox uniforms the
// step draws and the config as case.json. Written by the model-parity test and by the training
// benchmark, so that the PyTorch side of both runs exactly the step mvibr runs.
#pragma once

#include <filesystem>

#include "mvibr/core/philox.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/train/config.h"
#include "mvibr/train/ibrnet_model.h"
#include "mvibr/train/ray_batch.h"

namespace mvibr::test {

// The step train_step(sample, rays, key, 0) runs with `config` from the model's current weights,
// into `dir` (created if needed).
void write_model_case(const train::TrainConfig& config, const train::IbrnetModel& model,
                      const data::TrainingSample& sample, const train::RayBatch& rays,
                      RandomKey key, const std::filesystem::path& dir);

}  // namespace mvibr::test
