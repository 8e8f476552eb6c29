// Convolution forward, backward data and backward weights through oneDNN (see conv_layers.h).
// oneDNN rather than a hand-rolled im2col + sgemm: it picks its best implementation per shape
// and ISA for all three passes. The callers hold plain NCHW or NHWC maps (ConvShape::layout) and
// OIHW weights.
// - Reflect padding: the input is padded into scratch (reflect_pad.cpp) and the primitives run
//   unpadded on it; the input gradient comes out padded and is folded back. An upsampled input
//   (ConvShape::upsample) is upsampled in the same pass, and its gradient taken back through the
//   taps in the fold (upsample.cpp).
// - The 3x3 and 7x7 convolutions ask for the layouts the best kernel wants and are reordered into
//   and out of them around each call. On NCHW oneDNN can only run its im2col + JIT sgemm
//   ("gemm:jit"); its direct kernels ("jit:avx2", "brgconv") are 1.3-4x faster with the reorders
//   counted (bench/conv_bench). On NHWC they mostly take the maps as they are.
// - 1x1 convolutions keep the callers' maps: on NCHW a GEMM without im2col, whose few FLOPs per
//   byte do not pay for reorders (up to 2x slower blocked); on NHWC oneDNN's 1x1 kernels.
// - ConvAlgorithm::kWinograd asks for oneDNN's Winograd on 3x3 stride-1 shapes and falls back to
//   direct where it has none (it has none in bf16).
// - Operands::kBf16 asks for bf16 inputs and weights with fp32 outputs, and oneDNN runs its
//   AMX or AVX512-BF16 kernels. The input is rounded as it is padded (one pass where a pad and
//   oneDNN's rounding reorder took two), the output gradient once for both backward passes (or
//   by the layer that makes it), the weights by the reorders into the chosen layouts.
// - Creating a primitive costs far more than running a small one, so each shape's are built
//   once and cached.
#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mvibr/core/error.h"
#include "mvibr/nn/conv_layers.h"
#include "vector_math.h"

namespace mvibr::nn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

