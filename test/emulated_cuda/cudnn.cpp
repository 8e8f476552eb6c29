// The reference cuDNN (see cudnn.h): the convolution calls mvibr makes, as plain loops in double
// over device memory, with the descriptor, algorithm and workspace checks the library documents.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cudnn.h"
#include "status_text.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
  bool set = false;
  size_t count() const { return size_t(n) * c * h * w; }
};
struct cudnnFilterStruct {
  int k = 0, c = 0, h = 0, w = 0;
  bool set = false;
  size_t count() const { return size_t(k) * c * h * w; }
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dilation_h = 1, dilation_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool set = false;
};

using mvibr::emulated::device_range;

size_t cudnnGetVersion() {
  return 0;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  static const std::pair<cudnnStatus_t, const char*> names[] = {
      MVIBR_STATUS_NAME(CUDNN_STATUS_SUCCESS),
      MVIBR_STATUS_NAME(CUDNN_STATUS_NOT_INITIALIZED),
      MVIBR_STATUS_NAME(CUDNN_STATUS_BAD_PARAM),
      MVIBR_STATUS_NAME(CUDNN_STATUS_NOT_SUPPORTED),
      MVIBR_STATUS_NAME(CUDNN_STATUS_EXECUTION_FAILED),
  };
  return mvibr::emulated::status_text(status, names, "an unknown cuDNN status");
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (d == nullptr || n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = {n, c, h, w, true};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (d == nullptr || k < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = {k, c, h, w, true};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w,
                                              int u, int v, int dilation_h, int dilation_w,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute_type) {
  if (d == nullptr || pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 ||
      dilation_w < 1 || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (compute_type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v;
  d->dilation_h = dilation_h, d->dilation_w = dilation_w, d->mode = mode, d->set = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}

namespace {

// The geometry of x (*) w under conv, checked; output P x Q.
struct Geometry {
  int n, c, h, w, k, r, s, p, q;
};

bool geometry(const cudnnConvolutionStruct* conv, const cudnnTensorStruct* x,
              const cudnnFilterStruct* w, Geometry* g) {
  if (!conv || !x || !w || !conv->set || !x->set || !w->set || x->c != w->c) return false;
  const int extent_h = (w->h - 1) * conv->dilation_h + 1;
  const int extent_w = (w->w - 1) * conv->dilation_w + 1;
  const int p = (x->h + 2 * conv->pad_h - extent_h) / conv->u + 1;
  const int q = (x->w + 2 * conv->pad_w - extent_w) / conv->v + 1;
  if (x->h + 2 * conv->pad_h < extent_h || x->w + 2 * conv->pad_w < extent_w) return false;
  *g = {x->n, x->c, x->h, x->w, w->k, w->h, w->w, p, q};
  return true;
}

bool output_matches(const Geometry& g, const cudnnTensorStruct* y) {
  return y && y->set && y->n == g.n && y->c == g.k && y->h == g.p && y->w == g.q;
}

// Calls visit(x index, w index, y index) for every product of the convolution.
template <typename Visit>
void for_each_product(const Geometry& g, const cudnnConvolutionStruct& conv, Visit visit) {
  for (int n = 0; n < g.n; ++n) {
    for (int k = 0; k < g.k; ++k) {
      for (int p = 0; p < g.p; ++p) {
        for (int q = 0; q < g.q; ++q) {
          const size_t y = ((size_t(n) * g.k + k) * g.p + p) * g.q + q;
          for (int c = 0; c < g.c; ++c) {
            for (int r = 0; r < g.r; ++r) {
              const int row = p * conv.u - conv.pad_h + r * conv.dilation_h;
              if (row < 0 || row >= g.h) continue;
              for (int s = 0; s < g.s; ++s) {
                const int column = q * conv.v - conv.pad_w + s * conv.dilation_w;
                if (column < 0 || column >= g.w) continue;
                // Convolution mode turns the filter round; cross-correlation does not.
                const int fr = conv.mode == CUDNN_CONVOLUTION ? g.r - 1 - r : r;
                const int fs = conv.mode == CUDNN_CONVOLUTION ? g.s - 1 - s : s;
                const size_t x = ((size_t(n) * g.c + c) * g.h + row) * g.w + column;
                const size_t w = ((size_t(k) * g.c + c) * g.r + fr) * g.s + fs;
                visit(x, w, y);
              }
            }
          }
        }
      }
    }
  }
}

// out = alpha * sums + beta * out, out not read when beta is 0.
void blend(const std::vector<double>& sums, const void* alpha, const void* beta, float* out) {
  const double a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  for (size_t i = 0; i < sums.size(); ++i) {
    out[i] = float(a * sums[i] + (b == 0.0 ? 0.0 : b * double(out[i])));
  }
}

// What each algorithm asks of the workspace: the GEMM-like ones an im2col buffer.
size_t im2col_bytes(const Geometry& g) {
  return size_t(g.c) * g.r * g.s * g.p * g.q * sizeof(float);
}

size_t forward_workspace(const Geometry& g, cudnnConvolutionFwdAlgo_t algo) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return size_t(g.p) * g.q * 8;
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return im2col_bytes(g);
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return im2col_bytes(g) * 4;
    default:
      return 0;
  }
}
size_t data_workspace(const Geometry&, cudnnConvolutionBwdDataAlgo_t) {
  return 0;
}
size_t filter_workspace(const Geometry& g, cudnnConvolutionBwdFilterAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ? size_t(g.c) * g.r * g.s * sizeof(float) : 0;
}

// The rankings: an FFT or Winograd algorithm first (fast, and not what mvibr may pick), a
// tensor-op result, then the GEMM-like ones; DIRECT is listed as not supported.
template <typename Perf, typename Algo>
void rank(const std::vector<std::tuple<Algo, bool, cudnnMathType_t, cudnnStatus_t>>& list,
          size_t (*workspace)(const Geometry&, Algo), const Geometry& g, int requested,
          int* returned, Perf* results) {
  int count = 0;
  for (const auto& [algo, deterministic, math, status] : list) {
    if (count == requested) break;
    results[count] = {algo,
                      status,
                      0.1f * float(count + 1),
                      workspace(g, algo),
                      deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC,
                      math,
                      {}};
    ++count;
  }
  *returned = count;
}

cudnnStatus_t needs_workspace(size_t needed, const void* workspace, size_t bytes) {
  if (needed == 0) return CUDNN_STATUS_SUCCESS;
  return bytes >= needed && device_range(workspace, needed) ? CUDNN_STATUS_SUCCESS
                                                            : CUDNN_STATUS_BAD_PARAM;
}

// A convolution's operands, x (*) w = y: descriptors and device memory.
struct Operands {
  const cudnnTensorStruct* x;
  const cudnnFilterStruct* w;
  const cudnnTensorStruct* y;
  const void* x_data;
  const void* w_data;
  const void* y_data;
};
enum Written { kX, kW, kY };  // the operand a convolution call writes

// What the three convolution calls share: the operands checked and in device memory, then
// `supported` (else CUDNN_STATUS_NOT_SUPPORTED), the workspace workspace_of(geometry) asks for,
// and out (the written operand) = alpha * sums + beta * out, each sum over the products of the
// other two operands' elements, in double.
template <typename WorkspaceOf>
cudnnStatus_t convolve(cudnnHandle_t handle, const cudnnConvolutionStruct* conv, const Operands& o,
                       Written written, void* out, bool supported, WorkspaceOf workspace_of,
                       void* workspace, size_t workspace_bytes, const void* alpha,
                       const void* beta) {
  Geometry g;
  if (!handle || !geometry(conv, o.x, o.w, &g) || !output_matches(g, o.y) ||
      !device_range(o.x_data, 4 * o.x->count()) || !device_range(o.w_data, 4 * o.w->count()) ||
      !device_range(o.y_data, 4 * o.y->count())) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!supported) return CUDNN_STATUS_NOT_SUPPORTED;
  if (needs_workspace(workspace_of(g), workspace, workspace_bytes) != CUDNN_STATUS_SUCCESS) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const float* data[] = {static_cast<const float*>(o.x_data), static_cast<const float*>(o.w_data),
                         static_cast<const float*>(o.y_data)};
  const size_t counts[] = {o.x->count(), o.w->count(), o.y->count()};
  const int a = written == kX ? kW : kX, b = written == kY ? kW : kY;
  std::vector<double> sums(counts[written], 0.0);
  for_each_product(g, *conv, [&](size_t xi, size_t wi, size_t yi) {
    const size_t at[] = {xi, wi, yi};
    sums[at[written]] += double(data[a][at[a]]) * double(data[b][at[b]]);
  });
  blend(sums, alpha, beta, static_cast<float*>(out));
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t conv,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int* n, int* c,
                                                    int* h, int* width) {
  Geometry g;
  if (!geometry(conv, x, w, &g)) return CUDNN_STATUS_BAD_PARAM;
  *n = g.n, *c = g.k, *h = g.p, *width = g.q;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, int requested, int* returned,
    cudnnConvolutionFwdAlgoPerf_t* results) {
  Geometry g;
  if (!handle || !geometry(conv, x, w, &g) || !output_matches(g, y) || requested < 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  using Entry = std::tuple<cudnnConvolutionFwdAlgo_t, bool, cudnnMathType_t, cudnnStatus_t>;
  rank<cudnnConvolutionFwdAlgoPerf_t>(
      std::vector<Entry>{
          {CUDNN_CONVOLUTION_FWD_ALGO_FFT, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, CUDNN_TENSOR_OP_MATH,
           CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, CUDNN_FMA_MATH,
           CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, true, CUDNN_FMA_MATH, CUDNN_STATUS_NOT_SUPPORTED},
      },
      forward_workspace, g, requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, cudnnTensorDescriptor_t x,
                                                   cudnnFilterDescriptor_t w,
                                                   cudnnConvolutionDescriptor_t conv,
                                                   cudnnTensorDescriptor_t y, int requested,
                                                   int* returned,
                                                   cudnnConvolutionFwdAlgoPerf_t* results) {
  return cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, requested, returned,
                                                results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int requested, int* returned,
    cudnnConvolutionBwdDataAlgoPerf_t* results) {
  Geometry g;
  if (!handle || !geometry(conv, dx, w, &g) || !output_matches(g, dy) || requested < 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  using Entry = std::tuple<cudnnConvolutionBwdDataAlgo_t, bool, cudnnMathType_t, cudnnStatus_t>;
  rank<cudnnConvolutionBwdDataAlgoPerf_t>(
      std::vector<Entry>{
          {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, true, CUDNN_FMA_MATH,
           CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
      },
      data_workspace, g, requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int requested, int* returned,
    cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, dy, conv, dx, requested, returned,
                                                     results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  Geometry g;
  if (!handle || !geometry(conv, x, dw, &g) || !output_matches(g, dy) || requested < 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  using Entry = std::tuple<cudnnConvolutionBwdFilterAlgo_t, bool, cudnnMathType_t, cudnnStatus_t>;
  rank<cudnnConvolutionBwdFilterAlgoPerf_t>(
      std::vector<Entry>{
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
          {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false, CUDNN_FMA_MATH, CUDNN_STATUS_SUCCESS},
      },
      filter_workspace, g, requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x, dy, conv, dw, requested, returned,
                                                       results);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w,
                                                      cudnnConvolutionDescriptor_t conv,
                                                      cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  Geometry g;
  if (!geometry(conv, x, w, &g) || !output_matches(g, y)) return CUDNN_STATUS_BAD_PARAM;
  if (algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = forward_workspace(g, algo);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, cudnnFilterDescriptor_t w,
                                                           cudnnTensorDescriptor_t dy,
                                                           cudnnConvolutionDescriptor_t conv,
                                                           cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo,
                                                           size_t* bytes) {
  Geometry g;
  if (!geometry(conv, dx, w, &g) || !output_matches(g, dy)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = data_workspace(g, algo);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  Geometry g;
  if (!geometry(conv, x, dw, &g) || !output_matches(g, dy)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = filter_workspace(g, algo);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      cudnnTensorDescriptor_t x_desc, const void* x,
                                      cudnnFilterDescriptor_t w_desc, const void* w,
                                      cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      cudnnTensorDescriptor_t y_desc, void* y) {
  return convolve(
      handle, conv, {x_desc, w_desc, y_desc, x, w, y}, kY, y,
      algo != CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
      [algo](const Geometry& g) { return forward_workspace(g, algo); }, workspace, workspace_bytes,
      alpha, beta);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           cudnnFilterDescriptor_t w_desc, const void* w,
                                           cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           cudnnTensorDescriptor_t dx_desc, void* dx) {
  return convolve(
      handle, conv, {dx_desc, w_desc, dy_desc, dx, w, dy}, kX, dx, true,
      [algo](const Geometry& g) { return data_workspace(g, algo); }, workspace, workspace_bytes,
      alpha, beta);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             cudnnTensorDescriptor_t x_desc, const void* x,
                                             cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             cudnnFilterDescriptor_t dw_desc, void* dw) {
  return convolve(
      handle, conv, {x_desc, dw_desc, dy_desc, x, dw, dy}, kW, dw, true,
      [algo](const Geometry& g) { return filter_workspace(g, algo); }, workspace, workspace_bytes,
      alpha, beta);
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void* alpha,
                                           cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const void* beta, cudnnTensorDescriptor_t db_desc,
                                           void* db) {
  if (!handle || !dy_desc || !db_desc || !dy_desc->set || !db_desc->set || db_desc->n != 1 ||
      db_desc->c != dy_desc->c || db_desc->h != 1 || db_desc->w != 1 ||
      !device_range(dy, 4 * dy_desc->count()) || !device_range(db, 4 * db_desc->count())) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const float* dys = static_cast<const float*>(dy);
  const size_t plane = size_t(dy_desc->h) * dy_desc->w;
  std::vector<double> sums(size_t(dy_desc->c), 0.0);
  for (int n = 0; n < dy_desc->n; ++n) {
    for (int c = 0; c < dy_desc->c; ++c) {
      const float* start = dys + (size_t(n) * dy_desc->c + c) * plane;
      for (size_t i = 0; i < plane; ++i) sums[size_t(c)] += start[i];
    }
  }
  blend(sums, alpha, beta, static_cast<float*>(db));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha,
                             cudnnTensorDescriptor_t a_desc, const void* a, const void* beta,
                             cudnnTensorDescriptor_t c_desc, void* c) {
  if (!handle || !a_desc || !c_desc || !a_desc->set || !c_desc->set) return CUDNN_STATUS_BAD_PARAM;
  const int ad[4] = {a_desc->n, a_desc->c, a_desc->h, a_desc->w};
  const int cd[4] = {c_desc->n, c_desc->c, c_desc->h, c_desc->w};
  for (int i = 0; i < 4; ++i) {
    if (ad[i] != 1 && ad[i] != cd[i]) return CUDNN_STATUS_BAD_PARAM;  // broadcast 1s only
  }
  if (!device_range(a, 4 * a_desc->count()) || !device_range(c, 4 * c_desc->count())) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const float* as = static_cast<const float*>(a);
  std::vector<double> values(c_desc->count());
  size_t i = 0;
  for (int n = 0; n < cd[0]; ++n) {
    for (int ch = 0; ch < cd[1]; ++ch) {
      for (int h = 0; h < cd[2]; ++h) {
        for (int w = 0; w < cd[3]; ++w, ++i) {
          const size_t ai = ((size_t(ad[0] == 1 ? 0 : n) * ad[1] + (ad[1] == 1 ? 0 : ch)) * ad[2] +
                             (ad[2] == 1 ? 0 : h)) *
                                ad[3] +
                            (ad[3] == 1 ? 0 : w);
          values[i] = as[ai];
        }
      }
    }
  }
  blend(values, alpha, beta, static_cast<float*>(c));
  return CUDNN_STATUS_SUCCESS;
}
