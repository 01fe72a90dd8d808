// CPU kernels of the convolution gradients. float32 runs oneDNN's backward-data
// and backward-weights primitives (cached per geometry) in the layouts oneDNN
// prefers, reordering from and to kiln's NCHW/OIHW tensors; float64 is
// im2col/col2im around our float64 GEMM; the 16-bit floats convert to float32.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/conv_geometry.h"
#include "backends/cpu/backward_ops.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_context.h"
#include "backends/cpu/onednn_gemm.h"
#include "kiln/ops/factory.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

struct ConvDescs {
  dnnl::memory::desc src, weights, dst;
};

// The user's plain layouts (NCHW, OIHW or GOIHW) or, with `any`, free for oneDNN to choose.
ConvDescs conv_descs(const ConvGeometry& g, bool any) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  const bool grouped = g.groups > 1;
  const memory::dims weights =
      grouped ? memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}
              : memory::dims{g.o, g.c, g.kh, g.kw};
  return {memory::desc({g.n, g.c, g.h, g.w}, f32, any ? tag::any : tag::nchw),
          memory::desc(weights, f32, any ? tag::any : (grouped ? tag::goihw : tag::oihw)),
          memory::desc({g.n, g.o, g.oh, g.ow}, f32, any ? tag::any : tag::nchw)};
}

// The forward primitive descriptor oneDNN wants as a hint for both backward ones.
dnnl::convolution_forward::primitive_desc forward_hint(const ConvGeometry& g, const ConvDescs& m) {
  // oneDNN counts dilation from 0 (0 = dense), PyTorch from 1.
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, m.src, m.weights,
      m.dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.ph0, g.pw0}, {g.ph1, g.pw1});
  return {desc, onednn_default_attr(), onednn_engine()};
}

// One tensor argument of a primitive: the user's plain layout, the layout the
// primitive chose, and the reorder between them when they differ (plain to
// chosen for an input, chosen to plain for the output).
struct Operand {
  int arg;
  dnnl::memory::desc plain, chosen;
  std::optional<dnnl::reorder> reorder;
};

Operand make_operand(int arg, const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                     bool is_output) {
  Operand op{arg, plain, chosen, std::nullopt};
  if (plain != chosen) {
    const dnnl::engine& engine = onednn_engine();
    op.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, is_output ? chosen : plain,
                                                             engine, is_output ? plain : chosen));
  }
  return op;
}

// A backward-data or backward-weights primitive with its two inputs and its output.
struct BackwardPrimitive {
  dnnl::primitive primitive;
  Operand in0, in1, out;
  dnnl::memory::desc scratchpad;
};

// oneDNN picks the layouts (blocked ones run its direct JIT kernels, several
// times faster than the GEMM path it takes on plain layouts for backward-weights);
// the operands reorder from and to kiln's contiguous tensors around the call.
BackwardPrimitive make_backward_data(const ConvGeometry& g) {
  const ConvDescs plain = conv_descs(g, false), any = conv_descs(g, true);
  const dnnl::convolution_backward_data::desc desc(
      dnnl::algorithm::convolution_direct, any.src, any.weights, any.dst, {g.sh, g.sw},
      {g.dh - 1, g.dw - 1}, {g.ph0, g.pw0}, {g.ph1, g.pw1});
  const dnnl::convolution_backward_data::primitive_desc pd(desc, onednn_default_attr(),
                                                           onednn_engine(), forward_hint(g, any));
  return {dnnl::convolution_backward_data(pd),
          make_operand(DNNL_ARG_DIFF_DST, plain.dst, pd.diff_dst_desc(), false),
          make_operand(DNNL_ARG_WEIGHTS, plain.weights, pd.weights_desc(), false),
          make_operand(DNNL_ARG_DIFF_SRC, plain.src, pd.diff_src_desc(), true),
          pd.scratchpad_desc()};
}

BackwardPrimitive make_backward_weights(const ConvGeometry& g) {
  const ConvDescs plain = conv_descs(g, false), any = conv_descs(g, true);
  const dnnl::convolution_backward_weights::desc desc(
      dnnl::algorithm::convolution_direct, any.src, any.weights, any.dst, {g.sh, g.sw},
      {g.dh - 1, g.dw - 1}, {g.ph0, g.pw0}, {g.ph1, g.pw1});
  const dnnl::convolution_backward_weights::primitive_desc pd(
      desc, onednn_default_attr(), onednn_engine(), forward_hint(g, any));
  return {dnnl::convolution_backward_weights(pd),
          make_operand(DNNL_ARG_DIFF_DST, plain.dst, pd.diff_dst_desc(), false),
          make_operand(DNNL_ARG_SRC, plain.src, pd.src_desc(), false),
          make_operand(DNNL_ARG_DIFF_WEIGHTS, plain.weights, pd.diff_weights_desc(), true),
          pd.scratchpad_desc()};
}