constexpr const char* kNoBf16 =
    "precision = bf16: oneDNN has no bf16 convolution for this CPU (it needs AVX-512); set "
    "precision = fp32";

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The primitives of one shape; the backward ones are built on first use (inference never needs
// them). `plain_*` are the callers' layouts, plain_src at the padded size.
struct ConvPrimitives {
  memory::desc plain_src, plain_weights, bias, plain_dst;
  dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;  // all three passes run it
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data::primitive_desc backward_data_pd;
  std::unique_ptr<dnnl::convolution_backward_data> backward_data;
  dnnl::convolution_backward_weights::primitive_desc backward_weights_pd;
  std::unique_ptr<dnnl::convolution_backward_weights> backward_weights;
};

using ConvKey = std::tuple<int, int, int, int, int, int, int, int, bool, ConvAlgorithm,
                           Operands, MapLayout>;

memory::dims dims(int a, int b, int c, int d) {
  return {memory::dim(a), memory::dim(b), memory::dim(c), memory::dim(d)};
}

Tag maps_tag(const ConvShape& s) {
  return s.layout == MapLayout::kPlanar ? Tag::nchw : Tag::nhwc;
}

enum class Operand { kMaps, kWeights };

// The descriptor a primitive is asked for: the same shape, its layout left to oneDNN
// (format_tag::any) for the convolutions that run blocked (see the top of the file), and for
// the weights of any convolution on NHWC maps: there oneDNN has only its reference kernel for
// OIHW weights (100x slower).
memory::desc layout(const ConvShape& s, const memory::desc& plain, Operand what) {
  const bool blocked =
      s.kernel > 1 || (what == Operand::kWeights && s.layout == MapLayout::kChannelsLast);
  return blocked ? memory::desc(plain.dims(), plain.data_type(), Tag::any) : plain;
}

bool bf16_operands(const ConvShape& s) {
  return s.operands == Operands::kBf16 && s.kernel > 1;
}

// The descriptor of a pass's multiplied operand (input, weights, output gradient): bf16 where
// the shape asks for it and is not 1x1 (Operands), else as layout().
memory::desc operand(const ConvShape& s, const memory::desc& plain, Operand what) {
  if (bf16_operands(s)) {
    return memory::desc(plain.dims(), memory::data_type::bf16, Tag::any);
  }
  return layout(s, plain, what);
}

ConvPrimitives& primitives(const ConvShape& s, bool with_bias) {
  static std::mutex mutex;
  static std::map<ConvKey, std::unique_ptr<ConvPrimitives>> cache;
  check_conv_shape(s, "conv2d");
  const ConvKey key{s.batch,  s.in_channels, s.out_channels, s.in_height, s.in_width, s.kernel,
                    s.stride, s.pad,         with_bias,      s.algorithm, s.operands, s.layout};
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ConvPrimitives>& entry = cache[key];
  if (entry) return *entry;
  auto p = std::make_unique<ConvPrimitives>();
  const auto f32 = memory::data_type::f32;
  const Tag maps = maps_tag(s);
  p->plain_src =
      memory::desc(dims(s.batch, s.in_channels, s.padded_height(), s.padded_width()), f32, maps);
  p->plain_weights =
      memory::desc(dims(s.out_channels, s.in_channels, s.kernel, s.kernel), f32, Tag::oihw);
  p->bias = with_bias ? memory::desc({memory::dim(s.out_channels)}, f32, Tag::x) : memory::desc();
  p->plain_dst =
      memory::desc(dims(s.batch, s.out_channels, s.out_height(), s.out_width()), f32, maps);
  const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
  const auto forward_pd = [&](dnnl::algorithm algorithm) {
    const dnnl::convolution_forward::desc forward(
        dnnl::prop_kind::forward_training, algorithm, operand(s, p->plain_src, Operand::kMaps),
        operand(s, p->plain_weights, Operand::kWeights), p->bias,
        layout(s, p->plain_dst, Operand::kMaps), strides, no_padding, no_padding);
    return dnnl::convolution_forward::primitive_desc(forward, cpu_engine());
  };
  if (s.algorithm == ConvAlgorithm::kWinograd && s.kernel == 3 && s.stride == 1) {
    try {
      p->forward_pd = forward_pd(dnnl::algorithm::convolution_winograd);
      p->algorithm = dnnl::algorithm::convolution_winograd;
    } catch (const dnnl::error&) {
      // No Winograd kernel here (the CPU lacks AVX-512, or the shape): direct runs.
    }
  }
  if (p->algorithm == dnnl::algorithm::convolution_direct) {
    try {
      p->forward_pd = forward_pd(dnnl::algorithm::convolution_direct);
    } catch (const dnnl::error&) {
      if (s.operands != Operands::kBf16) throw;
      throw InvalidArgument(kNoBf16);
    }
  }
  p->forward = dnnl::convolution_forward(p->forward_pd);
  entry = std::move(p);
  return *entry;
}

// The primitive in `slot`, made by make() on first use.
template <typename Primitive, typename Make>
Primitive& made_once(std::unique_ptr<Primitive>& slot, Make make) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!slot) slot = make();
  return *slot;
}

dnnl::convolution_backward_data& backward_data(const ConvShape& s, ConvPrimitives& p) {
  return made_once(p.backward_data, [&] {
    const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
    const dnnl::convolution_backward_data::desc desc(
        p.algorithm, layout(s, p.plain_src, Operand::kMaps),
        operand(s, p.plain_weights, Operand::kWeights), operand(s, p.plain_dst, Operand::kMaps),
        strides, no_padding, no_padding);
    p.backward_data_pd =
        dnnl::convolution_backward_data::primitive_desc(desc, cpu_engine(), p.forward_pd);
    return std::make_unique<dnnl::convolution_backward_data>(p.backward_data_pd);
  });
}

dnnl::convolution_backward_weights& backward_weights(const ConvShape& s, ConvPrimitives& p) {
  return made_once(p.backward_weights, [&] {
    const memory::dims strides{s.stride, s.stride}, no_padding{0, 0};
    const dnnl::convolution_backward_weights::desc desc(
        p.algorithm, operand(s, p.plain_src, Operand::kMaps),
        layout(s, p.plain_weights, Operand::kWeights), p.bias,
        operand(s, p.plain_dst, Operand::kMaps), strides, no_padding, no_padding);
    p.backward_weights_pd =
        dnnl::convolution_backward_weights::primitive_desc(desc, cpu_engine(), p.forward_pd);
    return std::make_unique<dnnl::convolution_backward_weights>(p.backward_weights_pd);
  });
}

