// The render ops' option checks (ops/render_ops.h), shared by both backends: bad values are the
// caller's error, named in one line.
#include <cmath>
#include <sstream>

#include "mvibr/core/error.h"
#include "mvibr/geom/ray_sampling.h"
#include "mvibr/ops/render_ops.h"

namespace mvibr {

void validate_depth_sampling(const DepthSampling& s) {
  std::ostringstream why;
  if (!std::isfinite(s.near_depth) || !std::isfinite(s.far_depth)) {
    why << "depth range must be finite, got near=" << s.near_depth << " far=" << s.far_depth;
  } else if (s.near_depth <= 0) {
    why << "near depth must be positive, got near=" << s.near_depth;
  } else if (s.near_depth >= s.far_depth) {
    why << "near depth must be less than far depth, got near=" << s.near_depth
        << " far=" << s.far_depth;
  } else if (s.n_samples < 1 || s.n_samples > kMaxSamplesPerRay) {
    why << "N_samples must be in [1, " << kMaxSamplesPerRay << "], got " << s.n_samples;
  }
  if (!why.str().empty()) throw InvalidArgument(why.str());
}

void validate_importance_sampling(const ImportanceSampling& s) {
  std::ostringstream why;
  if (s.n_coarse < 3) {
    why << "importance sampling needs N_samples >= 3, got " << s.n_coarse;
  } else if (s.n_importance < 1) {
    why << "N_importance must be positive for importance sampling, got " << s.n_importance;
  } else if (s.n_coarse + s.n_importance > kMaxSamplesPerRay) {
    why << "N_samples + N_importance must be at most " << kMaxSamplesPerRay << ", got "
        << s.n_coarse + s.n_importance;
  }
  if (!why.str().empty()) throw InvalidArgument(why.str());
}

template <typename T>
void validate_source_views(const SourceViews<T>& v) {
  std::ostringstream why;
  if (v.n_views < 1) {
    why << "need at least one source view, got " << v.n_views;
  } else if (v.image_width < 2 || v.image_height < 2) {
    why << "source images must be at least 2x2, got " << v.image_width << "x" << v.image_height;
  } else if (v.feature_width < 2 || v.feature_height < 2) {
    why << "feature maps must be at least 2x2, got " << v.feature_width << "x" << v.feature_height;
  } else if (v.feature_channels < 0) {
    why << "feature channels must be non-negative, got " << v.feature_channels;
  } else if (!v.cameras || !v.images || (v.feature_channels > 0 && !v.features)) {
    why << "source views are missing cameras, images or feature maps";
  }
  if (!why.str().empty()) throw InvalidArgument(why.str());
}

template void validate_source_views(const SourceViews<float>&);
template void validate_source_views(const SourceViews<double>&);

}  // namespace mvibr
