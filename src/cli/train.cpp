// `mvibr train --config FILE [--key value ...]`: see train/trainer.h.
#include <cmath>
#include <iostream>

#include "commands.h"
#include "mvibr/train/config.h"
#include "mvibr/train/trainer.h"

namespace mvibr::cli {

int run_train(const std::vector<std::string>& args) {
  train::TrainConfig config;
  if (!train::parse_train_config(args, &config)) return 0;  // --help
  const train::TrainSummary summary = train::train(config, std::cout);
  std::cout << "trained " << summary.run_dir << " to step " << summary.last_step << " (loss "
            << summary.last_loss << ", psnr " << summary.last_psnr << ")";
  if (std::isfinite(summary.heldout_psnr)) {
    std::cout << "; held-out psnr " << summary.heldout_psnr << ", ssim " << summary.heldout_ssim;
  }
  if (!summary.last_checkpoint.empty()) std::cout << "; checkpoint " << summary.last_checkpoint;
  std::cout << "\n";
  return 0;
}

}  // namespace mvibr::cli
