// CPU kernels of convolution and pooling. float32 convolution runs oneDNN's
// primitive on plain NCHW/OIHW layouts (cached per shape); float64 is im2col +
// our float64 GEMM; the 16-bit floats convert to float32 around oneDNN. Pools
// are direct loops over the N*C planes, parallel across planes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "backends/conv_geometry.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_context.h"
#include "backends/cpu/onednn_gemm.h"
#include "kiln/ops/factory.h"

namespace kiln::backend {
namespace cpu {
namespace {

using ops::OpId;

// Calls f.template operator()<T>() for the four float dtypes (all these ops accept).
template <typename F>
void visit_float(DType t, F&& f) {
  switch (t) {
    case kFloat32: return f.template operator()<float>();
    case kFloat64: return f.template operator()<double>();
    case kFloat16: return f.template operator()<Half>();
    default: return f.template operator()<BFloat16>();
  }
}

// The shared conv geometry (conv_geometry.h) and whether a bias is added.
struct ForwardGeometry : ConvGeometry {
  bool has_bias;

  std::vector<int64_t> key() const {
    std::vector<int64_t> k = ConvGeometry::key();
    k.push_back(has_bias);
    return k;
  }
};

ForwardGeometry forward_geometry(const KernelCall& call) {
  ForwardGeometry g{backend::conv_geometry(call.in(0).sizes(), call.in(1).sizes(),
                                           call.out().sizes(), call.attrs, 0),
                    call.inputs.size() > 2 && call.in(2).defined()};
  return g;
}

struct ConvPrimitive {
  dnnl::convolution_forward primitive;
  dnnl::memory::desc src, weights, bias, dst, scratchpad;
};

ConvPrimitive make_conv_primitive(const ForwardGeometry& g) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  const memory::desc src({g.n, g.c, g.h, g.w}, f32, tag::nchw);
  const memory::desc dst({g.n, g.o, g.oh, g.ow}, f32, tag::nchw);
  const memory::desc weights =
      g.groups == 1 ? memory::desc({g.o, g.c, g.kh, g.kw}, f32, tag::oihw)
                    : memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, f32,
                                   tag::goihw);
  const memory::desc bias = g.has_bias ? memory::desc({g.o}, f32, tag::x) : memory::desc();
  // oneDNN counts dilation from 0 (0 = dense), PyTorch from 1.
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, weights, bias,
      dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.ph0, g.pw0}, {g.ph1, g.pw1});
  const dnnl::convolution_forward::primitive_desc pd(desc, onednn_default_attr(), onednn_engine());
  return {dnnl::convolution_forward(pd), src, weights, bias, dst, pd.scratchpad_desc()};
}

// The registry of float32 convolution primitives, keyed by ForwardGeometry::key().
OnednnPrimitiveCache<ConvPrimitive>& conv_primitive_cache() {
  static OnednnPrimitiveCache<ConvPrimitive> cache;
  return cache;
}

void conv_f32(const ForwardGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  try {
    auto conv = conv_primitive_cache().get(g.key(), [&] { return make_conv_primitive(g); });
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(conv->src, engine, const_cast<float*>(x))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(conv->weights, engine, const_cast<float*>(w))},
        {DNNL_ARG_DST, dnnl::memory(conv->dst, engine, y)}};
    if (g.has_bias) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(conv->bias, engine, const_cast<float*>(bias)));
    }
    const size_t scratch = conv->scratchpad.get_size();
    if (scratch > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(conv->scratchpad, engine, onednn_scratchpad(scratch)));
    }
    dnnl::stream& stream = onednn_stream();
    conv->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv: oneDNN convolution failed: ", e.what()));
  }
}

