// The built-in procedural scene of `mvibr prep --input synthetic`: a few textured, shiny
// objects on a checkered ground disc, ray traced analytically on the CPU so that the images,
// the depths and the near/far bounds are exact and need no files. It is what the README's main
// job trains on, so it is shaped to be quick at small sizes (a few hundred thousand rays) and
// to be worth learning: textures, depth discontinuities, occlusion, hard shadows, specular
// highlights and reflections that change with the viewpoint; optionally objects that move.
//
// World frame: z up, a ground disc of radius 2 at z = 0 centred on the origin; the rigs look at
// (0, 0, 0.35), the middle of the objects. Cameras follow geom/camera.h (OpenCV axes); pixel
// (u, v) holds the mean of samples within +-0.5 pixel of pixel_to_ray(camera, u, v).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mvibr/data/scene.h"
#include "mvibr/geom/camera.h"

namespace mvibr::data {

struct SyntheticSceneOptions {
  int width = 64, height = 48;  // image size in pixels, each at least 2
  int n_views = 24;             // cameras (the same rig at every time step)
  // "orbit": a ring around the content, the elevation waving twice between the two orbit
  // bounds, every camera looking at the centre. "forward": LLFF-like, a planar grid of
  // cameras sharing one rotation, facing the content from one side. "monocular": a video, one
  // camera per time step (n_views is not used) with the forward rig's rotation, sweeping across
  // forward_spread and bobbing once. "cycling": the Nvidia Dynamic Scenes benchmark's protocol
  // on the forward rig: the video's frame k is rig camera k % n_views, and at the test steps the
  // other cameras are test views (novel views at a time the video shows).
  std::string rig = "orbit";
  // More than 1: two objects move (a sphere on a ring and the box), every rig camera sees every
  // step, and every view gets exact flows, masks and disparity (scene.h's FrameMotion).
  int n_time_steps = 1;
  uint64_t seed = 0;  // object layout, colours and texture phases (never the cameras)
  // Cameras (monocular: frames) 0, n, 2n, ... are test views; cycling: the steps n/2, n/2 + n,
  // ... (away from the video's ends) have test views. 0: none.
  int n_test_every = 8;
  double fov_x_degrees = 50;  // horizontal field of view; square pixels
  double orbit_radius = 4.0;  // camera distance to the scene centre
  double orbit_min_elevation_degrees = 15, orbit_max_elevation_degrees = 45;
  double forward_distance = 4.0;          // grid centre to scene centre
  double forward_elevation_degrees = 35;  // how far the grid looks down
  double forward_spread = 0.6;            // side of the camera grid, world units
  int samples_per_side = 2;               // stratified anti-aliasing: 2 is 2x2 per pixel
  bool shadows = true;                    // hard shadows from the one directional light
  // Scales the highlights and the mirror reflections; 0 gives a Lambertian scene.
  double specular_strength = 1.0;
};

// Throws InvalidArgument naming the first option that is out of range. make_synthetic_scene
// also rejects a rig that puts content behind a camera's image plane (near would be <= 0),
// naming orbit_radius or forward_distance.
void validate_synthetic_scene_options(const SyntheticSceneOptions& options);

// Every camera at every time step, time-major (view t * n_views + c is camera c at step t; the
// monocular video's view t is its frame t; cycling: each step's video frame, then its test
// views), with exact near/far, splits and names "synthetic/t003/v012" (step, rig camera).
// Dynamic scenes' views carry their FrameMotion: a video is one camera over time (monocular,
// cycling: the training frames); through each pixel's centre ray, the disparity, the motion mask (a
// moving object or its shadow), the static mask (the motion mask grown by 2 pixels) and the flows
// to the video's frames at t +- 1, 2, 3 (the hit point moved with its object and projected; valid
// where the other frame's ray there hits it). Neighbours are left to prep.
Scene make_synthetic_scene(const SyntheticSceneOptions& options);

// The same scene through any camera (its own width and height), for ground truth at novel
// views: RGB uint8 [height][width][3], and the camera-z depth of the first hit through each
// pixel's centre ray (infinity where the ray misses everything). time_index is in
// [0, n_time_steps).
std::vector<uint8_t> render_synthetic_rgb(const SyntheticSceneOptions& options,
                                          const PinholeCamera<double>& camera, int time_index);
std::vector<float> render_synthetic_depth(const SyntheticSceneOptions& options,
                                          const PinholeCamera<double>& camera, int time_index);

}  // namespace mvibr::data
