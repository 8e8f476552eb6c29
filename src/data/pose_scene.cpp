// The built-in multi-view pose data set (pose_scene.h): forward kinematics of a walking 17-joint
// skeleton, a camera ring, and an analytic ray tracer of capsules, a sphere, pillars, a floor
// and a wall, so every label is exact.
#include "mvibr/data/pose_scene.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mvibr/core/error.h"
#include "mvibr/geom/camera.h"
#include "procedural.h"

namespace mvibr::data {

const char* const kPoseJointNames[kPoseJoints] = {
    "pelvis",     "right_hip",  "right_knee",     "right_ankle", "left_hip",   "left_knee",
    "left_ankle", "spine",      "thorax",         "neck",        "head",       "left_shoulder",
    "left_elbow", "left_wrist", "right_shoulder", "right_elbow", "right_wrist"};
const int kPoseParents[kPoseJoints] = {-1, 0, 1, 2, 0, 4, 5, 0, 7, 8, 9, 8, 11, 12, 8, 14, 15};

namespace {

using V3 = Vec3<double>;
constexpr double kPi = 3.14159265358979323846;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr V3 kStageCentre{0, 0, 0.9};  // where the cameras look
constexpr double kWallRadius = 7.0;    // the wall around the stage; the floor ends there
constexpr double kRootReach = 0.6;     // the pelvis stays this close to the stage's axis
constexpr double kPillarHeight = 2.4;

V3 normalized(V3 a) {
  return (1.0 / norm(a)) * a;
}
// Rotations about the body's axes: x to the right, y forward, z up (right-handed).
struct M3 {
  double m[9];
  V3 operator*(V3 v) const {
    return {m[0] * v.x + m[1] * v.y + m[2] * v.z, m[3] * v.x + m[4] * v.y + m[5] * v.z,
            m[6] * v.x + m[7] * v.y + m[8] * v.z};
  }
  M3 operator*(const M3& o) const {
    M3 r{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 3; ++k) r.m[3 * i + j] += m[3 * i + k] * o.m[3 * k + j];
    return r;
  }
};
M3 rotation_x(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{1, 0, 0, 0, c, -s, 0, s, c}};
}
M3 rotation_y(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{c, 0, s, 0, 1, 0, -s, 0, c}};
}
M3 rotation_z(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{c, -s, 0, s, c, 0, 0, 0, 1}};
}

// The rest pose: each joint's offset from its parent, metres, in the parent's rotated frame.
constexpr V3 kRestOffsets[kPoseJoints] = {
    {0, 0, 0},       {0.13, 0, -0.03},  {0, 0, -0.44}, {0, 0, -0.42}, {-0.13, 0, -0.03},
    {0, 0, -0.44},   {0, 0, -0.42},     {0, 0, 0.23},  {0, 0, 0.25},  {0, 0.03, 0.12},
    {0, 0.02, 0.12}, {-0.17, 0, -0.03}, {0, 0, -0.28}, {0, 0, -0.25}, {0.17, 0, -0.03},
    {0, 0, -0.28},   {0, 0, -0.25}};
// Bones whose lengths jitter together (left and right alike): each joint's offset group.
constexpr int kBoneGroup[kPoseJoints] = {0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 8, 9, 10};
constexpr int kBoneGroups = 11;

// The joint angles a sequence walks, radians: each is the mean plus a gait term plus an
// Ornstein-Uhlenbeck walk, clamped to its limits.
enum Angle {
  kLean,  // the whole body's forward pitch
  kSpineFlex,
  kSpineTwist,
  kSpineSide,
  kThoraxFlex,
  kNeckFlex,
  kNeckTurn,
  kHipFlexR,
  kHipOutR,
  kKneeR,
  kHipFlexL,
  kHipOutL,
  kKneeL,
  kShoulderFlexR,
  kShoulderOutR,
  kElbowR,
  kShoulderFlexL,
  kShoulderOutL,
  kElbowL,
  kAngles
};
struct AngleSpec {
  double mean, spread, lo, hi;  // spread: the walk's stationary standard deviation
};
constexpr AngleSpec kAngleSpecs[kAngles] = {
    {0.05, 0.05, -0.1, 0.3}, {0.05, 0.15, -0.3, 0.8}, {0, 0.25, -0.7, 0.7},
    {0, 0.1, -0.35, 0.35},   {0, 0.1, -0.3, 0.5},     {0.1, 0.15, -0.4, 0.6},
    {0, 0.35, -0.9, 0.9},    {0.1, 0.35, -0.6, 1.6},  {0.08, 0.1, 0, 0.6},
    {0.2, 0.35, 0, 2.0},     {0.1, 0.35, -0.6, 1.6},  {0.08, 0.1, 0, 0.6},
    {0.2, 0.35, 0, 2.0},     {0.2, 0.6, -1.0, 2.6},   {0.25, 0.35, 0, 1.6},
    {0.5, 0.5, 0, 2.4},      {0.2, 0.6, -1.0, 2.6},   {0.25, 0.35, 0, 1.6},
    {0.5, 0.5, 0, 2.4}};
