// `mvibr train` on one process: the loop that draws a sample from the prefetching reader, trains
// the model on N_rand of its target's rays, steps Adam, logs and checkpoints. A run lives in
// basedir/expname (config.txt, metrics.jsonl, checkpoints/); it resumes from its newest
// checkpoint unless no_reload, or from ckpt_path. Resumed runs reach bit-identical parameters to
// uninterrupted ones on the CPU: the data cursor, the step (which keys every random draw) and
// Adam's state are all in the checkpoint.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>

#include "mvibr/train/config.h"

namespace mvibr::train {

struct TrainSummary {
  std::string run_dir;
  uint64_t first_step = 0, last_step = 0;  // steps taken by this call: (first_step, last_step]
  double last_loss = 0, last_psnr = 0;
  // Of the last held-out validation (every i_img steps and at the end); NaN when none ran.
  double heldout_psnr = std::numeric_limits<double>::quiet_NaN();
  double heldout_ssim = std::numeric_limits<double>::quiet_NaN();
  std::string last_checkpoint;
};

// Trains until config.n_iters steps; progress lines go to `log`. Every i_img steps and at the
// end, the first held-out view (test split, else val; none: skipped) is rendered with the
// current weights and its PSNR and SSIM logged and appended to metrics.jsonl.
TrainSummary train(const TrainConfig& config, std::ostream& log);

}  // namespace mvibr::train