// Primitives keyed by ConvGeometry::key(), one registry per direction.
OnednnPrimitiveCache<BackwardPrimitive>& backward_data_cache() {
  static OnednnPrimitiveCache<BackwardPrimitive> cache;
  return cache;
}

OnednnPrimitiveCache<BackwardPrimitive>& backward_weights_cache() {
  static OnednnPrimitiveCache<BackwardPrimitive> cache;
  return cache;
}

// Runs p on plain float32 buffers, through temporaries in the chosen layouts.
void run_backward(const BackwardPrimitive& p, const float* in0, const float* in1, float* out) {
  const dnnl::engine& engine = onednn_engine();
  dnnl::stream& stream = onednn_stream();
  std::vector<Tensor> temporaries;  // alive until the stream is done with them
  auto bind = [&](const Operand& op, void* data) {
    dnnl::memory user(op.plain, engine, data);
    if (!op.reorder) return std::pair{user, user};
    const auto floats = static_cast<int64_t>((op.chosen.get_size() + 3) / 4);
    temporaries.push_back(empty({floats}, {.dtype = kFloat32}));
    return std::pair{user, dnnl::memory(op.chosen, engine, temporaries.back().data_ptr())};
  };
  auto [user0, mem0] = bind(p.in0, const_cast<float*>(in0));
  auto [user1, mem1] = bind(p.in1, const_cast<float*>(in1));
  auto [user_out, mem_out] = bind(p.out, out);
  if (p.in0.reorder) p.in0.reorder->execute(stream, user0, mem0);
  if (p.in1.reorder) p.in1.reorder->execute(stream, user1, mem1);
  std::unordered_map<int, dnnl::memory> args{
      {p.in0.arg, mem0}, {p.in1.arg, mem1}, {p.out.arg, mem_out}};
  const size_t bytes = p.scratchpad.get_size();
  if (bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratchpad, engine, onednn_scratchpad(bytes)));
  }
  p.primitive.execute(stream, args);
  if (p.out.reorder) p.out.reorder->execute(stream, mem_out, user_out);
  stream.wait();
}

// gx = the gradient of conv's input, from gy (conv's output gradient) and w.
void backward_input_f32(const ConvGeometry& g, const float* gy, const float* w, float* gx) {
  try {
    auto p = backward_data_cache().get(g.key(), [&] { return make_backward_data(g); });
    run_backward(*p, gy, w, gx);
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv_backward_input: oneDNN convolution failed: ", e.what()));
  }
}

// gw = the gradient of conv's weight, from gy and conv's input x.
void backward_weight_f32(const ConvGeometry& g, const float* gy, const float* x, float* gw) {
  try {
    auto p = backward_weights_cache().get(g.key(), [&] { return make_backward_weights(g); });
    run_backward(*p, gy, x, gw);
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv_backward_weight: oneDNN convolution failed: ", e.what()));
  }
}

// Calls f(entry, pixel) for every entry of the im2col matrix of one image and
// group (rows (ci, kh, kw), columns (oh, ow)): pixel is the offset of the input
// element it holds in the group's [channels, H, W] block, or -1 in the padding.
template <typename F>
void for_each_patch_row(const ConvGeometry& g, int64_t channels, F f) {
  const int64_t rows = channels * g.kh * g.kw, cols = g.oh * g.ow;
  // Rows of one input channel touch only that channel: parallel over channels.
  const int64_t per_channel = std::max<int64_t>(cols * g.kh * g.kw, 1);
  parallel_for(channels, std::max<int64_t>(1, kParallelGrain / per_channel),
               [&](int64_t c0, int64_t c1) {
                 for (int64_t r = c0 * g.kh * g.kw; r < std::min(rows, c1 * g.kh * g.kw); ++r) {
                   const int64_t ci = r / (g.kh * g.kw), kh = (r / g.kw) % g.kh, kw = r % g.kw;
                   for (int64_t oh = 0; oh < g.oh; ++oh) {
                     const int64_t ih = oh * g.sh - g.ph0 + kh * g.dh;
                     const bool row_inside = ih >= 0 && ih < g.h;
                     for (int64_t ow = 0; ow < g.ow; ++ow) {
                       const int64_t iw = ow * g.sw - g.pw0 + kw * g.dw;
                       const bool inside = row_inside && iw >= 0 && iw < g.w;
                       f(r * cols + oh * g.ow + ow, inside ? (ci * g.h + ih) * g.w + iw : -1);
                     }
                   }
                 }
               });
}