constexpr double kWalkTimeConstant = 0.8;  // seconds

struct Body {
  std::array<V3, kPoseJoints> joints;
};

// Forward kinematics: the root at `root` facing `heading` (radians about z; 0 faces +y).
Body pose_body(const std::array<double, kAngles>& a, V3 root, double heading,
               const std::array<double, kBoneGroups>& bone_scale) {
  std::array<M3, kPoseJoints> local;
  for (M3& m : local) m = rotation_x(0);
  local[0] = rotation_z(heading) * rotation_x(-a[kLean]);
  local[7] = rotation_x(-a[kSpineFlex]) * rotation_z(a[kSpineTwist]) * rotation_y(a[kSpineSide]);
  local[8] = rotation_x(-a[kThoraxFlex]);
  local[9] = rotation_z(a[kNeckTurn]) * rotation_x(-a[kNeckFlex]);
  // Hips and shoulders: flexion swings the limb forward, "out" away from the body's midline.
  local[1] = rotation_x(a[kHipFlexR]) * rotation_y(-a[kHipOutR]);
  local[4] = rotation_x(a[kHipFlexL]) * rotation_y(a[kHipOutL]);
  local[2] = rotation_x(-a[kKneeR]);
  local[5] = rotation_x(-a[kKneeL]);
  local[14] = rotation_x(a[kShoulderFlexR]) * rotation_y(-a[kShoulderOutR]);
  local[11] = rotation_x(a[kShoulderFlexL]) * rotation_y(a[kShoulderOutL]);
  local[15] = rotation_x(a[kElbowR]);
  local[12] = rotation_x(a[kElbowL]);
  std::array<M3, kPoseJoints> world;
  Body body;
  for (int j = 0; j < kPoseJoints; ++j) {
    const int p = kPoseParents[j];
    if (p < 0) {
      world[j] = local[j];
      body.joints[j] = root;
      continue;
    }
    world[j] = world[size_t(p)] * local[j];
    body.joints[j] = body.joints[size_t(p)] +
                     world[size_t(p)] * (bone_scale[size_t(kBoneGroup[j])] * kRestOffsets[j]);
  }
  return body;
}

struct Material {
  V3 a, b;       // two colours
  double scale;  // texture period, metres (or turns, on the wall)
};

// A capsule of the body: a segment between two joints (or fixed points) and a radius.
struct Capsule {
  V3 p, q;
  double radius;
  V3 colour;
};

struct Pillar {
  double x, y, radius;
  Material material;
};

// Everything one sequence draws once.
struct Sequence {
  double body_scale;  // the whole body's, and its limbs' thickness
  std::array<double, kBoneGroups> bone_scale;
  double gait_amplitude, gait_frequency;  // radians, hertz
  double heading, turn_spread;            // initial heading; the heading walk's spread
  V3 root;
  Material floor, wall;
  std::vector<Pillar> pillars;
  V3 limb_tint;  // a small per-sequence change of the limbs' colours (clothing)
};

struct Segment {
  int from, to;
  double radius;
};
// The body's capsules: limbs, torso and the shoulder and hip girdles. The head is a sphere.
constexpr Segment kSegments[] = {{0, 8, 0.13},   {1, 4, 0.085},   {11, 14, 0.06}, {8, 9, 0.05},
                                 {1, 2, 0.075},  {2, 3, 0.055},   {4, 5, 0.075},  {5, 6, 0.055},
                                 {14, 15, 0.05}, {15, 16, 0.042}, {11, 12, 0.05}, {12, 13, 0.042}};
