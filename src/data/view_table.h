// The per-view metadata table that scene.h5 and every shard hold (under "views/"): intrinsics
// [N,4], c2w [N,3,4], near_far [N,2], time [N], time_index [N], split [N], target [N], name [N];
// and a pose data set's skeleton (skeleton/parents [J], skeleton/names [J]). One writer
// and one validating reader, so both files agree by construction.
#pragma once

#include <vector>

#include "mvibr/data/scene.h"
#include "mvibr/hdf5/hdf5_file.h"

namespace mvibr::data {

void write_view_table(h5::File& file, const std::vector<const View*>& views);

// Reads n views (pixels left empty) and validates each camera, depth range and split, naming
// the file and the view on error.
std::vector<View> read_view_table(const h5::File& file, long long n, int width, int height);

// A pose data set's skeleton (Scene::skeleton, joint_names): written when it has one; read back
// into `scene` (left empty where the file has none), parents checked against `file`'s joints.
void write_skeleton(h5::File& file, const Scene& scene);
void read_skeleton(const h5::File& file, Scene* scene);

// Neighbour lists as a rectangular [N, K] table padded with -1, and back.
std::vector<int> pad_neighbours(const std::vector<std::vector<int>>& lists, int* width);
std::vector<std::vector<int>> unpad_neighbours(const h5::File& file, const std::string& name,
                                               const std::vector<int>& table, long long rows,
                                               long long width, long long index_limit);

// Common attributes of both file kinds, and their checks on read.
void write_common_attributes(h5::File& file, const std::string& kind, const Scene& scene,
                             const std::string& command_line);
// Checks "format" == kind and the version; returns the version.
int check_format(const h5::File& file, const std::string& kind);
// An integer attribute within [lo, hi], else an error naming it.
long long bounded_attribute(const h5::File& file, const std::string& name, long long lo,
                            long long hi);

}  // namespace mvibr::data
