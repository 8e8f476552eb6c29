// The synthetic scene, ray traced analytically: the content at one time step is a small struct
// of primitives (a ground disc, three spheres, an axis-aligned box) built from the seed and the
// time, trace() finds the nearest hit, radiance() applies a procedural texture, a directional
// light with a hard shadow, a Blinn-Phong highlight and a one-bounce Fresnel mirror term (the
// view dependence). Rows are rendered in parallel and every pixel is a pure function of its own
// rays, so the bytes never depend on the thread count. Near/far come from the exact camera-z
// extent of every primitive, so they hold every hit.
#include "mvibr/data/synthetic_scene.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>

#include "mvibr/core/error.h"
#include "procedural.h"

namespace mvibr::data {
namespace {

using V3 = Vec3<double>;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Where every camera looks: the middle of the objects, a little above the ground.
constexpr V3 kSceneCentre{0, 0, 0.35};
constexpr V3 kWorldUp{0, 0, 1};
constexpr double kGroundRadius = 2.0;
// The ring of the moving sphere lies outside the static objects, so it passes in front of and
// behind them instead of through them.
constexpr double kMovingSpherePathRadius = 1.35;
// How far the box moves from t = 0 to t = 1: it rises and slides, so that no face moves within
// its own plane (every pixel that sees the box sees its depth change).
constexpr V3 kBoxTravel{0.1, -0.1, 0.45};

constexpr double kAmbient = 0.3, kDiffuse = 0.75;
// Near/far get this fraction of the depth extent on each side, for rounding of float depths.
constexpr double kDepthMargin = 0.005;
// Shadow and mirror rays start this far off the surface so that they do not hit it again.
constexpr double kSurfaceOffset = 1e-6;

V3 normalized(V3 a) {
  return (1.0 / norm(a)) * a;
}
V3 mix(V3 a, V3 b, double s) {
  return a + s * (b - a);
}
double component(V3 a, int axis) {
  return axis == 0 ? a.x : (axis == 1 ? a.y : a.z);
}
int parity(double a, double b) {
  return int(std::floor(a) + std::floor(b)) & 1;
}

// The light is directional and fixed: the direction towards it.
const V3 kToLight = normalized(V3{0.45, -0.35, 0.82});

enum class Pattern { kGroundChecker, kBands, kGradient, kSphereChecker, kBricks };

struct Material {
  Pattern pattern;
  V3 colour_a, colour_b;
  double phase;     // texture offset drawn from the seed
  double specular;  // Blinn-Phong weight
  double shininess;
  double reflectivity;  // Fresnel reflectance at normal incidence (Schlick); 0: no mirror term
};

struct Sphere {
  V3 centre;
  double radius;
  Material material;
};

struct Box {
  V3 lo, hi;
  Material material;
};

// Everything at one time step. The ground is a disc of kGroundRadius at z = 0 (finite, so
// that every hit has a bounded depth).
struct Content {
  Material ground;
  Sphere spheres[3];  // a large banded one, one with a gradient that moves, a small checkered one
  Box box;            // rises and slides with time
  double specular_strength;
};

Content make_content(const SyntheticSceneOptions& options, double t) {
  SeedStream seed(options.seed);
  const auto jitter = [&](double amount) { return seed.uniform(-amount, amount); };
  const auto two_colours = [&](double saturation) {
    const double h = seed.uniform(0, 1);
    return std::pair<V3, V3>{hue_colour(h, saturation, 0.9),
                             hue_colour(h + seed.uniform(0.3, 0.7), saturation * 0.8, 0.95)};
  };
  Content c;
  c.specular_strength = options.specular_strength;
  {
    const auto [a, b] = two_colours(0.35);
    c.ground = {Pattern::kGroundChecker, a, 0.35 * b, seed.uniform(0, 2 * kPi), 0.15, 8, 0.04};
  }
  {
    const auto [a, b] = two_colours(0.8);
    c.spheres[0] = {{-0.45 + jitter(0.06), 0.25 + jitter(0.06), 0.5},
                    0.5,
                    {Pattern::kBands, a, b, seed.uniform(0, 1), 0.9, 60, 0.1}};
  }
  {
    const auto [a, b] = two_colours(0.7);
    const double angle = seed.uniform(0, 2 * kPi) + kPi * t;
    const double radius = 0.28;
    c.spheres[1] = {{kMovingSpherePathRadius * std::cos(angle),
                     kMovingSpherePathRadius * std::sin(angle), radius},
                    radius,
                    {Pattern::kGradient, a, b, seed.uniform(0, 2 * kPi), 0.7, 30, 0.06}};
  }
  {
    const auto [a, b] = two_colours(0.6);
    c.spheres[2] = {{0.1 + jitter(0.05), -0.55 + jitter(0.05), 0.22},
                    0.22,
                    {Pattern::kSphereChecker, a, b, seed.uniform(0, 1), 0.4, 20, 0}};
  }
  {
    const auto [a, b] = two_colours(0.6);
    const V3 half{0.28, 0.24, 0.35};
    const V3 centre = V3{0.45 + jitter(0.05), 0.35 + jitter(0.05), half.z} + t * kBoxTravel;
    c.box = {
        centre - half, centre + half, {Pattern::kBricks, a, b, seed.uniform(0, 1), 0.25, 16, 0.03}};
  }
  return c;
}

// What a ray can hit: the objects' identities, which a point keeps from one time step to the next.
enum Object { kGround, kBandedSphere, kMovingSphere, kCheckeredSphere, kBox, kNothing };

bool moves(int object) {
  return object == kMovingSphere || object == kBox;
}

// Where a point of `object` at one time step is at another: the objects only translate.
V3 object_travel(const Content& from, const Content& to, int object) {
  if (object == kMovingSphere) return to.spheres[1].centre - from.spheres[1].centre;
  if (object == kBox) return to.box.lo - from.box.lo;
  return {0, 0, 0};
}

struct Hit {
  double depth = kInfinity;  // ray parameter; camera-z depth for camera rays
  V3 normal{0, 0, 0};
  V3 local{0, 0, 0};  // texture coordinates: the point in the object's own frame
  const Material* material = nullptr;
  int object = kNothing;
};

void intersect_ground(const Material& ground, V3 origin, V3 direction, Hit* hit) {
  if (direction.z == 0) return;
  const double t = -origin.z / direction.z;
  if (!(t > 0) || t >= hit->depth) return;
  const V3 p = origin + t * direction;
  if (p.x * p.x + p.y * p.y > kGroundRadius * kGroundRadius) return;
  *hit = {t, {0, 0, 1}, p, &ground, kGround};
}

void intersect_sphere(const Sphere& s, int object, V3 origin, V3 direction, Hit* hit) {
  const V3 oc = origin - s.centre;
  const double a = dot(direction, direction), b = dot(oc, direction);
  const double discriminant = b * b - a * (dot(oc, oc) - s.radius * s.radius);
  if (discriminant < 0) return;
  const double root = std::sqrt(discriminant);
  double t = (-b - root) / a;
  if (!(t > 0)) t = (-b + root) / a;
  if (!(t > 0) || t >= hit->depth) return;
  const V3 normal = (1.0 / s.radius) * (origin + t * direction - s.centre);
  *hit = {t, normal, normal, &s.material, object};
}

// Slabs; the normal is that of the face the ray enters through.
void intersect_box(const Box& box, V3 origin, V3 direction, Hit* hit) {
  double t_enter = -kInfinity, t_exit = kInfinity;
  int enter_axis = 0;
  for (int axis = 0; axis < 3; ++axis) {
    const double o = component(origin, axis), d = component(direction, axis);
    const double lo = component(box.lo, axis), hi = component(box.hi, axis);
    if (d == 0) {
      if (o < lo || o > hi) return;
      continue;
    }
    double t0 = (lo - o) / d, t1 = (hi - o) / d;
    if (t0 > t1) std::swap(t0, t1);
    if (t0 > t_enter) {
      t_enter = t0;
      enter_axis = axis;
    }
    t_exit = std::min(t_exit, t1);
  }
  if (t_enter > t_exit || !(t_enter > 0) || t_enter >= hit->depth) return;
  const double sign = component(direction, enter_axis) > 0 ? -1.0 : 1.0;
  const V3 normal{enter_axis == 0 ? sign : 0, enter_axis == 1 ? sign : 0,
                  enter_axis == 2 ? sign : 0};
  *hit = {t_enter, normal, origin + t_enter * direction - box.lo, &box.material, kBox};
}

Hit trace(const Content& c, V3 origin, V3 direction) {
  Hit hit;
  intersect_ground(c.ground, origin, direction, &hit);
  for (int i = 0; i < 3; ++i)
    intersect_sphere(c.spheres[i], kBandedSphere + i, origin, direction, &hit);
  intersect_box(c.box, origin, direction, &hit);
  return hit;
}

// Mixes hard edges (checkers, bands, bricks) with smooth gradients: both kinds of signal a
// renderer has to reproduce.
V3 albedo(const Material& m, V3 local) {
  switch (m.pattern) {
    case Pattern::kGroundChecker: {
      const double cell = 0.25;
      const V3 base = parity(local.x / cell, local.y / cell) ? m.colour_a : m.colour_b;
      const double r = std::sqrt(local.x * local.x + local.y * local.y);
      return (0.8 + 0.2 * std::cos(2.5 * r + m.phase)) * base;
    }
    case Pattern::kBands: {
      const double along = dot(local, normalized(V3{0.3, 0.2, 1.0}));
      return fraction(3.0 * along + m.phase) < 0.5 ? m.colour_a : m.colour_b;
    }
    case Pattern::kGradient: {
      const double azimuth = std::atan2(local.y, local.x);
      return (0.85 + 0.15 * std::sin(5 * azimuth + m.phase)) *
             mix(m.colour_a, m.colour_b, 0.5 + 0.5 * local.z);
    }
    case Pattern::kSphereChecker: {
      const double azimuth = std::atan2(local.y, local.x) / (2 * kPi);
      const double polar = std::acos(std::clamp(local.z, -1.0, 1.0)) / kPi;
      return parity(8 * azimuth + m.phase, 4 * polar) ? m.colour_a : m.colour_b;
    }
    case Pattern::kBricks: {
      const double course = 0.14;
      const double row = std::floor(local.z / course + m.phase);
      // Every other course is offset by half a brick, like a wall.
      const double along = (local.x + local.y) / (2 * course) + 0.5 * row;
      return parity(row, along) ? m.colour_a : 0.6 * m.colour_b;
    }
  }
  return m.colour_a;
}

V3 background(V3 direction) {
  const double up = normalized(direction).z;
  const V3 horizon{0.75, 0.78, 0.85}, zenith{0.25, 0.4, 0.75}, nadir{0.3, 0.28, 0.26};
  return up >= 0 ? mix(horizon, zenith, up) : mix(horizon, nadir, -up);
}

// Linear radiance along one ray; mirror rays bounce once (reflect = false on the bounce).
V3 radiance(const Content& c, V3 origin, V3 direction, bool shadows, bool reflect) {
  const Hit hit = trace(c, origin, direction);
  if (!hit.material) return background(direction);
  const Material& m = *hit.material;
  // Faces seen from behind (a camera under the ground) are lit as seen from the front.
  const V3 normal = dot(hit.normal, direction) > 0 ? -1.0 * hit.normal : hit.normal;
  const V3 point = origin + hit.depth * direction;
  double light = std::max(0.0, dot(normal, kToLight));
  if (light > 0 && shadows &&
      trace(c, point + kSurfaceOffset * normal, kToLight).depth < kInfinity) {
    light = 0;
  }
  V3 colour = (kAmbient + kDiffuse * light) * albedo(m, hit.local);
  if (light > 0) {
    const V3 half_vector = normalized(kToLight - normalized(direction));
    const double highlight = std::pow(std::max(0.0, dot(normal, half_vector)), m.shininess);
    colour = colour + (c.specular_strength * m.specular * highlight) * V3{1, 1, 1};
  }
  if (reflect && m.reflectivity > 0 && c.specular_strength > 0) {
    const V3 d = normalized(direction);
    const double cos_incidence = std::max(0.0, -dot(d, normal));
    const double fresnel = c.specular_strength *
                           (m.reflectivity + (1 - m.reflectivity) * std::pow(1 - cos_incidence, 5));
    const V3 mirrored = d - (2 * dot(d, normal)) * normal;
    colour = mix(colour, radiance(c, point + kSurfaceOffset * normal, mirrored, shadows, false),
                 std::min(fresnel, 1.0));
  }
  return colour;
}

uint8_t to_byte(double linear) {
  const double display = std::pow(std::clamp(linear, 0.0, 1.0), 1.0 / 2.2);
  return uint8_t(std::lround(255.0 * display));
}

void render_row(const Content& c, const SyntheticSceneOptions& options,
                const PinholeCamera<double>& camera, int row, uint8_t* row_rgb) {
  const int n = options.samples_per_side;
  for (int u = 0; u < camera.width; ++u) {
    V3 sum{0, 0, 0};
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) {
        V3 origin, direction;
        pixel_to_ray(camera, u + (i + 0.5) / n - 0.5, row + (j + 0.5) / n - 0.5, &origin,
                     &direction);
        sum = sum + radiance(c, origin, direction, options.shadows, true);
      }
    }
    const V3 mean = (1.0 / (n * n)) * sum;
    row_rgb[3 * u] = to_byte(mean.x);
    row_rgb[3 * u + 1] = to_byte(mean.y);
    row_rgb[3 * u + 2] = to_byte(mean.z);
  }
}

