// Element-wise activations, in place, with backward passes from the output: ELU'(x) is 1 above
// zero and y + 1 below, ReLU' is [y > 0], Sigmoid' is y (1 - y). ELU and Sigmoid in float
// vectorise (see vector_math.h).
#include <cmath>

#include "mvibr/nn/layers.h"
#include "parallel.h"
#include "vector_math.h"

namespace mvibr::nn {

// body(i) for every element, in an OpenMP team when worth it.
template <typename Body>
void for_each_element(size_t n, Body body) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (size_t i = 0; i < n; ++i) body(i);
}

template <typename T>
void elu(size_t n, T* x) {
  for_each_element(n, [=](size_t i) { x[i] = elu_of(x[i]); });
}

template <typename T>
void elu_backward(size_t n, const T* y, T* grad) {
  for_each_element(n, [=](size_t i) { grad[i] *= elu_slope(y[i]); });
}

template <typename T>
void relu(size_t n, T* x) {
  for_each_element(n, [=](size_t i) { x[i] = x[i] > 0 ? x[i] : T(0); });
}

template <typename T>
void relu_backward(size_t n, const T* y, T* grad) {
  for_each_element(n, [=](size_t i) { grad[i] = y[i] > 0 ? grad[i] : T(0); });
}

template <typename T>
void sigmoid(size_t n, T* x) {
  for_each_element(n, [=](size_t i) { x[i] = sigmoid_of(x[i]); });
}

template <typename T>
void sigmoid_backward(size_t n, const T* y, T* grad) {
  for_each_element(n, [=](size_t i) { grad[i] *= y[i] * (T(1) - y[i]); });
}

#define MVIBR_ACTIVATIONS(T)                         \
  template void elu(size_t, T*);                     \
  template void elu_backward(size_t, const T*, T*);  \
  template void relu(size_t, T*);                    \
  template void relu_backward(size_t, const T*, T*); \
  template void sigmoid(size_t, T*);                 \
  template void sigmoid_backward(size_t, const T*, T*);
MVIBR_ACTIVATIONS(float)
MVIBR_ACTIVATIONS(double)
#undef MVIBR_ACTIVATIONS

}  // namespace mvibr::nn