// Memory for the blocked copies, kept by each thread from call to call: a fresh allocation of
// a few MB is fresh pages, and faulting them in made the reorders into them 4x slower than the
// reorders back out.
class Scratch {
 public:
  void* bytes(size_t size) {
    if (size > capacity_) {
      const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
      data_.reset(std::aligned_alloc(kAlignment, rounded));
      if (!data_) throw std::bad_alloc();
      capacity_ = rounded;
    }
    return data_.get();
  }

 private:
  static constexpr size_t kAlignment = 64;  // a cache line: what oneDNN's kernels assume
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t capacity_ = 0;
};

// One pass's execution: its inputs reordered from the callers' layouts into the ones the
// primitive chose, its outputs reordered back after it ran. Where the layouts agree the callers'
// memory is used as it is.
class LayoutRun {
 public:
  // An input held in `plain` layout at `data`; oneDNN takes non-const handles but only reads.
  void input(int argument, const memory::desc& plain, const memory::desc& wanted,
             const void* data) {
    memory user(plain, cpu_engine(), const_cast<void*>(data));
    if (wanted == plain) {
      arguments_.emplace(argument, user);
      return;
    }
    memory blocked = scratch_memory(wanted);
    dnnl::reorder(user, blocked).execute(stream_, user, blocked);
    arguments_.emplace(argument, blocked);
  }

  // An output the primitive overwrites, to be left in `plain` layout at `data`.
  void output(int argument, const memory::desc& plain, const memory::desc& wanted, float* data) {
    memory user(plain, cpu_engine(), data);
    if (wanted == plain) {
      arguments_.emplace(argument, user);
      return;
    }
    memory blocked = scratch_memory(wanted);
    arguments_.emplace(argument, blocked);
    reorders_out_.emplace_back(blocked, user);
  }

  void execute(const dnnl::primitive& primitive) {
    primitive.execute(stream_, arguments_);
    for (auto& [from, to] : reorders_out_) dnnl::reorder(from, to).execute(stream_, from, to);
    stream_.wait();
  }

 private:
  // A pass has at most three blocked arguments (two inputs, one output).
  memory scratch_memory(const memory::desc& desc) {
    thread_local std::array<Scratch, 3> scratch;
    return memory(desc, cpu_engine(), scratch.at(scratch_used_++).bytes(desc.get_size()));
  }

  size_t scratch_used_ = 0;
  dnnl::stream stream_{cpu_engine()};
  std::unordered_map<int, memory> arguments_;
  std::vector<std::pair<memory, memory>> reorders_out_;
};

// Memory for the padded input or input gradient, kept by each thread (as LayoutRun's); a second
// buffer for the space-to-depth forms below, a third for the rounded output gradient.
Scratch& padded_scratch(int which = 0) {
  thread_local std::array<Scratch, 3> scratch;
  return scratch.at(size_t(which));
}

// The input as the primitives read it: x itself, or upsampled, reflect-padded and (with bf16
// operands) rounded into the thread's scratch, in one pass.
struct Source {
  memory::desc desc;
  const void* data;
};

memory::desc bf16_source_desc(const ConvShape& s, const ConvPrimitives& p) {
  return memory::desc(p.plain_src.dims(), memory::data_type::bf16, maps_tag(s));
}

// With bf16 operands, into `kept` when given (conv2d_kept_input_floats).
Source source(const ConvShape& s, const ConvPrimitives& p, const float* x, float* kept) {
  const bool round = bf16_operands(s);
  if (s.pad == 0 && !round && !s.upsample) return {p.plain_src, x};
  const auto [batch, channels] = channels_last_walk(s.batch, s.in_channels, s.layout);
  const int height = s.source_height(), width = s.source_width();
  const size_t count = p.plain_src.get_size() / sizeof(float);
  if (round) {
    auto* padded = static_cast<uint16_t*>(kept ? static_cast<void*>(kept)
                                               : padded_scratch().bytes(count * sizeof(uint16_t)));
    if (s.upsample) {
      upsample2x_pad_forward_bf16_channels_last(batch, height, width, channels, s.pad, x, padded);
    } else {
      reflect_pad_forward_bf16_channels_last(batch, height, width, channels, s.pad, x, padded);
    }
    return {bf16_source_desc(s, p), padded};
  }
  auto* padded = static_cast<float*>(padded_scratch().bytes(count * sizeof(float)));
  if (s.upsample) {
    upsample2x_pad_forward_channels_last(batch, height, width, channels, s.pad, x, padded);
  } else {
    reflect_pad_forward_channels_last(batch, height, width, channels, s.pad, x, padded);
  }
  return {p.plain_src, padded};
}