double time_of_step(const SyntheticSceneOptions& options, int time_index) {
  return options.n_time_steps > 1 ? double(time_index) / (options.n_time_steps - 1) : 0.0;
}

void check_render_arguments(const SyntheticSceneOptions& options,
                            const PinholeCamera<double>& camera, int time_index) {
  validate_synthetic_scene_options(options);
  if (camera.width < 1 || camera.height < 1) {
    throw InvalidArgument("synthetic scene: camera size " + std::to_string(camera.width) + "x" +
                          std::to_string(camera.height) + " has no pixels");
  }
  if (time_index < 0 || time_index >= options.n_time_steps) {
    throw InvalidArgument("synthetic scene: time_index " + std::to_string(time_index) +
                          " is outside [0, n_time_steps = " + std::to_string(options.n_time_steps) +
                          ")");
  }
}

// The camera-z extent of every primitive, exact (not clipped to the frustum): spheres are
// centre +- radius, the disc centre +- radius times the sine of its tilt, the box its support.
void content_depth_range(const Content& c, const PinholeCamera<double>& camera, double* lo,
                         double* hi) {
  const V3 axis{camera.c2w[2], camera.c2w[6], camera.c2w[10]};
  const V3 eye = camera.center();
  *lo = kInfinity;
  *hi = -kInfinity;
  const auto include = [&](V3 centre, double half_extent) {
    const double z = dot(axis, centre - eye);
    *lo = std::min(*lo, z - half_extent);
    *hi = std::max(*hi, z + half_extent);
  };
  include({0, 0, 0}, kGroundRadius * std::sqrt(std::max(0.0, 1.0 - axis.z * axis.z)));
  for (const Sphere& s : c.spheres) include(s.centre, s.radius);
  const V3 box_half = 0.5 * (c.box.hi - c.box.lo);
  include(c.box.lo + box_half, std::abs(axis.x) * box_half.x + std::abs(axis.y) * box_half.y +
                                   std::abs(axis.z) * box_half.z);
}

