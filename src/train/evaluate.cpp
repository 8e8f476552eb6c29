// Held-out rendering and its metrics (see evaluate.h). Metrics are computed in double so that
// they do not depend on the order of summation more than the printed digits show.
#include "mvibr/train/evaluate.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "mvibr/core/durable_file.h"
#include "mvibr/core/error.h"
#include "mvibr/data/image_io.h"
#include "mvibr/data/neighbours.h"
#include "mvibr/data/shards.h"
#include "mvibr/train/checkpoint.h"
#include "mvibr/train/dynibar_model.h"

namespace mvibr::train {

namespace fs = std::filesystem;

namespace {

void check_same_size(const RgbImage& a, const RgbImage& b, const char* metric) {
  const size_t n = size_t(a.width) * a.height * 3;
  if (a.width != b.width || a.height != b.height || a.pixels.size() != n || b.pixels.size() != n) {
    throw InvalidArgument(std::string(metric) + ": images of " + std::to_string(a.width) + "x" +
                          std::to_string(a.height) + " and " + std::to_string(b.width) + "x" +
                          std::to_string(b.height) + " (or pixel counts that do not match)");
  }
}

constexpr int kSsimWindow = 11;
constexpr double kSsimSigma = 1.5;

// The normalised 1-D Gaussian; the 2-D window is its outer product, so filtering is separable.
std::array<double, kSsimWindow> ssim_taps() {
  std::array<double, kSsimWindow> taps{};
  double sum = 0;
  for (int i = 0; i < kSsimWindow; ++i) {
    const double x = (i - kSsimWindow / 2) / kSsimSigma;
    taps[size_t(i)] = std::exp(-0.5 * x * x);
    sum += taps[size_t(i)];
  }
  for (double& t : taps) t /= sum;
  return taps;
}

// 'Valid' 2-D filtering of one channel (stride 3) of [h][w][3] data: [h-10][w-10].
std::vector<double> filter_valid(const std::vector<double>& image, int height, int width,
                                 const std::array<double, kSsimWindow>& taps) {
  const int out_w = width - kSsimWindow + 1, out_h = height - kSsimWindow + 1;
  std::vector<double> rows(size_t(height) * out_w);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < out_w; ++x) {
      double s = 0;
      for (int k = 0; k < kSsimWindow; ++k) s += taps[size_t(k)] * image[size_t(y) * width + x + k];
      rows[size_t(y) * out_w + x] = s;
    }
  }
  std::vector<double> out(size_t(out_h) * out_w);
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      double s = 0;
      for (int k = 0; k < kSsimWindow; ++k) s += taps[size_t(k)] * rows[size_t(y + k) * out_w + x];
      out[size_t(y) * out_w + x] = s;
    }
  }
  return out;
}

uint8_t to_byte(double x) {
  return uint8_t(std::lround(std::clamp(x, 0.0, 1.0) * 255.0));
}

// Where a view's colour and depth PNGs go: <dir>/<file-safe name>.png and _depth.png.
struct PngPaths {
  std::string rgb, depth, static_rgb, dynamic_rgb;
};
PngPaths png_paths(const std::string& dir, const std::string& name) {
  const std::string stem = (fs::path(dir) / file_safe(name)).string();
  return {stem + ".png", stem + "_depth.png", stem + "_static.png", stem + "_dynamic.png"};
}

// Depth from the view's near_depth (black) to its far_depth (white); the model's parts where it
// has them.
void write_pngs(const RenderedView& r, const data::View& view, const PngPaths& paths) {
  fs::create_directories(fs::path(paths.rgb).parent_path());
  const int w = r.rgb.width, h = r.rgb.height;
  const auto write_rgb = [&](const std::vector<float>& rgb, const std::string& path) {
    std::vector<uint8_t> bytes(rgb.size());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = to_byte(rgb[i]);
    data::write_png(path, w, h, 3, bytes.data());
  };
  write_rgb(r.rgb.pixels, paths.rgb);
  if (!r.parts.static_rgb.empty()) write_rgb(r.parts.static_rgb, paths.static_rgb);
  if (!r.parts.dynamic_rgb.empty()) write_rgb(r.parts.dynamic_rgb, paths.dynamic_rgb);
  std::vector<uint8_t> bytes(r.depth.size());
  const double range = view.far_depth - view.near_depth;
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = to_byte((double(r.depth[i]) - view.near_depth) / range);
  }
  data::write_png(paths.depth, w, h, 1, bytes.data());
}

