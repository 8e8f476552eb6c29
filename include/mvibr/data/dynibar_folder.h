// DynIBaR's preprocessed monocular video, as google/dynibar's loader reads it
// (ibrnet/data_loaders/monocular.py, llff_data_utils.py): what `mvibr prep --format dynibar`
// imports (import_dynibar, importers.h) and what the built-in ray tracer writes, so that the
// importer is tested on a folder with exact flows, masks and depths.
//
// <scene>/dense/ (either path is accepted), N frames:
// - poses_bounds_cvd.npy: [N, 17] float64, LLFF's rows (import_llff.cpp): [R | t | (H, W, focal)]
//   with rotation columns [down, right, backward], then the frame's near and far bounds. The
//   loader uses the focal as it is for the frames read (it replaces H and W by their size) and
//   puts the principal point at the centre.
// - images_<W>x<H>/: the frames, in file-name order; images/: the frames at full size (the
//   loader sizes the folder's name from them).
// - disp/<frame's file stem>.npy: [H, W] disparity, 1 / depth in the poses' units.
// - flow_i<k>/<n:05d>_fwd.npz and _bwd.npz, k = 1, 2, 3: the flow from frame n to frame n + k
//   (fwd) and to n - k (bwd), where that frame exists: `flow` [H, W, 2] in pixels, `mask`
//   [H, W] (non-zero: valid).
// - dynamic_masks/<n>.png and static_masks/<n>.png (not zero-padded): 8-bit, black where the
//   content moves; the dynamic masks lie within the moving content, the static masks cover it.
//   They may be of another size than the frames (the loader resizes them, nearest neighbour).
// Not read: the virtual views (source_vv_poses.npy, source_virtual_views_*/), which need a
// renderer of their own, and the multi-camera set's mv_images/.
#pragma once

#include <string>

#include "mvibr/data/scene.h"

namespace mvibr::data {

// Writes a monocular dynamic scene (one view per time step, in time order, with FrameMotion,
// fx == fy and a centred principal point) as <folder>/dense/. Throws InvalidArgument naming
// what the scene lacks; files are each written whole (core/durable_file.h).
void write_dynibar_folder(const Scene& scene, const std::string& folder);

}  // namespace mvibr::data