// The pose stem (7x7, stride 2, on the 3 colours) leaves oneDNN's AMX kernels, which reduce over
// many input channels, mostly idle. With bf16 operands on channels-last maps, a stride-2
// convolution on at most 4 channels runs as its 2x2 space-to-depth: a stride-1 convolution on 4x
// the channels whose kernel, ceil(k / 2) wide, is zero past k. Q(h, w, (2 dy + dx) C + c) =
// P(2h + dy, 2w + dx, c), P the padded input; Q's cells past P's edge meet only zero taps. The
// stem's forward and backward weights: 3.8 -> 2.5 ms (bench/conv_bench).
bool by_space_to_depth(const ConvShape& s) {
  return bf16_operands(s) && s.layout == MapLayout::kChannelsLast && s.stride == 2 &&
         s.in_channels <= 4 && s.kernel >= 3 && !s.upsample;  // Q's kernel above 1x1, so bf16 too
}

ConvShape space_to_depth_shape(const ConvShape& s) {
  ConvShape q = s;
  q.kernel = (s.kernel + 1) / 2;
  q.stride = 1;
  q.pad = 0;
  q.in_channels = 4 * s.in_channels;
  q.in_height = s.out_height() + q.kernel - 1;
  q.in_width = s.out_width() + q.kernel - 1;
  return q;
}

// The shape the primitives run: the space-to-depth form, or the shape itself.
ConvShape run_shape(const ConvShape& s) {
  check_conv_shape(s, "conv2d");
  return by_space_to_depth(s) ? space_to_depth_shape(s) : s;
}

// Calls move(q_at, p_at, pairs, tail) for each row (n, h, dy) of Q: `pairs` whole pixel pairs
// (2C values, dx = 0 and 1) at Q's q_at + 4C w and P's p_at + 2C w, then `tail` values (C of a
// last pixel alone at P's edge, or none) at pair w = pairs; the row's other pairs lie past P.
template <typename Move>
void for_each_q_row(const ConvShape& s, const ConvShape& q, Move move) {
  const size_t c = size_t(s.in_channels), hp = size_t(s.padded_height());
  const size_t wp = size_t(s.padded_width()), hq = size_t(q.in_height), wq = size_t(q.in_width);
  const size_t pairs = std::min(wq, wp / 2), tail = pairs < wq && wp % 2 ? c : 0;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < s.batch; ++n) {
    for (size_t h = 0; h < hq; ++h) {
      for (size_t dy = 0; dy < 2; ++dy) {
        const size_t row = 2 * h + dy;
        const size_t q_at = ((size_t(n) * hq + h) * wq * 4 + 2 * dy) * c;
        if (row < hp) {
          move(q_at, (size_t(n) * hp + row) * wp * c, pairs, tail);
        } else {
          move(q_at, 0, 0, 0);
        }
      }
    }
  }
}

// `count` runs of kRun values from `from` (runs `from_stride` apart) to `to` (`to_stride`): a
// fixed-size copy each, which compiles to a few moves.
template <size_t kRun, typename T>
void copy_runs(size_t count, const T* from, size_t from_stride, T* to, size_t to_stride) {
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(to + i * to_stride, from + i * from_stride, kRun * sizeof(T));
  }
}

// f(std::integral_constant<size_t, C>) for the space-to-depth forms' C <= 4 channels
// (by_space_to_depth): their copies and loops of fixed size.
template <typename F>
void with_channels(int c, F f) {
  switch (c) {
    case 1:
      return f(std::integral_constant<size_t, 1>());
    case 2:
      return f(std::integral_constant<size_t, 2>());
    case 3:
      return f(std::integral_constant<size_t, 3>());
    default:
      return f(std::integral_constant<size_t, 4>());
  }
}