std::vector<PinholeCamera<double>> rig_cameras(const SyntheticSceneOptions& o) {
  const double degrees = kPi / 180;
  const double focal = 0.5 * o.width / std::tan(0.5 * o.fov_x_degrees * degrees);
  std::vector<PinholeCamera<double>> cameras;
  if (o.rig == "orbit") {
    const double middle = 0.5 * (o.orbit_min_elevation_degrees + o.orbit_max_elevation_degrees);
    const double swing = 0.5 * (o.orbit_max_elevation_degrees - o.orbit_min_elevation_degrees);
    for (int i = 0; i < o.n_views; ++i) {
      const double azimuth = 2 * kPi * i / o.n_views;
      // Two waves per ring: neighbours stay close, yet the ring sees the tops and the sides.
      const double elevation = (middle - swing * std::cos(2 * azimuth)) * degrees;
      const V3 eye = kSceneCentre + o.orbit_radius * V3{std::cos(elevation) * std::cos(azimuth),
                                                        std::cos(elevation) * std::sin(azimuth),
                                                        std::sin(elevation)};
      cameras.push_back(look_at_camera(eye, kSceneCentre, kWorldUp, focal, o.width, o.height));
    }
    return cameras;
  }
  // forward: one rotation, the grid in the image plane, like a hand-held LLFF capture.
  // monocular: the same rotation, one camera per time step sweeping across the grid's width and
  // bobbing up and down once, like a hand-held video.
  const double elevation = o.forward_elevation_degrees * degrees;
  const V3 grid_centre =
      kSceneCentre + o.forward_distance * V3{0, -std::cos(elevation), std::sin(elevation)};
  const PinholeCamera<double> middle =
      look_at_camera(grid_centre, kSceneCentre, kWorldUp, focal, o.width, o.height);
  const V3 right{middle.c2w[0], middle.c2w[4], middle.c2w[8]};
  const V3 down{middle.c2w[1], middle.c2w[5], middle.c2w[9]};
  const bool monocular = o.rig == "monocular";
  const int n_cameras = monocular ? o.n_time_steps : o.n_views;
  const int columns = int(std::ceil(std::sqrt(double(n_cameras))));
  const int rows = (n_cameras + columns - 1) / columns;
  const double step = o.forward_spread / std::max(columns - 1, 1);
  for (int i = 0; i < n_cameras; ++i) {
    const double s = n_cameras > 1 ? double(i) / (n_cameras - 1) : 0.5;
    const V3 offset = monocular ? (o.forward_spread * (s - 0.5)) * right +
                                      (0.25 * o.forward_spread * std::sin(2 * kPi * s)) * down
                                : (step * (i % columns - 0.5 * (columns - 1))) * right +
                                      (step * (i / columns - 0.5 * (rows - 1))) * down;
    PinholeCamera<double> camera = middle;
    camera.c2w[3] += offset.x;
    camera.c2w[7] += offset.y;
    camera.c2w[11] += offset.z;
    set_world_to_camera(&camera);
    cameras.push_back(camera);
  }
  return cameras;
}