int count_split(const data::SceneIndex& index, data::Split split) {
  return int(std::count_if(index.scene.views.begin(), index.scene.views.end(),
                           [&](const data::View& v) { return v.split == split; }));
}

data::ReaderOptions heldout_reader_options(const TrainConfig& c, data::Split split) {
  data::ReaderOptions o;
  o.data_dir = c.datadir;
  o.seed = c.seed;
  o.num_source_views = c.num_source_views;
  o.queue_depth = 1;
  o.split = split;
  o.shuffle = false;       // file order, and each target's nearest sources, as IBRNet evaluates
  o.target_motion = true;  // the regional scores' masks, where the shards have them
  if (c.model == ModelKind::kDynibar) {
    o.dynibar_sources = true;
    o.dynibar = dynibar_source_options(c);
    o.dynibar.same_time = true;   // as eval_nvidia.py: a held-out camera reads the video's frame
    o.dynibar.rig_static = true;  // and, on a rig, every other viewpoint's nearest frame
  }
  return o;
}

}  // namespace

std::string file_safe(const std::string& name) {
  std::string stem = name;
  const fs::path path(name);
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") stem.resize(stem.size() - ext.size());
  for (char& c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return stem;
}

std::vector<float> pixel_rows(int width, int first_row, int rows) {
  std::vector<float> pixels(size_t(std::max(rows, 0)) * size_t(std::max(width, 0)) * 2);
  for (int v = 0; v < rows; ++v) {
    for (int u = 0; u < width; ++u) {
      pixels[2 * (size_t(v) * width + u)] = float(u);
      pixels[2 * (size_t(v) * width + u) + 1] = float(first_row + v);
    }
  }
  return pixels;
}

RenderedView render_view(TrainableModel& model, const data::TrainingSample& sample, RandomKey key,
                         const std::function<void(int, int)>& on_chunk) {
  const int width = sample.target.camera.width, height = sample.target.camera.height;
  const std::vector<float> pixels = pixel_rows(width, 0, height);
  RenderedView r;
  r.rgb.width = width;
  r.rgb.height = height;
  model.render(sample, pixels, key, &r.rgb.pixels, &r.depth, on_chunk, &r.parts);
  return r;
}

RgbImage view_image(const data::View& view) {
  RgbImage image;
  image.width = view.camera.width;
  image.height = view.camera.height;
  if (view.rgb.size() != size_t(image.width) * image.height * 3) {
    throw InvalidArgument("view " + view.name + " has no pixels loaded");
  }
  image.pixels.resize(view.rgb.size());
  for (size_t i = 0; i < view.rgb.size(); ++i) image.pixels[i] = float(view.rgb[i]) / 255.0f;
  return image;
}

double psnr(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b, "psnr");
  if (a.pixels.empty()) throw InvalidArgument("psnr: empty images");
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - double(b.pixels[i]);
    sum += d * d;
  }
  if (sum == 0) return std::numeric_limits<double>::infinity();
  return -10.0 * std::log10(sum / double(a.pixels.size()));
}

