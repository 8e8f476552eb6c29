// Convolutions on cuDNN's legacy convolution API (see nn/cuda_layers.h): forward, backward data
// and backward filter of an unpadded, strided cross-correlation (what PyTorch and oneDNN call a
// convolution) on NCHW float maps with OIHW weights, the CPU layer's layouts, so nothing is
// reordered. The bias is cudnnAddTensor after the forward, its gradient
// cudnnConvolutionBackwardBias; gradients accumulate through beta = 1. Reflect padding (which
// cuDNN lacks) pads the input into the Context's padded_maps and folds the input gradient back
// from there (kernels/reflect_pad.cu); an upsampling convolution (ConvShape::upsample) upsamples
// x into its upsampled_maps first, and takes the gradient back down from there
// (kernels/upsample.cu).
//
// Each shape gets its descriptors once (a ConvPlan cached in the Context), and each pass its
// algorithm on first use: cuDNN's ranking (cudnnGet*_v7) or measured times (cudnnFind*), then
// the first algorithm that (1) cuDNN reports as runnable, (2) computes in fp32 (the descriptor
// says CUDNN_FMA_MATH, and tensor-op results are skipped: CUDNN_DEFAULT_MATH would allow TF32 on
// sm_80+), (3) sums like a GEMM (not FFT or Winograd, whose transforms cost digits), (4) is
// deterministic unless the Context allows otherwise, and (5) fits the workspace limit. If the
// ranking offers none, the accurate algorithms are tried in a fixed order before giving up.
#include <string>
#include <vector>

#include "../src/cuda/nn_context.h"
#include "common.h"

namespace mvibr::nn::cuda {

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool have_forward = false, have_data = false, have_filter = false;
  cudnnConvolutionFwdAlgo_t forward_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t forward_bytes = 0, data_bytes = 0, filter_bytes = 0;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

namespace {

std::string describe(const ConvShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.in_channels) + "x" +
         std::to_string(s.in_height) + "x" + std::to_string(s.in_width) + " padded by " +
         std::to_string(s.pad) + " -> " + std::to_string(s.out_channels) + " channels, " +
         std::to_string(s.kernel) + "x" + std::to_string(s.kernel) + " stride " +
         std::to_string(s.stride);
}

// The CPU layer's checks, then cuDNN's own limits.
void check_shape(const ConvShape& s) {
  check_conv_shape(s, "conv2d on the GPU");
  if (s.layout != MapLayout::kPlanar) {
    throw InvalidArgument("conv2d on the GPU: maps must be planar (NCHW), not channels last");
  }
  // cuDNN's 4-D descriptors count elements in int.
  constexpr size_t kLimit = size_t(1) << 31;
  const size_t weights = size_t(s.out_channels) * s.in_channels * s.kernel * s.kernel;
  if (s.padded_input_size() >= kLimit || s.output_size() >= kLimit || weights >= kLimit) {
    throw InvalidArgument("conv2d on the GPU: tensors of 2^31 elements or more (" + describe(s) +
                          ")");
  }
}

bool fp32_math(cudnnMathType_t math) {
  return math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The algorithms that sum products like a GEMM, in the order tried when the ranking offers none
// of them; `deterministic` marks those without atomics.
struct Candidate {
  int algo;
  bool deterministic;
};
const Candidate kForwardCandidates[] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true},
    {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true},
    {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, true},
};
const Candidate kDataCandidates[] = {
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true},
    {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false},
};
const Candidate kFilterCandidates[] = {
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false},
    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false},
};

template <size_t N>
bool is_candidate(const Candidate (&candidates)[N], int algo) {
  for (const Candidate& c : candidates) {
    if (c.algo == algo) return true;
  }
  return false;
}