// How far DynIBaR's static_masks reach beyond the moving pixels (a square window's half side):
// past the anti-aliased edges, so the pixels left are certainly static.
constexpr int kStaticMaskGrowth = 2;
// A point is seen in another frame when the ray there hits it within this relative depth.
constexpr double kVisibleDepthTolerance = 1e-6;

// A pixel shows moving content: a moving object, or the shadow one casts.
bool shows_motion(const Content& c, const Hit& hit, V3 point) {
  if (moves(hit.object)) return true;
  if (hit.object == kNothing || dot(hit.normal, kToLight) <= 0) return false;
  return moves(trace(c, point + kSurfaceOffset * hit.normal, kToLight).object);
}

// The exact flows, masks and disparity of one frame, through each pixel's centre ray; partners[f]
// is the same video's frame at step + kFlowOffsets[f], or null past the video's ends.
FrameMotion frame_motion(const std::vector<Content>& contents, const View& view,
                         const std::array<const View*, kFlowCount>& partners) {
  const PinholeCamera<double>& camera = view.camera;
  const int width = camera.width, height = camera.height;
  const size_t pixels = size_t(width) * height;
  const Content& here = contents[size_t(view.time_index)];
  FrameMotion m;
  m.disparity.assign(pixels, 0.0f);
  m.motion_mask.assign(pixels, 0);
  m.static_mask.assign(pixels, 0);
  m.flow.assign(kFlowCount * pixels * 2, 0.0f);
  m.flow_valid.assign(kFlowCount * pixels, 0);
#pragma omp parallel for schedule(dynamic, 4)
  for (int row = 0; row < height; ++row) {
    for (int u = 0; u < width; ++u) {
      const size_t p = size_t(row) * width + u;
      V3 origin, direction;
      pixel_to_ray(camera, double(u), double(row), &origin, &direction);
      const Hit hit = trace(here, origin, direction);
      if (hit.object == kNothing) continue;
      const V3 point = origin + hit.depth * direction;
      m.disparity[p] = float(1.0 / hit.depth);
      m.motion_mask[p] = shows_motion(here, hit, point) ? 1 : 0;
      for (int f = 0; f < kFlowCount; ++f) {
        const View* other = partners[size_t(f)];
        if (!other) continue;
        const Content& there = contents[size_t(other->time_index)];
        const PinholeCamera<double>& c = other->camera;
        const V3 moved = point + object_travel(here, there, hit.object);
        const V3 in_camera = transform_point(c.w2c, moved);
        if (!(in_camera.z > 0)) continue;
        const double u2 = c.fx * in_camera.x / in_camera.z + c.cx;
        const double v2 = c.fy * in_camera.y / in_camera.z + c.cy;
        m.flow[(f * pixels + p) * 2] = float(u2 - u);
        m.flow[(f * pixels + p) * 2 + 1] = float(v2 - row);
        if (u2 < -0.5 || u2 >= width - 0.5 || v2 < -0.5 || v2 >= height - 0.5) continue;
        V3 o2, d2;
        pixel_to_ray(c, u2, v2, &o2, &d2);
        const double seen = trace(there, o2, d2).depth;
        m.flow_valid[f * pixels + p] =
            std::abs(seen - in_camera.z) <= kVisibleDepthTolerance * in_camera.z ? 1 : 0;
      }
    }
  }
  for (int row = 0; row < height; ++row) {
    for (int u = 0; u < width; ++u) {
      bool near_motion = false;
      for (int y = std::max(0, row - kStaticMaskGrowth);
           y <= std::min(height - 1, row + kStaticMaskGrowth) && !near_motion; ++y) {
        for (int x = std::max(0, u - kStaticMaskGrowth);
             x <= std::min(width - 1, u + kStaticMaskGrowth); ++x) {
          if (m.motion_mask[size_t(y) * width + x]) near_motion = true;
        }
      }
      m.static_mask[size_t(row) * width + u] = near_motion ? 1 : 0;
    }
  }
  return m;
}

}  // namespace