// The input's index that Q's 2 n cells along an axis copy (-1: past P's edge, zero).
std::vector<int> space_to_depth_sources(int n, int pad, int padded, int input) {
  std::vector<int> source(2 * size_t(n), -1);
  for (int i = 0; i < std::min(2 * n, padded); ++i) {
    source[size_t(i)] = reflect_pad_source(i, pad, input);
  }
  return source;
}

// Q from x in one pass: padded by reflection, rounded to bf16 (their bits), rearranged. Each of
// Q's rows (h, dy) is padded row 2h + dy: it is rounded whole into a row of P (vectorised, in
// cache), whose pixel pairs are then moved to Q's cells as fixed-size copies of C channels.
template <size_t C>
void space_to_depth_bf16(const ConvShape& s, const ConvShape& q, const float* x, uint16_t* out) {
  constexpr size_t c = C;
  const size_t hq = size_t(q.in_height), wq = size_t(q.in_width), wp = size_t(s.padded_width());
  const size_t pad = size_t(s.pad), width = size_t(s.in_width);
  const size_t pairs = std::min(wq, wp / 2), tail = pairs < wq && wp % 2 ? c : 0;
  const std::vector<int> rows =
      space_to_depth_sources(q.in_height, s.pad, s.padded_height(), s.in_height);
  const std::vector<int> columns = space_to_depth_sources(q.in_width, s.pad, int(wp), s.in_width);
  const size_t in_row = width * c, in_image = size_t(s.in_height) * in_row;
#pragma omp parallel
  {
    std::vector<uint16_t> padded_row(2 * pairs * c + tail);
#pragma omp for schedule(static)
    for (int n = 0; n < s.batch; ++n) {
      for (size_t h = 0; h < hq; ++h) {
        for (size_t dy = 0; dy < 2; ++dy) {
          uint16_t* q_row = out + ((size_t(n) * hq + h) * wq * 4 + 2 * dy) * c;
          const int row = rows[2 * h + dy];
          size_t done = 0;  // the pairs moved
          if (row >= 0) {
            const float* from = x + size_t(n) * in_image + size_t(row) * in_row;
            uint16_t* p = padded_row.data();
            for (size_t j = 0; j < padded_row.size() / c; ++j) {
              if (j == pad) {  // the interior, one run
                const size_t run = std::min(width, padded_row.size() / c - pad) * c;
#pragma omp simd
                for (size_t k = 0; k < run; ++k) p[pad * c + k] = bf16_bits(from[k]);
                j += run / c - 1;
                continue;
              }
              for (size_t k = 0; k < c; ++k) {
                p[j * c + k] = bf16_bits(from[size_t(columns[j]) * c + k]);
              }
            }
            copy_runs<2 * C>(pairs, p, 2 * c, q_row, 4 * c);
            for (size_t k = 0; k < tail; ++k) q_row[pairs * 4 * c + k] = p[pairs * 2 * c + k];
            done = pairs;
          }
          for (size_t w = done; w < wq; ++w) {
            const size_t first = w == done && row >= 0 ? tail : 0;
            std::fill(q_row + w * 4 * c + first, q_row + w * 4 * c + 2 * c, uint16_t(0));
          }
        }
      }
    }
  }
}

// P's gradient from Q's; Q's cells past P's edge are dropped (every cell of P is in Q).
void depth_to_space(const ConvShape& s, const ConvShape& q, const float* grad_q, float* grad_p) {
  with_channels(s.in_channels, [&](auto channels) {
    constexpr size_t c = decltype(channels)::value;
    for_each_q_row(s, q, [&](size_t q_at, size_t p_at, size_t pairs, size_t tail) {
      copy_runs<2 * c>(pairs, grad_q + q_at, 4 * c, grad_p + p_at, 2 * c);
      for (size_t k = 0; k < tail; ++k) {
        grad_p[p_at + pairs * 2 * c + k] = grad_q[q_at + pairs * 4 * c + k];
      }
    });
  });
}