constexpr int kSegmentCount = int(sizeof kSegments / sizeof kSegments[0]);
constexpr double kHeadRadius = 0.11;

// Limb colours: the right side warm, the left cool, so that the two are told apart.
V3 segment_colour(int s) {
  static const double hues[kSegmentCount] = {0.12, 0.62, 0.75, 0.1,  0.0,  0.05,
                                             0.5,  0.45, 0.9,  0.85, 0.33, 0.28};
  if (s == 0 || s == 3) return {0.55, 0.55, 0.6};  // torso, neck
  return hue_colour(hues[s], 0.75, 0.9);
}

// One instant of the stage: the body's capsules and head, and the sequence's fixed content.
struct Stage {
  const Sequence* sequence;
  std::vector<Capsule> capsules;
  V3 head_centre;
  V3 body_centre;
  double body_reach;
};

Stage make_stage(const Sequence& sequence, const Body& body) {
  Stage stage{&sequence, {}, {}, {}, 0};
  for (int s = 0; s < kSegmentCount; ++s) {
    const Segment& g = kSegments[s];
    V3 colour = segment_colour(s);
    colour = {colour.x * sequence.limb_tint.x, colour.y * sequence.limb_tint.y,
              colour.z * sequence.limb_tint.z};
    stage.capsules.push_back({body.joints[size_t(g.from)], body.joints[size_t(g.to)],
                              g.radius * sequence.body_scale, colour});
  }
  stage.head_centre = 0.5 * (body.joints[9] + body.joints[10]);
  stage.body_centre = body.joints[0];
  for (const V3& j : body.joints)
    stage.body_reach = std::max(stage.body_reach, norm(j - stage.body_centre));
  stage.body_reach += 0.2;
  return stage;
}

// First entry of a ray (o + t d, t > 0) into a sphere; infinity on a miss.
double sphere_hit(V3 o, V3 d, V3 centre, double radius) {
  const V3 oc = o - centre;
  const double a = dot(d, d), b = dot(oc, d), c = dot(oc, oc) - radius * radius;
  const double h = b * b - a * c;
  if (h < 0) return kInfinity;
  const double t = (-b - std::sqrt(h)) / a;
  return t > 0 ? t : kInfinity;
}

// First entry into a capsule: its cylinder or either end's sphere, whichever comes first.
double capsule_hit(V3 o, V3 d, const Capsule& c) {
  double best = std::min(sphere_hit(o, d, c.p, c.radius), sphere_hit(o, d, c.q, c.radius));
  const V3 ba = c.q - c.p, oa = o - c.p;
  const double baba = dot(ba, ba), bard = dot(ba, d), baoa = dot(ba, oa);
  const double a = baba * dot(d, d) - bard * bard;
  const double b = baba * dot(d, oa) - baoa * bard;
  const double k = baba * dot(oa, oa) - baoa * baoa - c.radius * c.radius * baba;
  const double h = b * b - a * k;
  if (a > 1e-12 && h >= 0) {
    const double t = (-b - std::sqrt(h)) / a;
    const double along = baoa + t * bard;
    if (t > 0 && along > 0 && along < baba) best = std::min(best, t);
  }
  return best;
}

V3 closest_on_segment(V3 x, V3 p, V3 q) {
  const V3 pq = q - p;
  const double s = std::clamp(dot(x - p, pq) / std::max(dot(pq, pq), 1e-12), 0.0, 1.0);
  return p + s * pq;
}

// A vertical pillar (cylinder with a top) from the floor to kPillarHeight.
double pillar_hit(V3 o, V3 d, const Pillar& pillar, V3* normal) {
  double best = kInfinity;
  const double ox = o.x - pillar.x, oy = o.y - pillar.y;
  const double a = d.x * d.x + d.y * d.y, b = ox * d.x + oy * d.y;
  const double c = ox * ox + oy * oy - pillar.radius * pillar.radius;
  const double h = b * b - a * c;
  if (a > 1e-12 && h >= 0) {
    const double t = (-b - std::sqrt(h)) / a;
    const double z = o.z + t * d.z;
    if (t > 0 && z > 0 && z < kPillarHeight) {
      best = t;
      *normal = normalized(V3{ox + t * d.x, oy + t * d.y, 0});
    }
  }
  if (d.z < 0 && o.z > kPillarHeight) {  // the top disc
    const double t = (kPillarHeight - o.z) / d.z;
    const double x = ox + t * d.x, y = oy + t * d.y;
    if (t < best && x * x + y * y < pillar.radius * pillar.radius) {
      best = t;
      *normal = {0, 0, 1};
    }
  }
  return best;
}