void validate_synthetic_scene_options(const SyntheticSceneOptions& o) {
  const auto require = [](bool ok, const char* option, const std::string& rule, double value) {
    if (ok) return;
    char got[64];
    std::snprintf(got, sizeof(got), "%g", value);
    throw InvalidArgument(std::string("synthetic scene option ") + option + " must be " + rule +
                          ", got " + got);
  };
  constexpr int kMaxSide = 1 << 14;
  require(o.width >= 2 && o.width <= kMaxSide, "width", "in [2, 16384]", o.width);
  require(o.height >= 2 && o.height <= kMaxSide, "height", "in [2, 16384]", o.height);
  require(o.n_views >= 1, "n_views", "at least 1", o.n_views);
  if (o.rig != "orbit" && o.rig != "forward" && o.rig != "monocular" && o.rig != "cycling") {
    throw InvalidArgument(
        "synthetic scene option rig must be orbit, forward, monocular or cycling, got '" + o.rig +
        "'");
  }
  require(o.n_time_steps >= 1, "n_time_steps", "at least 1", o.n_time_steps);
  require(o.n_test_every >= 0, "n_test_every", "0 (no test views) or positive", o.n_test_every);
  require(o.fov_x_degrees >= 1 && o.fov_x_degrees <= 170, "fov_x_degrees", "in [1, 170]",
          o.fov_x_degrees);
  require(o.orbit_radius > 0 && std::isfinite(o.orbit_radius), "orbit_radius",
          "positive and finite", o.orbit_radius);
  require(std::abs(o.orbit_min_elevation_degrees) <= 85, "orbit_min_elevation_degrees",
          "in [-85, 85]", o.orbit_min_elevation_degrees);
  require(std::abs(o.orbit_max_elevation_degrees) <= 85 &&
              o.orbit_max_elevation_degrees >= o.orbit_min_elevation_degrees,
          "orbit_max_elevation_degrees", "in [orbit_min_elevation_degrees, 85]",
          o.orbit_max_elevation_degrees);
  require(o.forward_distance > 0 && std::isfinite(o.forward_distance), "forward_distance",
          "positive and finite", o.forward_distance);
  require(std::abs(o.forward_elevation_degrees) <= 85, "forward_elevation_degrees", "in [-85, 85]",
          o.forward_elevation_degrees);
  require(o.forward_spread >= 0 && std::isfinite(o.forward_spread), "forward_spread",
          "non-negative and finite", o.forward_spread);
  require(o.samples_per_side >= 1 && o.samples_per_side <= 16, "samples_per_side", "in [1, 16]",
          o.samples_per_side);
  require(o.specular_strength >= 0 && std::isfinite(o.specular_strength), "specular_strength",
          "non-negative and finite", o.specular_strength);
}

