// `mvibr render --run DIR`: a trained run's held-out views as PNGs (colour and depth) in
// DIR/renders/<step>/, to look at what the numbers of `mvibr eval` mean. Options as eval's.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "mvibr/train/evaluate.h"

namespace fs = std::filesystem;

namespace mvibr::cli {

int run_render(const std::vector<std::string>& args) {
  RunSelection s;
  if (!parse_run_selection(args, "render", &s)) return 0;
  const train::EvalReport report = train::evaluate_run(
      s.config, s.checkpoint, s.split, s.max_views, (fs::path(s.run_dir) / "renders").string(),
      [](const train::ViewMetrics& m) {
        std::printf("view %d %s: psnr %.2f ssim %.4f -> %s, %s\n", m.view, m.name.c_str(), m.psnr,
                    m.ssim, m.rgb_png.c_str(), m.depth_png.c_str());
        std::fflush(stdout);
      });
  std::printf("rendered %zu %s view(s) at step %llu: mean psnr %.2f ssim %.4f\n",
              report.views.size(), data::split_name(s.split), (unsigned long long)report.step,
              report.mean_psnr, report.mean_ssim);
  return 0;
}

}  // namespace mvibr::cli