void backward_input_f64(const ConvGeometry& g, const double* gy, const double* w, double* gx) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t depth = cg * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<double> col(static_cast<size_t>(depth * spatial));
  std::fill_n(gx, g.n * g.c * g.h * g.w, 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      // col = w_group^T @ gy_group, then every column entry goes back to its pixel.
      gemm_f64({w + grp * og * depth, depth, og, 1, depth},
               {gy + (n * g.o + grp * og) * spatial, og, spatial, spatial, 1}, col.data(), spatial,
               1.0, 0.0);
      double* image = gx + (n * g.c + grp * cg) * g.h * g.w;
      for_each_patch_row(g, cg, [&](int64_t at, int64_t pixel) {
        if (pixel >= 0) image[pixel] += col[at];
      });
    }
  }
}

void backward_weight_f64(const ConvGeometry& g, const double* gy, const double* x, double* gw) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t depth = cg * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<double> col(static_cast<size_t>(depth * spatial));
  std::fill_n(gw, g.o * depth, 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const double* image = x + (n * g.c + grp * cg) * g.h * g.w;
      for_each_patch_row(
          g, cg, [&](int64_t at, int64_t pixel) { col[at] = pixel >= 0 ? image[pixel] : 0.0; });
      // gw_group += gy_group @ col^T.
      gemm_f64({gy + (n * g.o + grp * og) * spatial, og, spatial, spatial, 1},
               {col.data(), spatial, depth, 1, spatial}, gw + grp * og * depth, depth, 1.0, 1.0);
    }
  }
}

// Runs the float32 or float64 path; 16-bit floats go through float32 copies.
template <typename F32, typename F64>
void run_float(const Tensor& out, const Tensor& a, const Tensor& b, F32 f32, F64 f64) {
  const DType t = out.dtype();
  if (t == kFloat32) {
    f32(a.data<float>(), b.data<float>(), out.data<float>());
  } else if (t == kFloat64) {
    f64(a.data<double>(), b.data<double>(), out.data<double>());
  } else {
    const Tensor a32 = a.to(kFloat32), b32 = b.to(kFloat32);
    Tensor out32 = empty(out.sizes(), {.dtype = kFloat32});
    f32(a32.data<float>(), b32.data<float>(), out32.data<float>());
    Tensor o = out;
    o.copy_(out32);
  }
}

void conv_backward_input(const KernelCall& c) {
  Tensor gx = c.out();
  if (gx.numel() == 0) return;
  const Tensor gy = c.in(0).contiguous(), w = c.in(1).contiguous();
  if (gy.numel() == 0 || w.numel() == 0) {
    gx.zero_();
    return;
  }
  const ConvGeometry g = conv_geometry(gx.sizes(), w.sizes(), gy.sizes(), c.attrs, 1);
  run_float(
      gx, gy, w, [&](const float* a, const float* b, float* o) { backward_input_f32(g, a, b, o); },
      [&](const double* a, const double* b, double* o) { backward_input_f64(g, a, b, o); });
}

void conv_backward_weight(const KernelCall& c) {
  Tensor gw = c.out();
  if (gw.numel() == 0) return;
  const Tensor gy = c.in(0).contiguous(), x = c.in(1).contiguous();
  if (gy.numel() == 0 || x.numel() == 0) {
    gw.zero_();
    return;
  }
  const ConvGeometry g = conv_geometry(x.sizes(), gw.sizes(), gy.sizes(), c.attrs, 1);
  run_float(
      gw, gy, x, [&](const float* a, const float* b, float* o) { backward_weight_f32(g, a, b, o); },
      [&](const double* a, const double* b, double* o) { backward_weight_f64(g, a, b, o); });
}

}  // namespace

void register_cpu_conv_backward_kernels(KernelTable& t) {
  t.set(OpId::conv_backward_input, conv_backward_input);
  t.set(OpId::conv_backward_weight, conv_backward_weight);
}

}  // namespace kiln::backend::cpu