namespace {

// ssim()'s score at every window position [(h - 10) x (w - 10)], averaged over the channels.
std::vector<double> ssim_map(const RgbImage& a, const RgbImage& b) {
  check_same_size(a, b, "ssim");
  const int w = a.width, h = a.height;
  if (w < kSsimWindow || h < kSsimWindow) {
    throw InvalidArgument("ssim: images of " + std::to_string(w) + "x" + std::to_string(h) +
                          " are smaller than the 11x11 window");
  }
  const std::array<double, kSsimWindow> taps = ssim_taps();
  const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;
  const size_t n = size_t(w) * h;
  std::vector<double> x(n), y(n), xx(n), yy(n), xy(n);
  std::vector<double> map(size_t(h - kSsimWindow + 1) * size_t(w - kSsimWindow + 1), 0.0);
  for (int c = 0; c < 3; ++c) {
    for (size_t i = 0; i < n; ++i) {
      x[i] = a.pixels[3 * i + size_t(c)];
      y[i] = b.pixels[3 * i + size_t(c)];
      xx[i] = x[i] * x[i];
      yy[i] = y[i] * y[i];
      xy[i] = x[i] * y[i];
    }
    const std::vector<double> mu_x = filter_valid(x, h, w, taps),
                              mu_y = filter_valid(y, h, w, taps);
    const std::vector<double> e_xx = filter_valid(xx, h, w, taps);
    const std::vector<double> e_yy = filter_valid(yy, h, w, taps);
    const std::vector<double> e_xy = filter_valid(xy, h, w, taps);
    for (size_t i = 0; i < mu_x.size(); ++i) {
      const double var_x = std::max(0.0, e_xx[i] - mu_x[i] * mu_x[i]);
      const double var_y = std::max(0.0, e_yy[i] - mu_y[i] * mu_y[i]);
      double cov = e_xy[i] - mu_x[i] * mu_y[i];
      cov = std::copysign(std::min(std::sqrt(var_x * var_y), std::abs(cov)), cov);
      map[i] += (2 * mu_x[i] * mu_y[i] + c1) * (2 * cov + c2) /
                ((mu_x[i] * mu_x[i] + mu_y[i] * mu_y[i] + c1) * (var_x + var_y + c2)) / 3;
    }
  }
  return map;
}

double map_mean(const std::vector<double>& map) {
  double sum = 0;
  for (double v : map) sum += v;
  return sum / double(map.size());
}

void check_mask(const RgbImage& a, const std::vector<uint8_t>& mask, const char* metric) {
  if (mask.size() != size_t(a.width) * a.height) {
    throw InvalidArgument(std::string(metric) + ": a mask of " + std::to_string(mask.size()) +
                          " pixels for an image of " + std::to_string(a.width) + "x" +
                          std::to_string(a.height));
  }
}

}  // namespace

double ssim(const RgbImage& a, const RgbImage& b) {
  return map_mean(ssim_map(a, b));
}

double masked_psnr(const RgbImage& a, const RgbImage& b, const std::vector<uint8_t>& mask) {
  check_same_size(a, b, "psnr");
  check_mask(a, mask, "psnr");
  double sum = 0, count = 0;
  for (size_t p = 0; p < mask.size(); ++p) {
    if (!mask[p]) continue;
    for (size_t i = 3 * p; i < 3 * p + 3; ++i) {
      const double d = double(a.pixels[i]) - double(b.pixels[i]);
      sum += d * d;
    }
    count += 3;
  }
  if (count == 0) return std::numeric_limits<double>::quiet_NaN();
  if (sum == 0) return std::numeric_limits<double>::infinity();
  return -10.0 * std::log10(sum / count);
}