// Q's weights [O, 4C, k', k'] from the weights [O, C, k, k], and the weights' gradient (+=) from
// Q's weights' gradient; the zero taps' gradients are dropped.
size_t space_to_depth_tap(const ConvShape& s, const ConvShape& q, size_t o, size_t c, size_t y,
                          size_t x) {
  const size_t channel = (2 * (y % 2) + x % 2) * size_t(s.in_channels) + c;
  const size_t k = size_t(q.kernel);
  return ((o * size_t(q.in_channels) + channel) * k + y / 2) * k + x / 2;
}

template <typename Visit>
void for_each_weight(const ConvShape& s, Visit visit) {
  size_t i = 0;
  for (size_t o = 0; o < size_t(s.out_channels); ++o) {
    for (size_t c = 0; c < size_t(s.in_channels); ++c) {
      for (size_t y = 0; y < size_t(s.kernel); ++y) {
        for (size_t x = 0; x < size_t(s.kernel); ++x) visit(i++, o, c, y, x);
      }
    }
  }
}

std::vector<float> space_to_depth_weights(const ConvShape& s, const ConvShape& q,
                                          const float* weight) {
  std::vector<float> out(size_t(q.out_channels) * size_t(q.in_channels) * size_t(q.kernel) *
                         size_t(q.kernel));
  for_each_weight(s, [&](size_t i, size_t o, size_t c, size_t y, size_t x) {
    out[space_to_depth_tap(s, q, o, c, y, x)] = weight[i];
  });
  return out;
}

void add_depth_to_space_weights(const ConvShape& s, const ConvShape& q, const float* grad_q,
                                float* grad_weight) {
  for_each_weight(s, [&](size_t i, size_t o, size_t c, size_t y, size_t x) {
    grad_weight[i] += grad_q[space_to_depth_tap(s, q, o, c, y, x)];
  });
}

// The input as the primitives of the lowered shape q (run_shape) read it: source(), or Q, into
// `kept` when given.
Source lowered_source(const ConvShape& s, const ConvShape& q, const ConvPrimitives& p,
                      const float* x, float* kept) {
  if (!by_space_to_depth(s)) return source(s, p, x, kept);
  const size_t count = p.plain_src.get_size() / sizeof(float);
  auto* out = static_cast<uint16_t*>(kept ? static_cast<void*>(kept)
                                          : padded_scratch().bytes(count * sizeof(uint16_t)));
  with_channels(s.in_channels, [&](auto channels) {
    space_to_depth_bf16<decltype(channels)::value>(s, q, x, out);
  });
  return {bf16_source_desc(q, p), out};
}

// The weights as the primitives of q read them: the caller's, or Q's.
struct LoweredWeights {
  std::vector<float> rearranged;
  const float* data;
};

LoweredWeights lowered_weights(const ConvShape& s, const ConvShape& q, const float* weight) {
  if (!by_space_to_depth(s)) return {{}, weight};
  LoweredWeights w{space_to_depth_weights(s, q, weight), nullptr};
  w.data = w.rearranged.data();
  return w;
}

// oneDNN's failures (no implementation for a shape, memory) as the project's error type.
[[noreturn]] void fail(const char* pass, const dnnl::error& e) {
  throw RuntimeFailure(std::string("oneDNN convolution ") + pass + " failed: " + e.what());
}

}  // namespace

void check_conv_shape(const ConvShape& s, const char* who) {
  const std::string at = std::string(who) + ": ";
  if (s.batch < 1 || s.in_channels < 1 || s.out_channels < 1 || s.kernel < 1 || s.stride < 1 ||
      s.pad < 0 || s.padded_height() < s.kernel || s.padded_width() < s.kernel) {
    throw InvalidArgument(at + "a " + std::to_string(s.kernel) + "x" + std::to_string(s.kernel) +
                          " convolution cannot run on a " + std::to_string(s.in_height) + "x" +
                          std::to_string(s.in_width) + " map padded by " + std::to_string(s.pad));
  }
  if (s.pad >= s.in_height || s.pad >= s.in_width) {
    throw InvalidArgument(at + "reflect padding by " + std::to_string(s.pad) +
                          " needs a map larger than " + std::to_string(s.in_height) + "x" +
                          std::to_string(s.in_width));
  }
  if (s.upsample && (s.in_height % 2 != 0 || s.in_width % 2 != 0)) {
    throw InvalidArgument(at + "an upsampled input is of even size, not " +
                          std::to_string(s.in_height) + "x" + std::to_string(s.in_width));
  }
}