Scene make_synthetic_scene(const SyntheticSceneOptions& options) {
  validate_synthetic_scene_options(options);
  const std::vector<PinholeCamera<double>> cameras = rig_cameras(options);
  const bool monocular = options.rig == "monocular", cycling = options.rig == "cycling";
  std::vector<Content> contents;
  for (int k = 0; k < options.n_time_steps; ++k) {
    contents.push_back(make_content(options, time_of_step(options, k)));
  }
  Scene scene;
  scene.name = "synthetic";
  scene.source_format = "synthetic";
  scene.dynamic = options.n_time_steps > 1;
  scene.depth_bounds_from = "the built-in scene's geometry";
  // Each view's rig camera, and the view that is camera c at step k.
  std::vector<int> camera_of;
  std::map<std::pair<int, int>, size_t> view_at;
  const auto add_view = [&](int k, int camera, Split split) {
    View view;
    char name[64];
    std::snprintf(name, sizeof(name), "synthetic/t%03d/v%03d", k, camera);
    view.name = name;
    view.camera = cameras[size_t(camera)];
    double lo, hi;
    content_depth_range(contents[size_t(k)], view.camera, &lo, &hi);
    const double margin = kDepthMargin * (hi - lo);
    view.near_depth = lo - margin;
    view.far_depth = hi + margin;
    if (!(view.near_depth > 0)) {
      throw InvalidArgument(std::string("synthetic scene: camera ") + std::to_string(camera) +
                            " is inside the scene's content; raise " +
                            (options.rig == "orbit" ? "orbit_radius" : "forward_distance"));
    }
    view.time = time_of_step(options, k);
    view.time_index = k;
    view.split = split;
    view.rgb.resize(size_t(options.width) * options.height * 3);
    view_at[{k, camera}] = scene.views.size();
    camera_of.push_back(camera);
    scene.views.push_back(std::move(view));
  };
  const int every = options.n_test_every;
  for (int k = 0; k < options.n_time_steps; ++k) {
    if (monocular) {
      add_view(k, k, every > 0 && k % every == 0 ? Split::kTest : Split::kTrain);
    } else if (cycling) {
      add_view(k, k % options.n_views, Split::kTrain);
      if (every > 0 && k % every == every / 2) {
        for (int c = 0; c < options.n_views; ++c) {
          if (c != k % options.n_views) add_view(k, c, Split::kTest);
        }
      }
    } else {
      for (int i = 0; i < options.n_views; ++i) {
        add_view(k, i, every > 0 && i % every == 0 ? Split::kTest : Split::kTrain);
      }
    }
  }
  // One parallel loop over the rows of every view keeps both cores busy at tiny sizes.
  const int64_t n_rows = int64_t(scene.views.size()) * options.height;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < n_rows; ++r) {
    View& view = scene.views[size_t(r / options.height)];
    const int row = int(r % options.height);
    render_row(contents[size_t(view.time_index)], options, view.camera, row,
               view.rgb.data() + size_t(row) * options.width * 3);
  }
  if (scene.dynamic) {
    // The video a view's flows point into: the rig camera's own frames over time, or (monocular,
    // cycling) the one training frame of each step.
    const auto video_frame = [&](int j, int camera) -> const View* {
      const int c = monocular ? j : cycling ? j % options.n_views : camera;
      const auto it = view_at.find({j, c});
      return it == view_at.end() ? nullptr : &scene.views[it->second];
    };
    for (size_t v = 0; v < scene.views.size(); ++v) {
      const int k = scene.views[v].time_index;
      std::array<const View*, kFlowCount> partners{};
      for (int f = 0; f < kFlowCount; ++f) {
        const int j = k + kFlowOffsets[f];
        if (j >= 0 && j < options.n_time_steps) partners[size_t(f)] = video_frame(j, camera_of[v]);
      }
      scene.views[v].motion = frame_motion(contents, scene.views[v], partners);
    }
  }
  return scene;
}

