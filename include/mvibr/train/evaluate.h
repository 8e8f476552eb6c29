// Held-out evaluation: render every pixel of a view with a trained model and score it against
// the view's image with PSNR and SSIM, the numbers IBRNet and NeRF papers report. `mvibr render`
// and `mvibr eval` are built on evaluate_run; the training loop scores one held-out view with
// evaluate_view every i_img steps, so a run shows whether it generalises, not only its fit.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mvibr/core/philox.h"
#include "mvibr/data/camera_path.h"
#include "mvibr/data/prefetch_reader.h"
#include "mvibr/dist/communicator.h"
#include "mvibr/train/config.h"
#include "mvibr/train/model.h"

namespace mvibr::train {

// An RGB image in [0,1], row-major [height][width][3].
struct RgbImage {
  int width = 0, height = 0;
  std::vector<float> pixels;
};

struct RenderedView {
  RgbImage rgb;
  std::vector<float> depth;  // [height][width], camera-z of the fine pass (coarse when coarse_only)
  RenderedParts parts;       // [height][width][3] each; DynIBaR's only
};

// The integer pixel coordinates (u, v) of rows [first_row, first_row + rows) of an image
// `width` wide, row by row: [rows * width, 2], where IBRNet's rays go through when it renders.
std::vector<float> pixel_rows(int width, int first_row, int rows);

// Renders every pixel of the sample's target from its sources, at the integer pixel coordinates
// (u, v) the training rays use, chunk_size rays at a time, without gradients; `on_chunk(rays
// done, rays)` after each chunk.
RenderedView render_view(TrainableModel& model, const data::TrainingSample& sample, RandomKey key,
                         const std::function<void(int, int)>& on_chunk = {});

// The view's own pixels as an RgbImage (uint8 / 255).
RgbImage view_image(const data::View& view);

// PSNR in dB over all pixels and channels: -10 log10(mean((a - b)^2)); +infinity when equal.
double psnr(const RgbImage& a, const RgbImage& b);

// SSIM as NeRF evaluations compute it (mip-NeRF's compute_ssim; skimage's
// structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
// data_range=1, channel_axis=-1) crops to the same positions and differs only by the clamps,
// which act on rounding error alone): per channel, means,
// variances and covariance under an 11x11 Gaussian window (sigma 1.5, normalised to sum 1)
// evaluated only where the window fits inside the image ('valid'); variances clamped at 0 and
// |covariance| at sqrt(var_a var_b); then
//   ssim = (2 mu_a mu_b + C1) (2 cov + C2) / ((mu_a^2 + mu_b^2 + C1) (var_a + var_b + C2)),
// C1 = (0.01)^2, C2 = (0.03)^2 (data range 1), averaged over positions, then over channels.
// Both images at least 11x11 and of one size; else InvalidArgument.
double ssim(const RgbImage& a, const RgbImage& b);

// PSNR over the pixels whose mask [height][width] is 1, every channel; NaN when there are none.
double masked_psnr(const RgbImage& a, const RgbImage& b, const std::vector<uint8_t>& mask);
// SSIM as ssim() computes it, averaged over the window positions whose centre pixel's mask is 1
// (DynIBaR's masked scores); NaN when there are none.
double masked_ssim(const RgbImage& a, const RgbImage& b, const std::vector<uint8_t>& mask);

struct ViewMetrics {
  int view = -1;  // global view index
  std::string name;
  double psnr = 0, ssim = 0;
  // Over the target's moving pixels (its motion mask, DynIBaR's dynamic_masks) and over the
  // others, where the data has motion masks; NaN where it has none or a region is empty.
  double psnr_dynamic = std::numeric_limits<double>::quiet_NaN();
  double ssim_dynamic = std::numeric_limits<double>::quiet_NaN();
  double psnr_static = std::numeric_limits<double>::quiet_NaN();
  double ssim_static = std::numeric_limits<double>::quiet_NaN();
  std::string rgb_png, depth_png;  // written files, when asked for
};

// A view's name as a file name: the image extension dropped (.png, .jpg, .jpeg), characters
// other than [A-Za-z0-9._-] become '_'.
std::string file_safe(const std::string& name);

// The model evaluation renders with: IBRNet validates and evaluates with deterministic depth
// samples (det = true), whatever the training config says.
TrainConfig evaluation_config(const TrainConfig& config);

// Renders the sample's target with `model` and scores it. With `png_dir` non-empty, writes
// <png_dir>/<name>.png and <name>_depth.png (depth from near_depth black to far_depth white;
// DynIBaR: also <name>_static.png and <name>_dynamic.png, the composite's two parts),
// the name made file-safe (extension dropped, characters other than [A-Za-z0-9._-] become '_').
ViewMetrics evaluate_view(TrainableModel& model, const data::TrainingSample& sample, RandomKey key,
                          const std::string& png_dir = "",
                          const std::function<void(int, int)>& on_chunk = {});

// How far this rank's share of an evaluation or a path has got, after every chunk: `done` of its
// `items` views or frames finished, and `rays_done` of the `rays` of the one in progress.
using RenderProgress = std::function<void(size_t done, size_t items, int rays_done, int rays)>;

// The first held-out target of the data set with its nearest sources: of the test split, else of
// the validation split; nullopt when it has neither.
std::optional<data::TrainingSample> first_heldout_sample(const TrainConfig& config);

struct EvalReport {
  uint64_t step = 0;  // the checkpoint's
  std::vector<ViewMetrics> views;
  double mean_psnr = 0, mean_ssim = 0;
  // The regional scores' means over the views that have them (NaN when none has).
  double mean_psnr_dynamic = 0, mean_ssim_dynamic = 0, mean_psnr_static = 0, mean_ssim_static = 0;
};

// Loads `checkpoint` into the model of evaluation_config(config) and evaluates the first
// `max_views` targets of `split` (all when max_views <= 0) in the order of the data set's shards,
// each with its num_source_views nearest sources. With `png_root` non-empty, each view's PNGs go
// to png_root/<step>/ (the checkpoint's step). `on_view` is called after each view this process
// rendered. With `comm`, its ranks share the views (view i on rank i % size) and every rank gets
// every view's scores, the same numbers one process computes. Errors (no such views, a
// checkpoint of another model) are InvalidArguments.
EvalReport evaluate_run(const TrainConfig& config, const std::string& checkpoint, data::Split split,
                        int max_views, const std::string& png_root,
                        const std::function<void(const ViewMetrics&)>& on_view = {},
                        dist::Communicator* comm = nullptr, const RenderProgress& progress = {});

struct PathFrameRender {
  int frame = 0;
  std::vector<int> source_views;  // global indices, best first
  std::string rgb_png, depth_png;
};

struct PathReport {
  uint64_t step = 0;  // the checkpoint's
  std::string dir;    // where the frames are
  std::vector<PathFrameRender> frames;
};

// Loads `checkpoint` into the model of evaluation_config(config) and renders every frame of
// `path` at its time step into <png_root>/<step>/<name>/: frame-NNNN.png, frame-NNNN_depth.png
// (DynIBaR: also frame-NNNN_static.png and _dynamic.png, the composite's two parts) and
// cameras.json (each frame's camera, depth bounds, time step and sources). IBRNet reads the
// num_source_views nearest training views (data::SourceRanking); DynIBaR its three sets around
// the frame's time as evaluation draws them (the frames at t +- 1..3 and at t; the static views
// over t +- max_range, ranked by the frame's camera). `on_frame` is called after each frame this
// process rendered. With `comm`, its ranks share the frames (frame f on rank f % size) and rank 0
// writes cameras.json once all are written; the report lists every frame on every rank.
PathReport render_path(const TrainConfig& config, const std::string& checkpoint,
                       const std::vector<data::PathFrame>& path, const std::string& png_root,
                       const std::string& name,
                       const std::function<void(const PathFrameRender&)>& on_frame = {},
                       dist::Communicator* comm = nullptr, const RenderProgress& progress = {});

}  // namespace mvibr::train