// Rows (ci, kh, kw) x columns (oh, ow) of the input patches of one image and group.
void im2col(const ForwardGeometry& g, const double* x, int64_t channels, double* col) {
  const int64_t rows = channels * g.kh * g.kw, cols = g.oh * g.ow;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t ci = r / (g.kh * g.kw), kh = (r / g.kw) % g.kh, kw = r % g.kw;
                   double* out = col + r * cols;
                   for (int64_t oh = 0; oh < g.oh; ++oh) {
                     const int64_t ih = oh * g.sh - g.ph0 + kh * g.dh;
                     const bool row_inside = ih >= 0 && ih < g.h;
                     const double* in = x + (ci * g.h + ih) * g.w;
                     for (int64_t ow = 0; ow < g.ow; ++ow) {
                       const int64_t iw = ow * g.sw - g.pw0 + kw * g.dw;
                       out[oh * g.ow + ow] = row_inside && iw >= 0 && iw < g.w ? in[iw] : 0.0;
                     }
                   }
                 }
               });
}

// float64 stays exact to double: im2col, then our GEMM per image and group.
void conv_f64(const ForwardGeometry& g, const double* x, const double* w, const double* bias,
              double* y) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t depth = cg * g.kh * g.kw, spatial = g.oh * g.ow;
  std::vector<double> col(static_cast<size_t>(depth * spatial));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(g, x + (n * g.c + grp * cg) * g.h * g.w, cg, col.data());
      double* out = y + (n * g.o + grp * og) * spatial;
      if (g.has_bias) {
        for (int64_t o = 0; o < og; ++o) std::fill_n(out + o * spatial, spatial, bias[grp * og + o]);
      }
      gemm_f64({w + grp * og * depth, og, depth, depth, 1}, {col.data(), depth, spatial, spatial, 1},
               out, spatial, 1.0, g.has_bias ? 1.0 : 0.0);
    }
  }
}

void conv_kernel(const KernelCall& call) {
  const ForwardGeometry g = forward_geometry(call);
  Tensor y = call.out();
  if (y.numel() == 0) return;
  const Tensor x = call.in(0).contiguous();
  const Tensor w = call.in(1).contiguous();
  const Tensor b = g.has_bias ? call.in(2).contiguous() : Tensor();
  if (g.c == 0) {  // no input channels: every output is its bias
    if (!g.has_bias) {
      y.zero_();
      return;
    }
    y.view({g.n, g.o, g.oh * g.ow}).copy_(b.view({1, g.o, 1}).expand({g.n, g.o, g.oh * g.ow}));
    return;
  }
  const DType t = y.dtype();
  if (t == kFloat32) {
    conv_f32(g, x.data<float>(), w.data<float>(), g.has_bias ? b.data<float>() : nullptr,
             y.data<float>());
  } else if (t == kFloat64) {
    conv_f64(g, x.data<double>(), w.data<double>(), g.has_bias ? b.data<double>() : nullptr,
             y.data<double>());
  } else {
    const Tensor x32 = x.to(kFloat32), w32 = w.to(kFloat32);
    const Tensor b32 = g.has_bias ? b.to(kFloat32) : Tensor();
    Tensor y32 = empty(y.sizes(), {.dtype = kFloat32});
    conv_f32(g, x32.data<float>(), w32.data<float>(), g.has_bias ? b32.data<float>() : nullptr,
             y32.data<float>());
    y.copy_(y32);
  }
}

// --- pooling -------------------------------------------------------------------

struct PoolPlanes {
  int64_t planes, h, w, oh, ow;
};

PoolPlanes pool_planes(const Tensor& x, const Tensor& y) {
  const int64_t h = x.size(-2), w = x.size(-1);
  return {x.numel() / (h * w), h, w, y.size(-2), y.size(-1)};
}

// Runs f(plane) for every N*C plane, in parallel when the total work is large.
template <typename F>
void for_each_plane(const PoolPlanes& p, int64_t work_per_output, F f) {
  const int64_t per_plane = std::max<int64_t>(1, p.oh * p.ow * work_per_output);
  parallel_for(p.planes, std::max<int64_t>(1, kParallelGrain / per_plane),
               [&](int64_t begin, int64_t end) {
                 for (int64_t plane = begin; plane < end; ++plane) f(plane);
               });
}