// Picks the algorithm of one pass from cuDNN's ranked results (see the file comment).
// `workspace_size(algo, &bytes)` asks cuDNN what the algorithm needs with this descriptor's
// math type; a failure there means it cannot run.
template <typename Algo, typename Perf, size_t N, typename WorkspaceSize>
Algo choose(const char* pass, const ConvShape& shape, const Context::Impl& c,
            const std::vector<Perf>& ranked, const Candidate (&candidates)[N],
            WorkspaceSize workspace_size, size_t* bytes) {
  for (const Perf& p : ranked) {
    if (p.status != CUDNN_STATUS_SUCCESS || !fp32_math(p.mathType)) continue;
    if (!is_candidate(candidates, int(p.algo))) continue;
    if (c.deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    size_t needed = 0;
    if (workspace_size(p.algo, &needed) != CUDNN_STATUS_SUCCESS) continue;
    if (needed > c.workspace_limit) continue;
    *bytes = needed;
    return p.algo;
  }
  for (const Candidate& candidate : candidates) {
    if (c.deterministic && !candidate.deterministic) continue;
    const Algo algo = static_cast<Algo>(candidate.algo);
    size_t needed = 0;
    if (workspace_size(algo, &needed) != CUDNN_STATUS_SUCCESS) continue;
    if (needed > c.workspace_limit) continue;
    *bytes = needed;
    return algo;
  }
  throw RuntimeFailure(std::string("cuDNN offers no fp32 GEMM-like ") +
                       (c.deterministic ? "deterministic " : "") + pass + " algorithm within " +
                       std::to_string(c.workspace_limit >> 20) + " MiB of workspace for " +
                       describe(shape));
}

// The descriptors are of the padded input: cuDNN runs unpadded on it.
ConvPlan& plan_for(Context::Impl& c, const ConvShape& s) {
  check_shape(s);
  const ConvKey key{s.batch,    s.in_channels, s.out_channels, s.in_height,
                    s.in_width, s.kernel,      s.stride,       s.pad};
  std::shared_ptr<ConvPlan>& entry = c.conv_plans[key];
  if (entry) return *entry;
  auto plan = std::make_shared<ConvPlan>();
  MVIBR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  MVIBR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  MVIBR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->bias));
  MVIBR_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  MVIBR_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  MVIBR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               s.batch, s.in_channels, s.padded_height(),
                                               s.padded_width()));
  MVIBR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                               s.batch, s.out_channels, s.out_height(),
                                               s.out_width()));
  MVIBR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                               s.out_channels, 1, 1));
  MVIBR_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                               s.out_channels, s.in_channels, s.kernel, s.kernel));
  MVIBR_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, 0, 0, s.stride, s.stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  MVIBR_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, CUDNN_FMA_MATH));
  // cuDNN's idea of the output must be the CPU layer's.
  int n = 0, channels = 0, height = 0, width = 0;
  MVIBR_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n,
                                                          &channels, &height, &width));
  if (n != s.batch || channels != s.out_channels || height != s.out_height() ||
      width != s.out_width()) {
    throw RuntimeFailure("cuDNN's output of " + describe(s) + " is " + std::to_string(height) +
                         "x" + std::to_string(width) + ", not " + std::to_string(s.out_height()) +
                         "x" + std::to_string(s.out_width()));
  }
  entry = plan;
  return *entry;
}

void choose_forward(Context::Impl& c, const ConvShape& s, ConvPlan& p) {
  int max_count = 0;
  MVIBR_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(size_t(max_count > 0 ? max_count : 1));
  int returned = 0;
  if (c.conv_search == ConvSearch::kBenchmark) {
    MVIBR_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(
        c.cudnn, p.x, p.w, p.conv, p.y, int(ranked.size()), &returned, ranked.data()));
  } else {
    MVIBR_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        c.cudnn, p.x, p.w, p.conv, p.y, int(ranked.size()), &returned, ranked.data()));
  }
  ranked.resize(size_t(returned));
  p.forward_algo = choose<cudnnConvolutionFwdAlgo_t>(
      "forward", s, c, ranked, kForwardCandidates,
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, p.x, p.w, p.conv, p.y, algo, bytes);
      },
      &p.forward_bytes);
  p.have_forward = true;
}

void choose_data(Context::Impl& c, const ConvShape& s, ConvPlan& p) {
  int max_count = 0;
  MVIBR_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(size_t(max_count > 0 ? max_count : 1));
  int returned = 0;
  if (c.conv_search == ConvSearch::kBenchmark) {
    MVIBR_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
        c.cudnn, p.w, p.y, p.conv, p.x, int(ranked.size()), &returned, ranked.data()));
  } else {
    MVIBR_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        c.cudnn, p.w, p.y, p.conv, p.x, int(ranked.size()), &returned, ranked.data()));
  }
  ranked.resize(size_t(returned));
  p.data_algo = choose<cudnnConvolutionBwdDataAlgo_t>(
      "backward data", s, c, ranked, kDataCandidates,
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, p.w, p.y, p.conv, p.x, algo,
                                                            bytes);
      },
      &p.data_bytes);
  p.have_data = true;
}

void choose_filter(Context::Impl& c, const ConvShape& s, ConvPlan& p) {
  int max_count = 0;
  MVIBR_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(size_t(max_count > 0 ? max_count : 1));
  int returned = 0;
  if (c.conv_search == ConvSearch::kBenchmark) {
    MVIBR_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
        c.cudnn, p.x, p.y, p.conv, p.w, int(ranked.size()), &returned, ranked.data()));
  } else {
    MVIBR_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        c.cudnn, p.x, p.y, p.conv, p.w, int(ranked.size()), &returned, ranked.data()));
  }
  ranked.resize(size_t(returned));
  p.filter_algo = choose<cudnnConvolutionBwdFilterAlgo_t>(
      "backward filter", s, c, ranked, kFilterCandidates,
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, p.x, p.y, p.conv, p.w, algo,
                                                              bytes);
      },
      &p.filter_bytes);
  p.have_filter = true;
}