const V3 kToLight = normalized(V3{0.3, -0.5, 0.8});

double shade(V3 normal) {
  return 0.35 + 0.65 * std::max(0.0, dot(normal, kToLight));
}

// The colour a ray sees, linear RGB; with `hit_distance`, also the first hit's t.
V3 trace(const Stage& stage, V3 o, V3 d, double* hit_distance = nullptr) {
  double best = kInfinity;
  V3 colour{0, 0, 0};
  // The body, when the ray passes near it.
  const V3 to_body = stage.body_centre - o;
  const double along = dot(to_body, d) / dot(d, d);
  if (norm(to_body - along * d) < stage.body_reach) {
    for (const Capsule& c : stage.capsules) {
      const double t = capsule_hit(o, d, c);
      if (t < best) {
        best = t;
        const V3 x = o + t * d;
        colour = shade(normalized(x - closest_on_segment(x, c.p, c.q))) * c.colour;
      }
    }
    const double t = sphere_hit(o, d, stage.head_centre, kHeadRadius);
    if (t < best) {
      best = t;
      colour = shade(normalized(o + t * d - stage.head_centre)) * V3{0.85, 0.65, 0.5};
    }
  }
  for (const Pillar& pillar : stage.sequence->pillars) {
    V3 normal{0, 0, 1};
    const double t = pillar_hit(o, d, pillar, &normal);
    if (t < best) {
      best = t;
      const V3 x = o + t * d;
      const double angle = std::atan2(x.y - pillar.y, x.x - pillar.x) / (2 * kPi);
      const bool stripe = int(std::floor(angle * 12 + x.z / pillar.material.scale)) & 1;
      colour = shade(normal) * (stripe ? pillar.material.a : pillar.material.b);
    }
  }
  // The floor disc, else the wall (every ray from inside the wall ends on one of them).
  if (d.z < 0) {
    const double t = -o.z / d.z;
    const V3 x = o + t * d;
    if (t < best && x.x * x.x + x.y * x.y < kWallRadius * kWallRadius) {
      best = t;
      const Material& m = stage.sequence->floor;
      const bool check = int(std::floor(x.x / m.scale) + std::floor(x.y / m.scale)) & 1;
      const double grain = 0.9 + 0.1 * std::sin(13 * x.x + 7 * x.y) * std::sin(11 * x.y - 5 * x.x);
      colour = (grain * shade({0, 0, 1})) * (check ? m.a : m.b);
    }
  }
  if (best == kInfinity) {
    const double a = d.x * d.x + d.y * d.y, b = o.x * d.x + o.y * d.y;
    const double c = o.x * o.x + o.y * o.y - kWallRadius * kWallRadius;
    const double t = (-b + std::sqrt(std::max(0.0, b * b - a * c))) / std::max(a, 1e-12);
    const V3 x = o + t * d;
    const Material& m = stage.sequence->wall;
    const double turns = std::atan2(x.y, x.x) / (2 * kPi);
    const double bands = 0.5 + 0.5 * std::sin(2 * kPi * (turns / m.scale + 0.8 * x.z));
    const double ripple = 0.85 + 0.15 * std::sin(40 * turns + 6 * x.z);
    best = t;
    colour = ripple * (bands * m.a + (1 - bands) * m.b);
  }
  if (hit_distance) *hit_distance = best;
  return colour;
}