namespace {

// The mean of an ssim_map over the window positions whose centre pixel's mask is 1 (`width` the
// image's); NaN when there are none.
double masked_mean(const std::vector<double>& map, int width, const std::vector<uint8_t>& mask) {
  const int out_w = width - kSsimWindow + 1, half = kSsimWindow / 2;
  double sum = 0, count = 0;
  for (size_t i = 0; i < map.size(); ++i) {
    const size_t y = i / size_t(out_w) + half, x = i % size_t(out_w) + half;
    if (!mask[y * size_t(width) + x]) continue;
    sum += map[i];
    count += 1;
  }
  return count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

double masked_ssim(const RgbImage& a, const RgbImage& b, const std::vector<uint8_t>& mask) {
  check_mask(a, mask, "ssim");
  return masked_mean(ssim_map(a, b), a.width, mask);
}

TrainConfig evaluation_config(const TrainConfig& config) {
  TrainConfig c = config;
  c.det = true;
  return c;
}

ViewMetrics evaluate_view(TrainableModel& model, const data::TrainingSample& sample, RandomKey key,
                          const std::string& png_dir,
                          const std::function<void(int, int)>& on_chunk) {
  const RenderedView rendered = render_view(model, sample, key, on_chunk);
  const RgbImage truth = view_image(sample.target);
  ViewMetrics m;
  m.view = sample.target_view;
  m.name = sample.target.name;
  m.psnr = psnr(rendered.rgb, truth);
  const std::vector<double> map = ssim_map(rendered.rgb, truth);  // one map for every region
  m.ssim = map_mean(map);
  const std::vector<uint8_t>& moving = sample.target.motion.motion_mask;
  if (!moving.empty()) {
    check_mask(truth, moving, "ssim");
    std::vector<uint8_t> still(moving.size());
    for (size_t i = 0; i < moving.size(); ++i) still[i] = moving[i] ? 0 : 1;
    m.psnr_dynamic = masked_psnr(rendered.rgb, truth, moving);
    m.ssim_dynamic = masked_mean(map, truth.width, moving);
    m.psnr_static = masked_psnr(rendered.rgb, truth, still);
    m.ssim_static = masked_mean(map, truth.width, still);
  }
  if (!png_dir.empty()) {
    const PngPaths paths = png_paths(png_dir, m.name);
    write_pngs(rendered, sample.target, paths);
    m.rgb_png = paths.rgb;
    m.depth_png = paths.depth;
  }
  return m;
}

std::optional<data::TrainingSample> first_heldout_sample(const TrainConfig& config) {
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  for (data::Split split : {data::Split::kTest, data::Split::kValidation}) {
    if (count_split(index, split) == 0) continue;
    data::PrefetchReader reader(heldout_reader_options(config, split));
    return reader.next();
  }
  return std::nullopt;
}

EvalReport evaluate_run(const TrainConfig& config, const std::string& checkpoint, data::Split split,
                        int max_views, const std::string& png_root,
                        const std::function<void(const ViewMetrics&)>& on_view,
                        dist::Communicator* comm, const RenderProgress& progress) {
  const std::unique_ptr<TrainableModel> model = make_model(evaluation_config(config));
  EvalReport report;
  report.step = train::load_weights(checkpoint, &model->parameters());

  const std::string png_dir =
      png_root.empty() ? "" : (fs::path(png_root) / std::to_string(report.step)).string();
  // Each rank reads and renders only its own views (i = rank, rank + ranks, ...); the others'
  // scores and view indices come in through one all-reduce, their names from the scene index.
  const data::SceneIndex index = data::read_scene_index(config.datadir);
  const size_t in_split = size_t(count_split(index, split));
  if (in_split == 0) {
    throw InvalidArgument(config.datadir + ": has no " + data::split_name(split) + " views");
  }
  const size_t n = max_views > 0 ? std::min(in_split, size_t(max_views)) : in_split;
  // One fixed key: with det = true the samples do not depend on it, and were det ever off,
  // every evaluation of a view would still draw the same ones.
  const RandomKey key{config.seed, 0};
  const int rank = comm != nullptr ? comm->rank() : 0, ranks = comm != nullptr ? comm->size() : 1;
  // view, psnr, ssim and the regional four of each; 0 where another rank's.
  constexpr size_t kScores = 7;
  std::vector<double> scores(kScores * n, 0.0);
  report.views.resize(n);
  if (size_t(rank) < n) {
    data::ReaderOptions options = heldout_reader_options(config, split);
    options.stride = ranks;
    data::PrefetchReader reader(options, {0, size_t(rank)});
    if (reader.samples_per_epoch() != in_split) {
      throw InvalidArgument(
          config.datadir + ": the shards hold " + std::to_string(reader.samples_per_epoch()) + " " +
          data::split_name(split) + " views, scene.h5 lists " + std::to_string(in_split));
    }
    const size_t mine = (n - size_t(rank) + size_t(ranks) - 1) / size_t(ranks);
    for (size_t i = size_t(rank), done = 0; i < n; i += size_t(ranks), ++done) {
      const auto on_chunk = [&](int rays_done, int rays) {
        if (progress) progress(done, mine, rays_done, rays);
      };
      report.views[i] = evaluate_view(*model, reader.next(), key, png_dir, on_chunk);
      const ViewMetrics& v = report.views[i];
      const double mine_scores[kScores] = {double(v.view), v.psnr,         v.ssim,
                                           v.psnr_dynamic, v.ssim_dynamic, v.psnr_static,
                                           v.ssim_static};
      std::copy(mine_scores, mine_scores + kScores, scores.begin() + long(kScores * i));
      if (on_view) on_view(report.views[i]);
    }
  }
  if (ranks > 1) comm->all_reduce(scores.data(), scores.size(), dist::ReduceOp::kSum);
  // A regional mean over the views that have the region.
  const auto mean_of = [&](double ViewMetrics::*member) {
    double sum = 0, count = 0;
    for (const ViewMetrics& m : report.views) {
      if (std::isnan(m.*member)) continue;
      sum += m.*member;
      count += 1;
    }
    return count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
  };
  for (size_t i = 0; i < n; ++i) {
    ViewMetrics& m = report.views[i];
    const double* v = scores.data() + kScores * i;
    if (i % size_t(ranks) != size_t(rank)) {  // another rank's: only what the scores carry
      m.view = int(v[0]);
      m.name = index.scene.views.at(size_t(m.view)).name;
    }
    m.psnr = v[1];
    m.ssim = v[2];
    m.psnr_dynamic = v[3];
    m.ssim_dynamic = v[4];
    m.psnr_static = v[5];
    m.ssim_static = v[6];
    report.mean_psnr += m.psnr / double(n);
    report.mean_ssim += m.ssim / double(n);
  }
  report.mean_psnr_dynamic = mean_of(&ViewMetrics::psnr_dynamic);
  report.mean_ssim_dynamic = mean_of(&ViewMetrics::ssim_dynamic);
  report.mean_psnr_static = mean_of(&ViewMetrics::psnr_static);
  report.mean_ssim_static = mean_of(&ViewMetrics::ssim_static);
  return report;
}

namespace {

// A path frame as a sample, sources named (source_views) but not loaded: IBRNet's nearest
// training views, or DynIBaR's three sets (no anchor: rendering has no cross-time pass), drawn
// alike for every frame, so that frames at one time read the same static views and a sweep's
// move with its time (no flicker from a fresh draw per frame).
data::TrainingSample path_sample(const TrainConfig& config, const data::Scene& scene,
                                 const data::SourceRanking& ranking, const data::PathFrame& frame) {
  data::TrainingSample sample;
  sample.target.camera = frame.camera;
  sample.target.near_depth = frame.near_depth;
  sample.target.far_depth = frame.far_depth;
  sample.target.time_index = frame.time_index;
  sample.target.split = data::Split::kTest;
  if (config.model != ModelKind::kDynibar) {
    sample.source_views = ranking.nearest(frame.camera, frame.time_index, config.num_source_views);
    return sample;
  }
  std::vector<data::SourceCandidate> pool;
  for (int v : ranking.nearest(frame.camera, frame.time_index, int(scene.views.size()))) {
    pool.push_back({v, scene.views[size_t(v)].time_index});
  }
  data::DynibarSourceOptions options = dynibar_source_options(config);
  options.same_time = true;
  const data::DynibarSources chosen = data::select_dynibar_sources(
      pool, -1, frame.time_index, options, RandomKey{config.seed, 0}, 0);
  const auto place = [&](int view) {
    if (view < 0) return -1;
    const auto at = std::find(sample.source_views.begin(), sample.source_views.end(), view);
    if (at != sample.source_views.end()) return int(at - sample.source_views.begin());
    sample.source_views.push_back(view);
    return int(sample.source_views.size()) - 1;
  };
  data::DynibarSourceSets sets;
  for (int k = 0; k < data::kFlowCount; ++k)
    sets.dynamic[size_t(k)] = place(chosen.dynamic[size_t(k)]);
  sets.same_time = place(chosen.same_time);
  for (int view : chosen.static_views) sets.static_views.push_back(place(view));
  sample.dynibar = sets;
  return sample;
}

}  // namespace

PathReport render_path(const TrainConfig& config, const std::string& checkpoint,
                       const std::vector<data::PathFrame>& path, const std::string& png_root,
                       const std::string& name,
                       const std::function<void(const PathFrameRender&)>& on_frame,
                       dist::Communicator* comm, const RenderProgress& progress) {
  const std::unique_ptr<TrainableModel> model = make_model(evaluation_config(config));
  PathReport report;
  report.step = train::load_weights(checkpoint, &model->parameters());
  report.dir = (fs::path(png_root) / std::to_string(report.step) / name).string();
  const data::ViewLookup lookup(config.datadir);
  data::NeighbourOptions reach;
  if (config.model == ModelKind::kDynibar) reach.time_window = config.max_range;
  const data::SourceRanking ranking(lookup.index().scene, reach);
  const RandomKey key{config.seed, 0};  // as evaluate_run: det = true makes it irrelevant
  const int rank = comm != nullptr ? comm->rank() : 0, ranks = comm != nullptr ? comm->size() : 1;
  nlohmann::json cameras = nlohmann::json::array();
  const size_t mine =
      (path.size() - std::min(path.size(), size_t(rank)) + size_t(ranks) - 1) / size_t(ranks);
  size_t done = 0;
  for (size_t f = 0; f < path.size(); ++f) {
    const data::PathFrame& frame = path[f];
    data::TrainingSample sample = path_sample(config, lookup.index().scene, ranking, frame);
    char frame_name[32];
    std::snprintf(frame_name, sizeof frame_name, "frame-%04zu", f);
    sample.target.name = frame_name;
    const PngPaths paths = png_paths(report.dir, frame_name);
    const PathFrameRender r{int(f), sample.source_views, paths.rgb, paths.depth};
    if (int(f % size_t(ranks)) == rank) {
      for (int v : sample.source_views) sample.sources.push_back(lookup.view(v));
      const auto on_chunk = [&](int rays_done, int rays) {
        if (progress) progress(done, mine, rays_done, rays);
      };
      write_pngs(render_view(*model, sample, key, on_chunk), sample.target, paths);
      ++done;
      if (on_frame) on_frame(r);
    }
    const auto& c = frame.camera;
    cameras.push_back({{"frame", f},
                       {"c2w", std::vector<double>(c.c2w, c.c2w + 12)},
                       {"fx", c.fx},
                       {"fy", c.fy},
                       {"cx", c.cx},
                       {"cy", c.cy},
                       {"width", c.width},
                       {"height", c.height},
                       {"near_depth", frame.near_depth},
                       {"far_depth", frame.far_depth},
                       {"time_index", frame.time_index},
                       {"source_views", r.source_views},
                       {"rgb_png", r.rgb_png}});
    report.frames.push_back(r);
  }
  // The list appears once every frame it names is written.
  if (ranks > 1) comm->barrier();
  if (rank == 0) {
    fs::create_directories(report.dir);
    write_file_atomically((fs::path(report.dir) / "cameras.json").string(), cameras.dump(1) + "\n");
  }
  return report;
}

}  // namespace mvibr::train