template <typename T>
void max_pool(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const PoolPlanes p = pool_planes(x, call.out());
  const auto& k = call.attrs.ints(0);
  const auto& s = call.attrs.ints(1);
  const auto& pad = call.attrs.ints(2);
  const auto& d = call.attrs.ints(3);
  const T* in = x.data<T>();
  T* out = call.out().data<T>();
  for_each_plane(p, k[0] * k[1], [&](int64_t plane) {
    const T* src = in + plane * p.h * p.w;
    T* dst = out + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        C best = -std::numeric_limits<C>::infinity();
        for (int64_t kh = 0; kh < k[0]; ++kh) {
          const int64_t ih = oh * s[0] - pad[0] + kh * d[0];
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t kw = 0; kw < k[1]; ++kw) {
            const int64_t iw = ow * s[1] - pad[1] + kw * d[1];
            if (iw < 0 || iw >= p.w) continue;
            const C v = C(src[ih * p.w + iw]);
            if (v > best || std::isnan(v)) best = v;  // a NaN, once taken, is never replaced
          }
        }
        dst[oh * p.ow + ow] = T(best);
      }
    }
  });
}

template <typename T>
void avg_pool(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const PoolPlanes p = pool_planes(x, call.out());
  const auto& k = call.attrs.ints(0);
  const auto& s = call.attrs.ints(1);
  const auto& pad = call.attrs.ints(2);
  const bool count_include_pad = call.attrs.b(4);
  const bool has_divisor = call.attrs.has(5);
  const int64_t divisor = has_divisor ? call.attrs.i(5) : 1;
  const T* in = x.data<T>();
  T* out = call.out().data<T>();
  for_each_plane(p, k[0] * k[1], [&](int64_t plane) {
    const T* src = in + plane * p.h * p.w;
    T* dst = out + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      const int64_t h0 = oh * s[0] - pad[0], h1 = std::min(h0 + k[0], p.h + pad[0]);
      const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h1, p.h);
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const int64_t w0 = ow * s[1] - pad[1], w1 = std::min(w0 + k[1], p.w + pad[1]);
        const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w1, p.w);
        C sum = 0;
        for (int64_t ih = hb; ih < he; ++ih)
          for (int64_t iw = wb; iw < we; ++iw) sum += C(src[ih * p.w + iw]);
        const int64_t count = std::max<int64_t>(he - hb, 0) * std::max<int64_t>(we - wb, 0);
        const int64_t div = has_divisor ? divisor
                            : count_include_pad ? (h1 - h0) * (w1 - w0)
                                                : count;
        dst[oh * p.ow + ow] = T(count == 0 ? C(0) : sum / C(div));
      }
    }
  });
}

template <typename T>
void adaptive_avg_pool(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const PoolPlanes p = pool_planes(x, call.out());
  if (p.oh * p.ow == 0) return;
  const T* in = x.data<T>();
  T* out = call.out().data<T>();
  const int64_t window = ((p.h + p.oh - 1) / p.oh + 1) * ((p.w + p.ow - 1) / p.ow + 1);
  for_each_plane(p, window, [&](int64_t plane) {
    const T* src = in + plane * p.h * p.w;
    T* dst = out + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      const int64_t h0 = oh * p.h / p.oh, h1 = ((oh + 1) * p.h + p.oh - 1) / p.oh;
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const int64_t w0 = ow * p.w / p.ow, w1 = ((ow + 1) * p.w + p.ow - 1) / p.ow;
        C sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) sum += C(src[ih * p.w + iw]);
        dst[oh * p.ow + ow] = T(sum / C((h1 - h0) * (w1 - w0)));
      }
    }
  });
}

}  // namespace
}  // namespace cpu

void register_cpu_conv_pool_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::conv1d, cpu::conv_kernel);
  t.set(OpId::conv2d, cpu::conv_kernel);
  t.set(OpId::max_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(), [&]<typename T>() { cpu::max_pool<T>(c); });
  });
  t.set(OpId::avg_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(), [&]<typename T>() { cpu::avg_pool<T>(c); });
  });
  t.set(OpId::adaptive_avg_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(), [&]<typename T>() { cpu::adaptive_avg_pool<T>(c); });
  });
}

}  // namespace kiln::backend