Sequence make_sequence(const PoseSceneOptions& o, int s) {
  SeedStream draw(o.seed * 0x100000001B3ull + uint64_t(s) * 7919 + 1);
  Sequence q;
  q.body_scale = draw.uniform(0.85, 1.15);
  for (double& b : q.bone_scale) b = q.body_scale * draw.uniform(0.93, 1.07);
  q.gait_amplitude = draw.uniform(0.0, 0.5);
  q.gait_frequency = draw.uniform(0.6, 1.1);
  q.heading = draw.uniform(0, 2 * kPi);
  q.turn_spread = draw.uniform(0.2, 0.8);
  const double r = draw.uniform(0, 0.5 * kRootReach), a = draw.uniform(0, 2 * kPi);
  q.root = {r * std::cos(a), r * std::sin(a), 0};
  const double h = draw.uniform(0, 1);
  q.floor = {hue_colour(h, draw.uniform(0.1, 0.5), 0.75), hue_colour(h + 0.5, 0.2, 0.45),
             draw.uniform(0.25, 0.6)};
  const double w = draw.uniform(0, 1);
  q.wall = {hue_colour(w, draw.uniform(0.3, 0.8), 0.8), hue_colour(w + 0.3, 0.4, 0.35),
            draw.uniform(0.04, 0.15)};
  for (int p = 0; p < o.n_pillars; ++p) {
    const double radius = draw.uniform(1.8, 3.0), angle = draw.uniform(0, 2 * kPi);
    const double g = draw.uniform(0.3, 0.7);
    q.pillars.push_back(
        {radius * std::cos(angle), radius * std::sin(angle), draw.uniform(0.12, 0.22),
         Material{{g, g, g * 0.9}, {g * 0.6, g * 0.6, g * 0.55}, draw.uniform(0.2, 0.5)}});
  }
  q.limb_tint = {draw.uniform(0.8, 1.0), draw.uniform(0.8, 1.0), draw.uniform(0.8, 1.0)};
  return q;
}

// The sequence's bodies at every frame: walks of every angle, the gait, the heading and the root.
std::vector<Body> walk_sequence(const PoseSceneOptions& o, const Sequence& q, int s) {
  SeedStream draw(o.seed * 0x100000001B3ull + uint64_t(s) * 7919 + 2);
  const double dt = 1.0 / o.frame_rate;
  const double pull = dt / kWalkTimeConstant, push = std::sqrt(2 * dt / kWalkTimeConstant);
  std::array<double, kAngles> walk;
  for (int k = 0; k < kAngles; ++k) walk[size_t(k)] = kAngleSpecs[k].spread * draw.normal();
  double heading = q.heading, turn = 0, phase = draw.uniform(0, 2 * kPi);
  V3 root = q.root;
  std::vector<Body> bodies;
  for (int f = 0; f < o.n_frames; ++f) {
    // The gait: legs in antiphase, arms against the legs, knees bending on the swing.
    const double swing = q.gait_amplitude * std::sin(phase);
    std::array<double, kAngles> a;
    for (int k = 0; k < kAngles; ++k) a[size_t(k)] = kAngleSpecs[k].mean + walk[size_t(k)];
    a[kHipFlexR] += swing;
    a[kHipFlexL] -= swing;
    a[kKneeR] += q.gait_amplitude * std::max(0.0, std::sin(phase + 1.2));
    a[kKneeL] += q.gait_amplitude * std::max(0.0, -std::sin(phase + 1.2));
    a[kShoulderFlexR] -= 0.8 * swing;
    a[kShoulderFlexL] += 0.8 * swing;
    for (int k = 0; k < kAngles; ++k) {
      a[size_t(k)] = std::clamp(a[size_t(k)], kAngleSpecs[k].lo, kAngleSpecs[k].hi);
    }
    // The pelvis height keeps the lower foot on the floor.
    Body body = pose_body(a, {0, 0, 0}, heading, q.bone_scale);
    const double lowest = std::min(body.joints[3].z, body.joints[6].z) - 0.05;
    body = pose_body(a, {root.x, root.y, -lowest}, heading, q.bone_scale);
    bodies.push_back(body);
    // Next frame: the walks step, the body turns and moves forward with its gait, back towards
    // the stage's centre when it strays.
    for (int k = 0; k < kAngles; ++k) {
      walk[size_t(k)] += -pull * walk[size_t(k)] + push * kAngleSpecs[k].spread * draw.normal();
    }
    turn += -pull * turn + push * q.turn_spread * draw.normal();
    heading += turn * dt;
    phase += 2 * kPi * q.gait_frequency * dt;
    const V3 forward{-std::sin(heading), std::cos(heading), 0};
    root = root + (0.9 * q.gait_amplitude * dt) * forward;
    const double reach = std::hypot(root.x, root.y);
    if (reach > kRootReach) root = (kRootReach / reach) * root;
  }
  return bodies;
}