std::vector<uint8_t> render_synthetic_rgb(const SyntheticSceneOptions& options,
                                          const PinholeCamera<double>& camera, int time_index) {
  check_render_arguments(options, camera, time_index);
  const Content content = make_content(options, time_of_step(options, time_index));
  std::vector<uint8_t> rgb(size_t(camera.width) * camera.height * 3);
#pragma omp parallel for schedule(dynamic, 4)
  for (int row = 0; row < camera.height; ++row) {
    render_row(content, options, camera, row, rgb.data() + size_t(row) * camera.width * 3);
  }
  return rgb;
}

std::vector<float> render_synthetic_depth(const SyntheticSceneOptions& options,
                                          const PinholeCamera<double>& camera, int time_index) {
  check_render_arguments(options, camera, time_index);
  const Content content = make_content(options, time_of_step(options, time_index));
  std::vector<float> depth(size_t(camera.width) * camera.height);
#pragma omp parallel for schedule(static)
  for (int row = 0; row < camera.height; ++row) {
    for (int u = 0; u < camera.width; ++u) {
      V3 origin, direction;
      pixel_to_ray(camera, double(u), double(row), &origin, &direction);
      depth[size_t(row) * camera.width + u] = float(trace(content, origin, direction).depth);
    }
  }
  return depth;
}

}  // namespace mvibr::data