void check_conv_operands(Operands operands) {
  ConvShape probe;
  probe.in_height = probe.in_width = probe.kernel = 3;
  probe.operands = operands;
  try {
    primitives(probe, false);
  } catch (const dnnl::error& e) {
    fail("set-up", e);
  }
}

size_t conv2d_kept_input_floats(const ConvShape& shape) {
  if (!bf16_operands(shape)) return 0;
  return (run_shape(shape).padded_input_size() + 1) / 2;
}

void conv2d_forward(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                    float* y, float* kept_input) {
  try {
    const ConvShape lowered = run_shape(shape);
    ConvPrimitives& p = primitives(lowered, bias != nullptr);
    const Source src = lowered_source(shape, lowered, p, x, kept_input);
    const LoweredWeights weights = lowered_weights(shape, lowered, weight);
    LayoutRun run;
    run.input(DNNL_ARG_SRC, src.desc, p.forward_pd.src_desc(), src.data);
    run.input(DNNL_ARG_WEIGHTS, p.plain_weights, p.forward_pd.weights_desc(), weights.data);
    if (bias) run.input(DNNL_ARG_BIAS, p.bias, p.bias, bias);
    run.output(DNNL_ARG_DST, p.plain_dst, p.forward_pd.dst_desc(), y);
    run.execute(p.forward);
  } catch (const dnnl::error& e) {
    fail("forward", e);
  }
}