std::vector<PinholeCamera<double>> camera_ring(const PoseSceneOptions& o) {
  SeedStream draw(o.seed * 0x100000001B3ull + 3);
  const double focal = 0.5 * o.width / std::tan(0.5 * o.fov_x_degrees * kPi / 180);
  std::vector<PinholeCamera<double>> cameras;
  for (int c = 0; c < o.n_cameras; ++c) {
    const double azimuth = 2 * kPi * c / o.n_cameras + draw.uniform(-0.15, 0.15);
    const double radius = o.ring_radius + draw.uniform(-0.2, 0.2);
    const double height = 1.2 + 0.6 * (c % 2) + draw.uniform(-0.15, 0.15);
    const V3 eye{radius * std::cos(azimuth), radius * std::sin(azimuth), height};
    const V3 look = kStageCentre + V3{draw.uniform(-0.1, 0.1), draw.uniform(-0.1, 0.1), 0};
    cameras.push_back(look_at_camera(eye, look, V3{0, 0, 1}, focal, o.width, o.height));
  }
  return cameras;
}

// How far in front of a joint its own body surface can be: the largest radius plus axis
// distance of the primitives that contain it, and a centimetre.
std::array<double, kPoseJoints> surface_depths(const Stage& stage, const Body& body) {
  std::array<double, kPoseJoints> depth;
  for (int j = 0; j < kPoseJoints; ++j) {
    const V3 x = body.joints[size_t(j)];
    double d = 0;
    for (const Capsule& c : stage.capsules) {
      const double axis = norm(x - closest_on_segment(x, c.p, c.q));
      if (axis <= c.radius + 1e-9) d = std::max(d, c.radius + axis);
    }
    const double head = norm(x - stage.head_centre);
    if (head <= kHeadRadius) d = std::max(d, kHeadRadius + head);
    depth[size_t(j)] = d + 0.01;
  }
  return depth;
}

// `surface`: the instant's surface_depths, the same for every camera.
PoseLabels label_view(const Stage& stage, const Body& body,
                      const std::array<double, kPoseJoints>& surface,
                      const PinholeCamera<double>& camera) {
  PoseLabels labels;
  for (int j = 0; j < kPoseJoints; ++j) {
    const V3 x = body.joints[size_t(j)];
    labels.joints_world.insert(labels.joints_world.end(), {x.x, x.y, x.z});
    const V3 in_camera = transform_point(camera.w2c, x);
    const double u = camera.fx * in_camera.x / in_camera.z + camera.cx;
    const double v = camera.fy * in_camera.y / in_camera.z + camera.cy;
    labels.joints_image.insert(labels.joints_image.end(), {float(u), float(v)});
    const bool inside = in_camera.z > 0 && u > -0.5 && u < camera.width - 0.5 && v > -0.5 &&
                        v < camera.height - 0.5;
    bool seen = false;
    if (inside) {
      const V3 o = camera.center(), d = x - o;  // t = 1 at the joint
      double hit = kInfinity;
      trace(stage, o, d, &hit);
      seen = hit * norm(d) >= norm(d) - surface[size_t(j)];
    }
    labels.visible.push_back(seen ? 1 : 0);
  }
  return labels;
}

std::vector<uint8_t> render(const Stage& stage, const PinholeCamera<double>& camera, int samples) {
  const int w = camera.width, h = camera.height;
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
#pragma omp parallel for schedule(dynamic, 4)
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      V3 sum{0, 0, 0};
      for (int sy = 0; sy < samples; ++sy) {
        for (int sx = 0; sx < samples; ++sx) {
          V3 o, d;
          pixel_to_ray(camera, x + (sx + 0.5) / samples - 0.5, y + (sy + 0.5) / samples - 0.5, &o,
                       &d);
          sum = sum + trace(stage, o, d);
        }
      }
      const V3 c = (1.0 / (samples * samples)) * sum;
      uint8_t* out = &rgb[(size_t(y) * w + x) * 3];
      const double channels[3] = {c.x, c.y, c.z};
      for (int k = 0; k < 3; ++k) {
        out[k] = uint8_t(std::lround(255 * std::pow(std::clamp(channels[k], 0.0, 1.0), 1 / 2.2)));
      }
    }
  }
  return rgb;
}

}  // namespace

