// The CPU backend of the pose model's triangulation (geom/triangulation.h): OpenMP over
// (sample, joint), each running the per-joint math the CUDA kernels run.
#include "mvibr/geom/triangulation.h"

namespace mvibr::cpu {

template <typename T>
void triangulation_weights(int batch, int views, int joints, const T* confidences, T* weights) {
#pragma omp parallel for schedule(static)
  for (int bj = 0; bj < batch * joints; ++bj) {
    const size_t first = size_t(bj / joints) * views * joints + size_t(bj % joints);
    mvibr::triangulation_weights(views, confidences + first, joints, weights + first);
  }
}

template <typename T>
void triangulation_weights_backward(int batch, int views, int joints, const T* confidences,
                                    const T* grad_weights, T* grad_confidences) {
#pragma omp parallel for schedule(static)
  for (int bj = 0; bj < batch * joints; ++bj) {
    const size_t first = size_t(bj / joints) * views * joints + size_t(bj % joints);
    mvibr::triangulation_weights_backward(views, confidences + first, joints, grad_weights + first,
                                          grad_confidences + first);
  }
}

template <typename T>
int triangulate_joints(int batch, int views, int joints, const T* projections, const T* points,
                       const T* weights, T* joints_3d, uint8_t* ok) {
  int not_ok = 0;
#pragma omp parallel for schedule(static) reduction(+ : not_ok)
  for (int bj = 0; bj < batch * joints; ++bj) {
    const JointViews<T> v =
        batch_joint_views(bj / joints, bj % joints, views, joints, projections, points, weights);
    ok[bj] = triangulate_joint(v, joints_3d + 3 * size_t(bj)) ? 1 : 0;
    not_ok += 1 - ok[bj];
  }
  return not_ok;
}

template <typename T>
int triangulate_joints_backward(int batch, int views, int joints, const T* projections,
                                const T* points, const T* weights, const T* grad_joints_3d,
                                T* grad_points, T* grad_weights) {
  int not_ok = 0;
#pragma omp parallel for schedule(static) reduction(+ : not_ok)
  for (int bj = 0; bj < batch * joints; ++bj) {
    const int b = bj / joints, j = bj % joints;
    const JointViews<T> v = batch_joint_views(b, j, views, joints, projections, points, weights);
    const size_t first = size_t(b) * views * joints + size_t(j);
    const bool ok = triangulate_joint_backward(v, grad_joints_3d + 3 * size_t(bj),
                                               grad_points + 2 * first, grad_weights + first);
    not_ok += ok ? 0 : 1;
  }
  return not_ok;
}

#define MVIBR_INSTANTIATE_TRIANGULATION(T)                                                        \
  template void triangulation_weights(int, int, int, const T*, T*);                               \
  template void triangulation_weights_backward(int, int, int, const T*, const T*, T*);            \
  template int triangulate_joints(int, int, int, const T*, const T*, const T*, T*, uint8_t*);     \
  template int triangulate_joints_backward(int, int, int, const T*, const T*, const T*, const T*, \
                                           T*, T*);
MVIBR_INSTANTIATE_TRIANGULATION(float)
MVIBR_INSTANTIATE_TRIANGULATION(double)
#undef MVIBR_INSTANTIATE_TRIANGULATION

}  // namespace mvibr::cpu