namespace {

// The output gradient as the backward passes read it: grad_y, or its rounding.
Source output_gradient(const ConvShape& lowered, const ConvPrimitives& p, const float* grad_y,
                       const uint16_t* rounded) {
  if (!rounded) return {p.plain_dst, grad_y};
  return {memory::desc(p.plain_dst.dims(), memory::data_type::bf16, maps_tag(lowered)), rounded};
}

// Overwriting an unpadded input's gradient, oneDNN writes it in place; else into scratch, folded
// (or added) onto grad_x, through the upsampling's taps where it upsampled.
void backward_data_pass(const ConvShape& shape, const ConvShape& lowered, const float* weight,
                        const float* grad_y, const uint16_t* rounded, float* grad_x,
                        bool overwrite) {
  const bool stem = by_space_to_depth(shape);
  ConvPrimitives& p = primitives(lowered, false);
  const dnnl::primitive& primitive = backward_data(lowered, p);
  const auto& pd = p.backward_data_pd;
  const bool in_place = overwrite && shape.pad == 0 && !stem && !shape.upsample;
  auto* grad_padded =
      in_place ? grad_x : static_cast<float*>(padded_scratch().bytes(p.plain_src.get_size()));
  const LoweredWeights weights = lowered_weights(shape, lowered, weight);
  const Source grad = output_gradient(lowered, p, grad_y, rounded);
  LayoutRun run;
  run.input(DNNL_ARG_WEIGHTS, p.plain_weights, pd.weights_desc(), weights.data);
  run.input(DNNL_ARG_DIFF_DST, grad.desc, pd.diff_dst_desc(), grad.data);
  run.output(DNNL_ARG_DIFF_SRC, p.plain_src, pd.diff_src_desc(), grad_padded);
  run.execute(primitive);
  if (in_place) return;
  if (stem) {
    auto* grad_p =
        static_cast<float*>(padded_scratch(1).bytes(shape.padded_input_size() * sizeof(float)));
    depth_to_space(shape, lowered, grad_padded, grad_p);
    grad_padded = grad_p;
  }
  // Folded back onto the input (by 0: added).
  const auto [batch, channels] = channels_last_walk(shape.batch, shape.in_channels, shape.layout);
  const int height = shape.source_height(), width = shape.source_width();
  if (shape.upsample) {
    upsample2x_pad_backward_channels_last(batch, height, width, channels, shape.pad, grad_padded,
                                          grad_x, overwrite);
  } else {
    reflect_pad_backward_channels_last(batch, height, width, channels, shape.pad, grad_padded,
                                       grad_x, overwrite);
  }
}

// oneDNN overwrites its outputs; parameter gradients accumulate. With bf16 operands it would sum
// the bias gradient from the rounded output gradient; the bias is added in fp32, so its gradient
// is summed here from the fp32 one.
void backward_weights_pass(const ConvShape& shape, const ConvShape& lowered, const float* x,
                           const float* kept_input, const float* grad_y, const uint16_t* rounded,
                           float* grad_weight, float* grad_bias) {
  const bool stem = by_space_to_depth(shape);
  const size_t weight_count = size_t(lowered.out_channels) * size_t(lowered.in_channels) *
                              size_t(lowered.kernel * lowered.kernel);
  std::vector<float> weight_step(weight_count), bias_step(size_t(shape.out_channels));
  const bool bias_by_onednn = grad_bias && !bf16_operands(shape);
  ConvPrimitives& p = primitives(lowered, bias_by_onednn);
  const dnnl::primitive& primitive = backward_weights(lowered, p);
  const auto& pd = p.backward_weights_pd;
  const Source src = kept_input && bf16_operands(shape)
                         ? Source{bf16_source_desc(lowered, p), kept_input}
                         : lowered_source(shape, lowered, p, x, nullptr);
  const Source grad = output_gradient(lowered, p, grad_y, rounded);
  LayoutRun run;
  run.input(DNNL_ARG_SRC, src.desc, pd.src_desc(), src.data);
  run.input(DNNL_ARG_DIFF_DST, grad.desc, pd.diff_dst_desc(), grad.data);
  run.output(DNNL_ARG_DIFF_WEIGHTS, p.plain_weights, pd.diff_weights_desc(), weight_step.data());
  if (bias_by_onednn) run.output(DNNL_ARG_DIFF_BIAS, p.bias, p.bias, bias_step.data());
  run.execute(primitive);
  if (stem) {
    add_depth_to_space_weights(shape, lowered, weight_step.data(), grad_weight);
  } else {
    for (size_t i = 0; i < weight_count; ++i) grad_weight[i] += weight_step[i];
  }
  if (!grad_bias) return;
  if (bias_by_onednn) {
    for (int o = 0; o < shape.out_channels; ++o) grad_bias[o] += bias_step[size_t(o)];
    return;
  }
  const MapBatch grad_maps{const_cast<float*>(grad_y), shape.batch,       shape.out_channels,
                           shape.out_height(),         shape.out_width(), shape.layout};
  for (int o = 0; o < shape.out_channels; ++o) {
    double sum = 0;
    for (int n = 0; n < grad_maps.batch; ++n) {
      for (int row = 0; row < grad_maps.height; ++row) {
        for (int column = 0; column < grad_maps.width; ++column) {
          sum += grad_y[grad_maps.offset(n, o, row, column)];
        }
      }
    }
    grad_bias[o] += float(sum);
  }
}

}  // namespace

bool conv2d_rounds_output_gradient(const ConvShape& shape) {
  return bf16_operands(shape);
}

void conv2d_backward(const ConvShape& shape, const float* x, const float* weight,
                     const float* grad_y, const ConvGradients& grads, const float* kept_input,
                     const uint16_t* rounded_grad_y) {
  if (grads.bias && !grads.weight) {
    throw InvalidArgument("conv2d backward: a bias gradient is taken with the weight gradient");
  }
  const ConvShape lowered = run_shape(shape);
  const uint16_t* rounded = rounded_grad_y;
  if (bf16_operands(shape) && !rounded) {
    const size_t count = shape.output_size();
    auto* bits = static_cast<uint16_t*>(padded_scratch(2).bytes(count * sizeof(uint16_t)));
    round_to_bf16(count, grad_y, bits);
    rounded = bits;
  }
  try {
    if (grads.weight) {
      backward_weights_pass(shape, lowered, x, kept_input, grad_y, rounded, grads.weight,
                            grads.bias);
    }
    if (grads.x) {
      backward_data_pass(shape, lowered, weight, grad_y, rounded, grads.x, grads.overwrite_x);
    }
  } catch (const dnnl::error& e) {
    fail("backward", e);
  }
}

}  // namespace mvibr::nn