void validate_pose_scene_options(const PoseSceneOptions& o) {
  const auto require = [](bool ok, const char* name, const char* range, double value) {
    if (!ok) {
      char text[160];
      std::snprintf(text, sizeof text, "synthetic_pose: %s must be %s, got %g", name, range, value);
      throw InvalidArgument(text);
    }
  };
  require(o.width >= 16 && o.width <= 4096, "width", "in [16, 4096]", o.width);
  require(o.height >= 16 && o.height <= 4096, "height", "in [16, 4096]", o.height);
  require(o.n_cameras >= 2 && o.n_cameras <= 64, "cameras", "in [2, 64]", o.n_cameras);
  require(o.n_sequences >= 1 && o.n_sequences <= 10000, "sequences", "in [1, 10000]",
          o.n_sequences);
  require(o.n_frames >= 1 && o.n_frames <= 100000, "frames", "in [1, 100000]", o.n_frames);
  require(o.n_test_sequences >= 0 && o.n_test_sequences < o.n_sequences, "test_sequences",
          "in [0, sequences)", o.n_test_sequences);
  require(o.frame_rate > 0 && o.frame_rate <= 1000, "frame_rate", "in (0, 1000]", o.frame_rate);
  require(o.fov_x_degrees >= 10 && o.fov_x_degrees <= 120, "fov_x_degrees", "in [10, 120]",
          o.fov_x_degrees);
  require(o.ring_radius >= 3.5 && o.ring_radius <= 6.5, "ring_radius",
          "in [3.5, 6.5] (outside the pillars, inside the wall)", o.ring_radius);
  require(o.n_pillars >= 0 && o.n_pillars <= 8, "pillars", "in [0, 8]", o.n_pillars);
  require(o.samples_per_side >= 1 && o.samples_per_side <= 8, "samples_per_side", "in [1, 8]",
          o.samples_per_side);
}

Scene make_pose_scene(const PoseSceneOptions& o) {
  validate_pose_scene_options(o);
  Scene scene;
  scene.name = "synthetic_pose";
  scene.source_format = "synthetic_pose";
  scene.depth_bounds_from = "the stage's extent (the pose model does not use them)";
  scene.skeleton.assign(kPoseParents, kPoseParents + kPoseJoints);
  scene.joint_names.assign(kPoseJointNames, kPoseJointNames + kPoseJoints);
  const std::vector<PinholeCamera<double>> cameras = camera_ring(o);
  for (int s = 0; s < o.n_sequences; ++s) {
    const Sequence sequence = make_sequence(o, s);
    const std::vector<Body> bodies = walk_sequence(o, sequence, s);
    const Split split = s >= o.n_sequences - o.n_test_sequences ? Split::kTest : Split::kTrain;
    for (int f = 0; f < o.n_frames; ++f) {
      const Stage stage = make_stage(sequence, bodies[size_t(f)]);
      const std::array<double, kPoseJoints> surface = surface_depths(stage, bodies[size_t(f)]);
      const int first = int(scene.views.size());
      for (int c = 0; c < o.n_cameras; ++c) {
        View view;
        char name[64];
        std::snprintf(name, sizeof name, "synthetic_pose/s%02d/f%03d/c%d", s, f, c);
        view.name = name;
        view.camera = cameras[size_t(c)];
        view.near_depth = 0.1;
        view.far_depth = 2 * kWallRadius;
        view.time = f / o.frame_rate;
        view.time_index = f;
        view.split = split;
        view.rgb = render(stage, view.camera, o.samples_per_side);
        view.pose = label_view(stage, bodies[size_t(f)], surface, view.camera);
        view.target = c == 0;
        scene.views.push_back(std::move(view));
        scene.neighbours.emplace_back();
        if (c == 0) {
          for (int other = 1; other < o.n_cameras; ++other)
            scene.neighbours.back().push_back(first + other);
        }
      }
    }
  }
  validate_scene(scene);
  return scene;
}

}  // namespace mvibr::data