// x as cuDNN reads it: itself, or upsampled into the Context's upsampled_maps and reflect-padded
// into its padded_maps.
const float* padded_input(Context::Impl& c, const ConvShape& s, const float* x) {
  const int planes = s.batch * s.in_channels;
  if (s.upsample) {
    float* upsampled = c.upsampled_maps(size_t(planes) * s.in_height * s.in_width);
    upsample2x_forward(planes, s.source_height(), s.source_width(), x, upsampled, c.stream);
    x = upsampled;
  }
  if (s.pad == 0) return x;
  float* padded = c.padded_maps(s.padded_input_size());
  reflect_pad_forward(planes, s.in_height, s.in_width, s.pad, x, padded, c.stream);
  return padded;
}

}  // namespace

void conv2d_forward(Context& context, const ConvShape& shape, const float* x, const float* weight,
                    const float* bias, float* y) {
  Context::Impl& c = context.impl();
  ConvPlan& p = plan_for(c, shape);
  if (!p.have_forward) choose_forward(c, shape, p);
  const float* input = padded_input(c, shape, x);
  void* workspace = c.workspace(p.forward_bytes);
  const float one = 1.0f, zero = 0.0f;
  MVIBR_CUDNN_CHECK(cudnnConvolutionForward(c.cudnn, &one, p.x, input, p.w, weight, p.conv,
                                            p.forward_algo, workspace, p.forward_bytes, &zero, p.y,
                                            y));
  if (bias) MVIBR_CUDNN_CHECK(cudnnAddTensor(c.cudnn, &one, p.bias, bias, &one, p.y, y));
}

namespace {

// Unpadded, cuDNN adds into grad_x (beta = 1) or overwrites it (beta = 0); padded, it writes the
// padded gradient, which is folded back onto grad_x (zeroed first to overwrite). Upsampling, the
// gradient of the upsampled input is made (overwritten) in upsampled_maps and taken down to
// grad_x from there.
void backward_data_pass(Context::Impl& c, const ConvShape& shape, const float* weight,
                        const float* grad_y, float* grad_x, bool overwrite) {
  ConvPlan& p = plan_for(c, shape);
  if (!p.have_data) choose_data(c, shape, p);
  const int planes = shape.batch * shape.in_channels;
  const size_t upsampled_size = size_t(planes) * shape.in_height * shape.in_width;
  float* grad_upsampled = shape.upsample ? c.upsampled_maps(upsampled_size) : grad_x;
  const bool overwrite_upsampled = overwrite || shape.upsample;
  float* grad_input = shape.pad == 0 ? grad_upsampled : c.padded_maps(shape.padded_input_size());
  void* workspace = c.workspace(p.data_bytes);
  const float one = 1.0f, zero = 0.0f;
  const bool add = shape.pad == 0 && !overwrite_upsampled;
  MVIBR_CUDNN_CHECK(cudnnConvolutionBackwardData(c.cudnn, &one, p.w, weight, p.y, grad_y, p.conv,
                                                 p.data_algo, workspace, p.data_bytes,
                                                 add ? &one : &zero, p.x, grad_input));
  if (shape.pad > 0) {
    if (overwrite_upsampled) {
      MVIBR_CUDA_CHECK(
          cudaMemsetAsync(grad_upsampled, 0, upsampled_size * sizeof(float), c.stream));
    }
    reflect_pad_backward(planes, shape.in_height, shape.in_width, shape.pad, grad_input,
                         grad_upsampled, c.stream);
  }
  if (shape.upsample) {
    upsample2x_backward(planes, shape.source_height(), shape.source_width(), grad_upsampled, grad_x,
                        c.stream, !overwrite);
  }
}

void backward_filter_pass(Context::Impl& c, const ConvShape& shape, const float* x,
                          const float* grad_y, float* grad_weight, float* grad_bias) {
  ConvPlan& p = plan_for(c, shape);
  if (!p.have_filter) choose_filter(c, shape, p);
  const float* input = padded_input(c, shape, x);
  void* workspace = c.workspace(p.filter_bytes);
  const float one = 1.0f;
  MVIBR_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.cudnn, &one, p.x, input, p.y, grad_y, p.conv,
                                                   p.filter_algo, workspace, p.filter_bytes, &one,
                                                   p.w, grad_weight));
  if (grad_bias) {
    MVIBR_CUDNN_CHECK(
        cudnnConvolutionBackwardBias(c.cudnn, &one, p.y, grad_y, &one, p.bias, grad_bias));
  }
}

}  // namespace

void conv2d_backward(Context& context, const ConvShape& shape, const float* x, const float* weight,
                     const float* grad_y, const ConvGradients& grads) {
  if (grads.bias && !grads.weight) {
    throw InvalidArgument(
        "conv2d backward on the GPU: a bias gradient is taken with the weight "
        "gradient");
  }
  Context::Impl& c = context.impl();
  if (grads.weight) backward_filter_pass(c, shape, x, grad_y, grads.weight, grads.bias);
  if (grads.x) backward_data_pass(c, shape, weight, grad_y, grads.x, grads.overwrite_x);
}

}  // namespace mvibr::nn::cuda
