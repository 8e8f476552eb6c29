// Every op of the rendering core against the PyTorch reference (render_ops_reference.py,
// float64 autograd). Cases are written as .npy into a temporary folder, the reference runs once
// over all of them, and each test compares one case on the CPU backend in double (bound 1e-10)
// and float (forward 1e-5, gradients 1e-4; the fp32 bounds), as normwise relative
// errors max|ours - ref| / max|ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mvibr/ops/render_ops.h"
#include "mvibr/synthetic/random_scene.h"
#include "npy.h"

#include <unistd.h>

namespace mvibr {
namespace {

namespace fs = std::filesystem;
using test::NpyArray;
using Arrays = std::map<std::string, NpyArray>;

// One case: its inputs, and our outputs computed in float or double from them. Outputs whose
// name starts with "grad_" are gradients and get the gradient bound.
struct ReferenceCase {
  std::string op;
  nlohmann::json params;
  Arrays inputs;
  std::function<Arrays(const Arrays&, bool single)> run;
};

template <typename T>
std::vector<T> as(const NpyArray& a) {
  return std::vector<T>(a.data.begin(), a.data.end());
}

template <typename T>
NpyArray array(const std::vector<T>& data, std::vector<size_t> shape) {
  return {std::move(shape), std::vector<double>(data.begin(), data.end())};
}

NpyArray random_array(std::vector<size_t> shape, double lo, double hi, uint64_t seed) {
  size_t count = 1;
  for (size_t d : shape) count *= d;
  return {std::move(shape), synthetic::random_values(count, lo, hi, seed)};
}

NpyArray camera_array(const PinholeCamera<double>& c) {
  std::vector<double> v{c.fx, c.fy, c.cx, c.cy};
  v.insert(v.end(), c.c2w, c.c2w + 12);
  return {{16}, v};
}

PinholeCamera<double> camera_from(const NpyArray& a) {
  PinholeCamera<double> c;
  c.fx = a.data[0];
  c.fy = a.data[1];
  c.cx = a.data[2];
  c.cy = a.data[3];
  for (int i = 0; i < 12; ++i) c.c2w[i] = a.data[4 + i];
  set_world_to_camera(&c);
  return c;
}

// --- one builder per op -------------------------------------------------------------------

template <typename T>
Arrays run_rays(const Arrays& in) {
  const PinholeCamera<T> camera = camera_cast<T>(camera_from(in.at("camera")));
  const size_t R = in.at("pixels").shape[0];
  std::vector<T> origins(R * 3), directions(R * 3);
  cpu::generate_rays(camera, as<T>(in.at("pixels")).data(), int(R), origins.data(),
                     directions.data());
  return {{"origins", array(origins, {R, 3})}, {"directions", array(directions, {R, 3})}};
}

ReferenceCase rays_case(int n_rays, uint64_t seed) {
  synthetic::RandomSceneSize size;
  size.n_rays = n_rays;
  const auto scene = synthetic::make_random_scene(size, seed);
  return {"rays",
          {},
          {{"camera", camera_array(scene.target)},
           {"pixels", array(scene.pixels, {size_t(n_rays), 2})}},
          [](const Arrays& in, bool single) {
            return single ? run_rays<float>(in) : run_rays<double>(in);
          }};
}

DepthSampling depth_sampling(const nlohmann::json& p) {
  return {p["near"], p["far"], p["n_samples"], p["inv_uniform"], p["det"]};
}

template <typename T>
Arrays run_coarse(const Arrays& in, const nlohmann::json& p) {
  const size_t R = in.at("u").shape[0], S = p["n_samples"];
  std::vector<T> depths(R * S);
  cpu::sample_coarse_depths(int(R), depth_sampling(p), RandomKey{p["seed"], p["step"]},
                            p["first_ray"], depths.data());
  return {{"depths", array(depths, {R, S})}};
}

// The Philox numbers the CPU backend draws, exported so that PyTorch uses the same ones.
NpyArray philox_uniforms(RandomStream stream, RandomKey key, uint32_t first_ray, size_t rays,
                         size_t per_ray) {
  NpyArray u{{rays, per_ray}, std::vector<double>(rays * per_ray)};
  for (size_t r = 0; r < rays; ++r) {
    for (size_t i = 0; i < per_ray; ++i) {
      u.data[r * per_ray + i] = philox_uniform(key, stream, first_ray + uint32_t(r), uint32_t(i));
    }
  }
  return u;
}

ReferenceCase coarse_case(int n_rays, int n_samples, bool inv_uniform, bool det, uint64_t seed) {
  const nlohmann::json p = {{"near", 1.5},
                            {"far", 7.25},
                            {"n_samples", n_samples},
                            {"inv_uniform", inv_uniform},
                            {"det", det},
                            {"seed", seed},
                            {"step", 17},
                            {"first_ray", 1000}};
  return {"coarse",
          p,
          {{"u", philox_uniforms(RandomStream::kStratifiedJitter, {seed, 17}, 1000, size_t(n_rays),
                                 size_t(n_samples))}},
          [p](const Arrays& in, bool single) {
            return single ? run_coarse<float>(in, p) : run_coarse<double>(in, p);
          }};
}

template <typename T>
Arrays run_importance(const Arrays& in, const nlohmann::json& p) {
  const size_t R = in.at("depths").shape[0], S = in.at("depths").shape[1];
  const size_t N = p["n_importance"];
  std::vector<T> merged(R * (S + N));
  cpu::sample_importance_depths(int(R),
                                ImportanceSampling{int(S), int(N), p["inv_uniform"], p["det"]},
                                as<T>(in.at("depths")).data(), as<T>(in.at("weights")).data(),
                                RandomKey{p["seed"], 3}, 0, merged.data());
  return {{"merged", array(merged, {R, S + N})}};
}

ReferenceCase importance_case(int n_rays, int n_coarse, int n_importance, bool inv_uniform,
                              bool det, uint64_t seed) {
  std::vector<double> z(size_t(n_rays) * n_coarse);
  cpu::sample_coarse_depths(n_rays, {2.0, 6.0, n_coarse, inv_uniform, false}, {seed, 0}, 0,
                            z.data());
  NpyArray weights = random_array({size_t(n_rays), size_t(n_coarse)}, -0.5, 1.0, seed);
  for (double& w : weights.data) w = w < 0 ? 0 : w;  // empty stretches, as real rays have
  const nlohmann::json p = {
      {"n_importance", n_importance}, {"inv_uniform", inv_uniform}, {"det", det}, {"seed", seed}};
  return {"importance",
          p,
          {{"depths", array(z, {size_t(n_rays), size_t(n_coarse)})},
           {"weights", weights},
           {"u", philox_uniforms(RandomStream::kImportanceSampling, {seed, 3}, 0, size_t(n_rays),
                                 size_t(n_importance))}},
          [p](const Arrays& in, bool single) {
            return single ? run_importance<float>(in, p) : run_importance<double>(in, p);
          }};
}

// The cameras of a [N, 16] array (camera_array's rows), in T.
template <typename T>
std::vector<PinholeCamera<T>> cameras_from(const NpyArray& rows) {
  std::vector<PinholeCamera<T>> cameras;
  for (size_t i = 0; i < rows.shape[0]; ++i) {
    NpyArray one{{16},
                 std::vector<double>(rows.data.begin() + long(16 * i),
                                     rows.data.begin() + long(16 * (i + 1)))};
    cameras.push_back(camera_cast<T>(camera_from(one)));
  }
  return cameras;
}

// The views of a gather case, in T.
template <typename T>
struct GatherViews {
  explicit GatherViews(const Arrays& in)
      : image_values(as<T>(in.at("images"))), feature_values(as<T>(in.at("features"))) {
    const NpyArray& images = in.at("images");
    const NpyArray& features = in.at("features");
    const size_t V = images.shape[0];
    cameras = cameras_from<T>(in.at("cameras"));
    views.n_views = int(V);
    views.cameras = cameras.data();
    views.image_height = int(images.shape[1]);
    views.image_width = int(images.shape[2]);
    views.images = image_values.data();
    views.feature_height = int(features.shape[1]);
    views.feature_width = int(features.shape[2]);
    views.feature_channels = int(features.shape[3]);
    views.features = feature_values.data();
  }
  std::vector<PinholeCamera<T>> cameras;
  std::vector<T> image_values, feature_values;
  SourceViews<T> views;
};

template <typename T>
Arrays run_gather(const Arrays& in) {
  const GatherViews<T> g(in);
  const size_t R = in.at("depths").shape[0], S = in.at("depths").shape[1];
  const size_t V = size_t(g.views.n_views), C = size_t(g.views.feature_channels);
  const auto origins = as<T>(in.at("origins")), directions = as<T>(in.at("directions")),
             depths = as<T>(in.at("depths"));
  const auto& tc = in.at("target_center").data;
  std::vector<T> rgb_features(R * S * V * (3 + C)), ray_diff(R * S * V * 4), mask(R * S * V);
  cpu::gather_samples(int(R), int(S), origins.data(), directions.data(), depths.data(),
                      Vec3<T>{T(tc[0]), T(tc[1]), T(tc[2])}, g.views,
                      GatherOutputs<T>{rgb_features.data(), ray_diff.data(), mask.data()});
  std::vector<T> grad_images(g.image_values.size(), T(0)),
      grad_features(g.feature_values.size(), T(0));
  cpu::gather_samples_backward(int(R), int(S), origins.data(), directions.data(), depths.data(),
                               g.views, as<T>(in.at("grad_rgb_features")).data(),
                               grad_images.data(), grad_features.data());
  return {{"rgb_features", array(rgb_features, {R, S, V, 3 + C})},
          {"ray_diff", array(ray_diff, {R, S, V, 4})},
          {"mask", array(mask, {R, S, V})},
          {"grad_images", array(grad_images, in.at("images").shape)},
          {"grad_features", array(grad_features, in.at("features").shape)}};
}

// A random scene of `n_views` views with width x height images and feature_width x
// feature_height maps of `channels` features, and `n_rays` rays.
synthetic::RandomSceneSize scene_size(int n_views, int width, int height, int feature_width,
                                      int feature_height, int channels, int n_rays,
                                      bool last_view_faces_away = false) {
  synthetic::RandomSceneSize size;
  size.n_views = n_views;
  size.image_width = width;
  size.image_height = height;
  size.feature_width = feature_width;
  size.feature_height = feature_height;
  size.feature_channels = channels;
  size.n_rays = n_rays;
  size.last_view_faces_away = last_view_faces_away;
  return size;
}

ReferenceCase gather_case(synthetic::RandomSceneSize size, int n_samples, uint64_t seed) {
  const auto scene = synthetic::make_random_scene(size, seed);
  const size_t R = size_t(size.n_rays), S = size_t(n_samples), V = size_t(size.n_views);
  const size_t C = size_t(size.feature_channels);
  std::vector<double> origins(R * 3), directions(R * 3), depths(R * S);
  cpu::generate_rays(scene.target, scene.pixels.data(), int(R), origins.data(), directions.data());
  cpu::sample_coarse_depths(int(R), {scene.near_depth, scene.far_depth, n_samples, false, false},
                            {seed, 1}, 0, depths.data());
  NpyArray cameras{{V, 16}, {}};
  for (const auto& c : scene.sources) {
    const auto one = camera_array(c);
    cameras.data.insert(cameras.data.end(), one.data.begin(), one.data.end());
  }
  const Vec3<double> center = scene.target.center();
  return {
      "gather",
      {},
      {{"origins", array(origins, {R, 3})},
       {"directions", array(directions, {R, 3})},
       {"depths", array(depths, {R, S})},
       {"target_center", NpyArray{{3}, {center.x, center.y, center.z}}},
       {"cameras", cameras},
       {"images", array(scene.images, {V, size_t(size.image_height), size_t(size.image_width), 3})},
       {"features",
        array(scene.features, {V, size_t(size.feature_height), size_t(size.feature_width), C})},
       {"grad_rgb_features", random_array({R, S, V, 3 + C}, -1, 1, seed + 5)}},
      [](const Arrays& in, bool single) {
        return single ? run_gather<float>(in) : run_gather<double>(in);
      }};
}

template <typename T>
Arrays run_gather_moved(const Arrays& in) {
  const GatherViews<T> g(in);
  const NpyArray& moved_array = in.at("moved_points");
  const size_t R = moved_array.shape[0], S = moved_array.shape[1], V = moved_array.shape[2];
  const size_t C = size_t(g.views.feature_channels);
  const auto points = as<T>(in.at("points")), moved = as<T>(moved_array);
  const auto& tc = in.at("target_center").data;
  std::vector<T> rgb_features(R * S * V * (3 + C)), ray_diff(R * S * V * 4), mask(R * S * V);
  cpu::gather_moved_samples(int(R), int(S), points.data(), moved.data(),
                            Vec3<T>{T(tc[0]), T(tc[1]), T(tc[2])}, g.views,
                            GatherOutputs<T>{rgb_features.data(), ray_diff.data(), mask.data()});
  std::vector<T> grad_images(g.image_values.size(), T(0)),
      grad_features(g.feature_values.size(), T(0)), grad_moved(moved.size());
  cpu::gather_moved_samples_backward(int(R), int(S), moved.data(), g.views,
                                     as<T>(in.at("grad_rgb_features")).data(), grad_moved.data(),
                                     grad_images.data(), grad_features.data());
  return {{"rgb_features", array(rgb_features, {R, S, V, 3 + C})},
          {"ray_diff", array(ray_diff, {R, S, V, 4})},
          {"mask", array(mask, {R, S, V})},
          {"grad_images", array(grad_images, in.at("images").shape)},
          {"grad_features", array(grad_features, in.at("features").shape)},
          {"grad_moved_points", array(grad_moved, {R, S, V, 3})}};
}

// A gather case whose samples move by up to `reach` (world units) between the target's time and
// each view's.
ReferenceCase gather_moved_case(synthetic::RandomSceneSize size, int n_samples, double reach,
                                uint64_t seed) {
  ReferenceCase c = gather_case(size, n_samples, seed);
  const NpyArray& origins = c.inputs.at("origins");
  const NpyArray& directions = c.inputs.at("directions");
  const NpyArray& depths = c.inputs.at("depths");
  const size_t R = depths.shape[0], S = depths.shape[1], V = size_t(size.n_views);
  const size_t C = size_t(size.feature_channels);
  std::vector<double> points(R * S * 3), moved(R * S * V * 3);
  const std::vector<double> shifts =
      synthetic::random_values(moved.size(), -reach, reach, seed + 7);
  for (size_t r = 0; r < R; ++r) {
    for (size_t s = 0; s < S; ++s) {
      for (int k = 0; k < 3; ++k) {
        const double p =
            origins.data[r * 3 + k] + depths.data[r * S + s] * directions.data[r * 3 + k];
        points[(r * S + s) * 3 + k] = p;
        for (size_t v = 0; v < V; ++v) {
          const size_t i = ((r * S + s) * V + v) * 3 + k;
          moved[i] = p + shifts[i];
        }
      }
    }
  }
  c.op = "gather_moved";
  c.inputs.erase("origins");
  c.inputs.erase("directions");
  c.inputs.erase("depths");
  c.inputs["points"] = array(points, {R, S, 3});
  c.inputs["moved_points"] = array(moved, {R, S, V, 3});
  c.inputs["grad_rgb_features"] = random_array({R, S, V, 3 + C}, -1, 1, seed + 5);
  c.run = [](const Arrays& in, bool single) {
    return single ? run_gather_moved<float>(in) : run_gather_moved<double>(in);
  };
  return c;
}

template <typename T>
Arrays run_flows(const Arrays& in) {
  const NpyArray& points = in.at("points");
  const size_t K = points.shape[0], R = points.shape[1], S = points.shape[2];
  const std::vector<PinholeCamera<T>> cameras = cameras_from<T>(in.at("cameras"));
  const auto weights = as<T>(in.at("weights")), point_values = as<T>(points),
             pixels = as<T>(in.at("pixels")), grad_flows = as<T>(in.at("grad_flows"));
  std::vector<T> flows(K * R * 2), grad_weights(R * S, T(0)), grad_points(point_values.size());
  cpu::render_flows(int(R), int(S), int(K), weights.data(), point_values.data(), cameras.data(),
                    pixels.data(), flows.data());
  cpu::render_flows_backward(int(R), int(S), int(K), weights.data(), point_values.data(),
                             cameras.data(), grad_flows.data(), grad_weights.data(),
                             grad_points.data());
  return {{"flows", array(flows, {K, R, 2})},
          {"grad_weights", array(grad_weights, {R, S})},
          {"grad_points", array(grad_points, points.shape)}};
}

// Rays of a random scene with rendering weights, their samples moved a little for each of its
// source views (as many as DynIBaR's six offsets when there are six).
ReferenceCase flows_case(int n_views, int n_rays, int n_samples, uint64_t seed) {
  synthetic::RandomSceneSize size;
  size.n_views = n_views;
  size.n_rays = n_rays;
  const auto scene = synthetic::make_random_scene(size, seed);
  const size_t K = size_t(n_views), R = size_t(n_rays), S = size_t(n_samples);
  std::vector<double> origins(R * 3), directions(R * 3), depths(R * S);
  cpu::generate_rays(scene.target, scene.pixels.data(), n_rays, origins.data(), directions.data());
  cpu::sample_coarse_depths(n_rays, {scene.near_depth, scene.far_depth, n_samples, false, false},
                            {seed, 1}, 0, depths.data());
  const std::vector<double> shifts = synthetic::random_values(K * R * S * 3, -0.05, 0.05, seed + 1);
  std::vector<double> points(K * R * S * 3);
  for (size_t k = 0; k < K; ++k) {
    for (size_t r = 0; r < R; ++r) {
      for (size_t s = 0; s < S; ++s) {
        for (size_t a = 0; a < 3; ++a) {
          const size_t i = ((k * R + r) * S + s) * 3 + a;
          points[i] = origins[r * 3 + a] + depths[r * S + s] * directions[r * 3 + a] + shifts[i];
        }
      }
    }
  }
  NpyArray cameras{{K, 16}, {}};
  for (const auto& c : scene.sources) {
    const auto one = camera_array(c);
    cameras.data.insert(cameras.data.end(), one.data.begin(), one.data.end());
  }
  // Weights of a ray sum to at most 1, as rendering weights do.
  NpyArray weights = random_array({R, S}, 0, 2.0 / double(S), seed + 2);
  return {"flows",
          {},
          {{"weights", weights},
           {"points", array(points, {K, R, S, 3})},
           {"cameras", cameras},
           {"pixels", array(scene.pixels, {R, 2})},
           {"grad_flows", random_array({K, R, 2}, -1, 1, seed + 3)}},
          [](const Arrays& in, bool single) {
            return single ? run_flows<float>(in) : run_flows<double>(in);
          }};
}

template <typename T>
Arrays run_composite(const Arrays& in, const nlohmann::json& p) {
  const size_t R = in.at("sigma").shape[0], S = in.at("sigma").shape[1];
  const CompositeOptions options{p["delta"] == "interval" ? DeltaMode::kInterval : DeltaMode::kUnit,
                                 p["white_bkgd"]};
  const auto sigma = as<T>(in.at("sigma")), rgb = as<T>(in.at("rgb")),
             depths = as<T>(in.at("depths")), directions = as<T>(in.at("directions"));
  std::vector<T> rgb_map(R * 3), depth_map(R), acc_map(R), weights(R * S);
  cpu::composite_rays(int(R), int(S), sigma.data(), rgb.data(), depths.data(), directions.data(),
                      options, rgb_map.data(), depth_map.data(), acc_map.data(), weights.data());
  std::vector<T> grad_sigma(R * S), grad_rgb(R * S * 3);
  cpu::composite_rays_backward(
      int(R), int(S), sigma.data(), rgb.data(), depths.data(), directions.data(), options,
      as<T>(in.at("grad_rgb_map")).data(), as<T>(in.at("grad_depth_map")).data(),
      as<T>(in.at("grad_acc_map")).data(), as<T>(in.at("grad_weights")).data(), grad_sigma.data(),
      grad_rgb.data());
  return {{"rgb_map", array(rgb_map, {R, 3})},       {"depth_map", array(depth_map, {R})},
          {"acc_map", array(acc_map, {R})},          {"weights", array(weights, {R, S})},
          {"grad_sigma", array(grad_sigma, {R, S})}, {"grad_rgb", array(grad_rgb, {R, S, 3})}};
}

ReferenceCase composite_case(size_t R, size_t S, const std::string& delta, bool white,
                             uint64_t seed) {
  NpyArray sigma = random_array({R, S}, -1.0, 3.0, seed);
  for (size_t i = 0; i < sigma.data.size(); ++i) {
    if (sigma.data[i] < 0) sigma.data[i] = 0;  // empty space (IBRNet's sigma is a ReLU)
    if (i % 13 == 5) sigma.data[i] = 1e3;      // and the odd opaque sample
  }
  std::vector<double> z(R * S);
  cpu::sample_coarse_depths(int(R), {2.0, 6.0, int(S), false, false}, {seed, 2}, 0, z.data());
  const nlohmann::json p = {{"delta", delta}, {"white_bkgd", white}};
  return {"composite",
          p,
          {{"sigma", sigma},
           {"rgb", random_array({R, S, 3}, 0, 1, seed + 1)},
           {"depths", array(z, {R, S})},
           {"directions", random_array({R, 3}, -1, 1, seed + 2)},
           {"grad_rgb_map", random_array({R, 3}, -1, 1, seed + 3)},
           {"grad_depth_map", random_array({R}, -1, 1, seed + 4)},
           {"grad_acc_map", random_array({R}, -1, 1, seed + 5)},
           {"grad_weights", random_array({R, S}, -1, 1, seed + 6)}},
          [p](const Arrays& in, bool single) {
            return single ? run_composite<float>(in, p) : run_composite<double>(in, p);
          }};
}

template <typename T>
Arrays run_dynamic_composite(const Arrays& in, const std::string& mode_name) {
  const size_t R = in.at("sigma_static").shape[0], S = in.at("sigma_static").shape[1];
  const DynamicComposite mode = mode_name == "both"     ? DynamicComposite::kBoth
                                : mode_name == "static" ? DynamicComposite::kStaticOnly
                                                        : DynamicComposite::kDynamicOnly;
  const auto sigma_static = as<T>(in.at("sigma_static")), rgb_static = as<T>(in.at("rgb_static")),
             sigma_dynamic = as<T>(in.at("sigma_dynamic")),
             rgb_dynamic = as<T>(in.at("rgb_dynamic")), depths = as<T>(in.at("depths"));
  const DynamicSamples<const T> samples{sigma_static.data(), rgb_static.data(),
                                        sigma_dynamic.data(), rgb_dynamic.data()};
  std::vector<T> rgb_map(R * 3), depth_map(R), weights(R * S), weights_static(R * S),
      weights_dynamic(R * S);
  cpu::composite_dynamic_rays(int(R), int(S), mode, samples, depths.data(),
                              DynamicRenders<T>{rgb_map.data(), depth_map.data(), weights.data(),
                                                weights_static.data(), weights_dynamic.data()});
  const auto grad_rgb_map = as<T>(in.at("grad_rgb_map")),
             grad_depth_map = as<T>(in.at("grad_depth_map")),
             grad_weights = as<T>(in.at("grad_weights")),
             grad_weights_static = as<T>(in.at("grad_weights_static")),
             grad_weights_dynamic = as<T>(in.at("grad_weights_dynamic"));
  std::vector<T> grad_sigma_static(R * S), grad_rgb_static(R * S * 3), grad_sigma_dynamic(R * S),
      grad_rgb_dynamic(R * S * 3);
  cpu::composite_dynamic_rays_backward(
      int(R), int(S), mode, samples, depths.data(),
      DynamicRenders<const T>{grad_rgb_map.data(), grad_depth_map.data(), grad_weights.data(),
                              grad_weights_static.data(), grad_weights_dynamic.data()},
      DynamicSamples<T>{grad_sigma_static.data(), grad_rgb_static.data(), grad_sigma_dynamic.data(),
                        grad_rgb_dynamic.data()});
  return {{"rgb_map", array(rgb_map, {R, 3})},
          {"depth_map", array(depth_map, {R})},
          {"weights", array(weights, {R, S})},
          {"weights_static", array(weights_static, {R, S})},
          {"weights_dynamic", array(weights_dynamic, {R, S})},
          {"grad_sigma_static", array(grad_sigma_static, {R, S})},
          {"grad_rgb_static", array(grad_rgb_static, {R, S, 3})},
          {"grad_sigma_dynamic", array(grad_sigma_dynamic, {R, S})},
          {"grad_rgb_dynamic", array(grad_rgb_dynamic, {R, S, 3})}};
}

// Raw densities before DynIBaR's softplus: mostly moderate, some past its threshold of 20 (the
// identity branch) and some far below zero (empty space).
NpyArray raw_densities(size_t R, size_t S, uint64_t seed) {
  NpyArray sigma = random_array({R, S}, -4.0, 4.0, seed);
  for (size_t i = 0; i < sigma.data.size(); ++i) {
    if (i % 17 == 3) sigma.data[i] = 25;
    if (i % 11 == 7) sigma.data[i] = -40;
  }
  return sigma;
}

ReferenceCase dynamic_composite_case(size_t R, size_t S, const std::string& mode, uint64_t seed) {
  std::vector<double> z(R * S);
  cpu::sample_coarse_depths(int(R), {2.0, 6.0, int(S), false, false}, {seed, 2}, 0, z.data());
  return {"dynamic_composite",
          {{"mode", mode}},
          {{"sigma_static", raw_densities(R, S, seed)},
           {"rgb_static", random_array({R, S, 3}, 0, 1, seed + 1)},
           {"sigma_dynamic", raw_densities(R, S, seed + 2)},
           {"rgb_dynamic", random_array({R, S, 3}, 0, 1, seed + 3)},
           {"depths", array(z, {R, S})},
           {"grad_rgb_map", random_array({R, 3}, -1, 1, seed + 4)},
           {"grad_depth_map", random_array({R}, -1, 1, seed + 5)},
           {"grad_weights", random_array({R, S}, -1, 1, seed + 6)},
           {"grad_weights_static", random_array({R, S}, -1, 1, seed + 7)},
           {"grad_weights_dynamic", random_array({R, S}, -1, 1, seed + 8)}},
          [mode](const Arrays& in, bool single) {
            return single ? run_dynamic_composite<float>(in, mode)
                          : run_dynamic_composite<double>(in, mode);
          }};
}

template <typename T>
Arrays run_ray_mask(const Arrays& in, const nlohmann::json& p) {
  const auto& shape = in.at("sample_mask").shape;
  std::vector<T> out(shape[0]);
  cpu::ray_mask(int(shape[0]), int(shape[1]), int(shape[2]), as<T>(in.at("sample_mask")).data(),
                RayMaskRule{p["min_views"], p["min_samples"]}, out.data());
  return {{"ray_mask", array(out, {shape[0]})}};
}

ReferenceCase ray_mask_case(size_t R, size_t S, size_t V, uint64_t seed) {
  NpyArray mask = random_array({R, S, V}, 0, 1, seed);
  for (double& m : mask.data) m = m < 0.6 ? 1 : 0;
  const nlohmann::json p = {{"min_views", 2}, {"min_samples", 9}};
  return {"ray_mask", p, {{"sample_mask", mask}}, [p](const Arrays& in, bool single) {
            return single ? run_ray_mask<float>(in, p) : run_ray_mask<double>(in, p);
          }};
}

template <typename T>
Arrays run_masked_mse(const Arrays& in, const nlohmann::json& p) {
  const size_t R = in.at("predicted").shape[0];
  const auto predicted = as<T>(in.at("predicted")), target = as<T>(in.at("target")),
             mask = as<T>(in.at("ray_mask"));
  std::vector<T> loss(2), grad(R * 3);
  cpu::masked_mse(int(R), predicted.data(), target.data(), mask.data(), loss.data());
  cpu::masked_mse_backward(int(R), predicted.data(), target.data(), mask.data(), loss.data(),
                           T(double(p["grad_loss"])), grad.data());
  return {{"loss", array(std::vector<T>{loss[0]}, {1})}, {"grad_predicted", array(grad, {R, 3})}};
}

ReferenceCase masked_mse_case(size_t R, double keep, uint64_t seed) {
  NpyArray mask = random_array({R}, 0, 1, seed);
  for (double& m : mask.data) m = m < keep ? 1 : 0;
  const nlohmann::json p = {{"grad_loss", 0.75}};
  return {"masked_mse",
          p,
          {{"predicted", random_array({R, 3}, 0, 1, seed + 1)},
           {"target", random_array({R, 3}, 0, 1, seed + 2)},
           {"ray_mask", mask}},
          [p](const Arrays& in, bool single) {
            return single ? run_masked_mse<float>(in, p) : run_masked_mse<double>(in, p);
          }};
}

// --- the suite ----------------------------------------------------------------------------

std::map<std::string, ReferenceCase> all_cases() {
  std::map<std::string, ReferenceCase> cases;
  cases["rays_small"] = rays_case(7, 1);
  cases["rays_large"] = rays_case(300, 2);
  for (bool inv : {false, true}) {
    for (bool det : {false, true}) {
      const std::string mode = std::string(inv ? "inv" : "lin") + (det ? "_det" : "_jitter");
      cases["coarse_" + mode + "_1"] = coarse_case(5, 1, inv, det, 3);
      cases["coarse_" + mode + "_8"] = coarse_case(6, 8, inv, det, 4);
      cases["coarse_" + mode + "_64"] = coarse_case(200, 64, inv, det, 5);
      cases["importance_" + mode + "_small"] = importance_case(9, 3, 4, inv, det, 6);
      cases["importance_" + mode + "_large"] = importance_case(120, 32, 64, inv, det, 7);
    }
  }
  cases["gather_small"] = gather_case(scene_size(2, 9, 7, 4, 3, 3, 5), 4, 8);
  cases["flows_one_sample"] = flows_case(2, 3, 1, 40);
  cases["flows_six_offsets"] = flows_case(6, 30, 64, 41);
  cases["moved_gather_small"] = gather_moved_case(scene_size(2, 9, 7, 4, 3, 3, 5), 4, 0.05, 18);
  cases["moved_gather_medium"] = gather_moved_case(
      scene_size(5, 40, 30, 10, 8, 16, 64, /*last_view_faces_away=*/true), 16, 0.1, 19);
  cases["gather_medium"] =
      gather_case(scene_size(5, 40, 30, 10, 8, 16, 64, /*last_view_faces_away=*/true), 16, 9);
  for (const std::string delta : {"unit", "interval"}) {
    for (bool white : {false, true}) {
      const std::string mode = delta + (white ? "_white" : "_black");
      cases["composite_" + mode + "_1"] = composite_case(3, 1, delta, white, 10);
      cases["composite_" + mode + "_48"] = composite_case(50, 48, delta, white, 11);
    }
  }
  for (const std::string mode : {"both", "static", "dynamic"}) {
    cases["dynamic_composite_" + mode + "_1"] = dynamic_composite_case(3, 1, mode, 15);
    cases["dynamic_composite_" + mode + "_64"] = dynamic_composite_case(40, 64, mode, 16);
  }
  cases["ray_mask"] = ray_mask_case(40, 12, 4, 12);
  cases["masked_mse"] = masked_mse_case(100, 0.7, 13);
  cases["masked_mse_all_invalid"] = masked_mse_case(10, 0.0, 14);
  return cases;
}

class Reference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mvibr-reference-" + std::to_string(::getpid()));
    fs::create_directories(root_);
    cases_ = all_cases();
    for (const auto& [name, c] : cases_) {
      const fs::path dir = root_ / name;
      fs::create_directories(dir);
      nlohmann::json spec = c.params.is_null() ? nlohmann::json::object() : c.params;
      spec["op"] = c.op;
      std::ofstream(dir / "case.json") << spec.dump();
      for (const auto& [input, value] : c.inputs) test::write_npy(dir / (input + ".npy"), value);
    }
    const char* source = std::getenv("MVIBR_SOURCE_DIR");
    const std::string script = std::string(source ? source : MVIBR_TEST_SOURCE_DIR) +
                               "/test/reference/render_ops_reference.py";
    const std::string command = "/usr/bin/python3 " + script + " " + root_.string();
    reference_status_ = std::system(command.c_str());
  }
  static void TearDownTestSuite() {
    if (!::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(root_);
  }

  // Compares our float and double outputs of one case with the reference.
  static void check(const std::string& name) {
    ASSERT_EQ(reference_status_, 0) << "the PyTorch reference failed (needs /usr/bin/python3 "
                                       "with torch: scripts/setup.sh installs it)";
    const ReferenceCase& c = cases_.at(name);
    const fs::path dir = root_ / name;
    double worst[2] = {0, 0};
    for (bool single : {false, true}) {
      const Arrays ours = c.run(c.inputs, single);
      for (const auto& [output, value] : ours) {
        const NpyArray reference = test::read_npy(dir / ("ref_" + output + ".npy"));
        ASSERT_EQ(value.data.size(), reference.data.size()) << output;
        double difference = 0, scale = 0;
        for (size_t i = 0; i < value.data.size(); ++i) {
          difference = std::max(difference, std::abs(value.data[i] - reference.data[i]));
          scale = std::max(scale, std::abs(reference.data[i]));
        }
        bool any_nan = false;
        for (size_t i = 0; i < value.data.size(); ++i) {
          any_nan = any_nan || std::isnan(value.data[i]) || std::isnan(reference.data[i]);
        }
        const double error = any_nan ? INFINITY : (scale > 0 ? difference / scale : difference);
        const bool gradient = output.rfind("grad_", 0) == 0;
        const double bound = single ? (gradient ? 1e-4 : 1e-5) : 1e-10;
        EXPECT_LE(error, bound) << name << " " << output << (single ? " (float)" : " (double)");
        worst[single] = std::max(worst[single], error / bound);
        if (std::getenv("MVIBR_VERBOSE"))
          std::printf("    %s %s %.2e\n", output.c_str(), single ? "f" : "d", error);
      }
    }
    // The margin to the bound, for the record: error / bound, 1 = at the bound.
    std::printf("  %-34s double %.1e  float %.1e of bound\n", name.c_str(), worst[0], worst[1]);
  }

  static inline fs::path root_;
  static inline std::map<std::string, ReferenceCase> cases_;
  static inline int reference_status_ = -1;

  // Every case whose name starts with `prefix`.
  static void check_all(const std::string& prefix) {
    int checked = 0;
    for (const auto& entry : cases_) {
      if (entry.first.rfind(prefix, 0) != 0) continue;
      SCOPED_TRACE(entry.first);
      check(entry.first);
      ++checked;
    }
    EXPECT_GT(checked, 0) << "no case named " << prefix << "*";
  }
};

TEST_F(Reference, RaysMatchPyTorch) {
  check_all("rays_");
}
TEST_F(Reference, CoarseDepthsMatchPyTorch) {
  check_all("coarse_");
}
TEST_F(Reference, ImportanceDepthsMatchPyTorch) {
  check_all("importance_");
}
TEST_F(Reference, GatherAndItsBackwardMatchPyTorch) {
  check_all("gather_");
}
TEST_F(Reference, MovedGatherAndItsBackwardMatchPyTorch) {
  check_all("moved_gather_");
}
TEST_F(Reference, CompositeAndItsBackwardMatchPyTorch) {
  check_all("composite_");
}
TEST_F(Reference, DynibarCompositeAndItsBackwardMatchPyTorch) {
  check_all("dynamic_composite_");
}
TEST_F(Reference, RenderedFlowsAndTheirBackwardMatchPyTorch) {
  check_all("flows_");
}
TEST_F(Reference, RayMaskMatchesPyTorch) {
  check_all("ray_mask");
}
TEST_F(Reference, MaskedMseAndItsBackwardMatchPyTorch) {
  check_all("masked_mse");
}

}  // namespace
}  // namespace mvibr
