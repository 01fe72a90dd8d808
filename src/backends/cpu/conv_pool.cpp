// CPU kernels of convolution and pooling. float32 convolution runs oneDNN's
// primitive (cached per shape, layout and dtype) on NCHW tensors or on
// channels-last ones (NHWC in memory, which the compiler keeps between
// convolutions when it freezes: docs/architecture.md, "Layouts"); float64 is
// im2col + our float64 GEMM; the 16-bit floats run oneDNN's primitive on
// them where the CPU has instructions for them (bfloat16 with AVX-512 BF16
// or AMX: sums in float32, rounded once), else convert to float32 around it. Pools are direct
// loops over the N*C planes, parallel across planes, or over channels-last
// pixels with the channels innermost.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/conv_geometry.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_context.h"
#include "backends/cpu/onednn_gemm.h"
#include "backends/cpu/weight_cache.h"
#include "backends/epilogue.h"
#include "backends/prepared.h"
#include "core/shape_util.h"
#include "kiln/autograd.h"
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

// The shared conv geometry (conv_geometry.h), whether a bias is added, and
// whether the source and the result are channels last (else NCHW).
struct ForwardGeometry : ConvGeometry {
  bool has_bias;
  bool src_nhwc = false, dst_nhwc = false;
  dnnl::memory::data_type type = dnnl::memory::data_type::f32;  // of x, w, bias and y

  std::vector<int64_t> key() const {
    std::vector<int64_t> k = ConvGeometry::key();
    k.push_back(has_bias);
    k.push_back(src_nhwc);
    k.push_back(dst_nhwc);
    k.push_back(static_cast<int64_t>(type));
    return k;
  }
};

bool channels_last(const Tensor& t) { return channels_last_layout(t.sizes(), t.strides()); }

ForwardGeometry forward_geometry(const KernelCall& call) {
  ForwardGeometry g{backend::conv_geometry(call.in(0).sizes(), call.in(1).sizes(),
                                           call.out().sizes(), call.attrs, 0),
                    call.inputs.size() > 2 && call.in(2).defined()};
  if (call.out().dtype() == kFloat32) {
    g.src_nhwc = channels_last(call.in(0));
    g.dst_nhwc = channels_last(call.out());
  }
  if (call.out().dtype() == kBFloat16) g.type = dnnl::memory::data_type::bf16;
  if (call.out().dtype() == kFloat16) g.type = dnnl::memory::data_type::f16;
  return g;
}

// A cached convolution. On NCHW tensors oneDNN chooses the layouts it runs
// fastest on (channel blocks of 8 or 16 with AVX2/AVX-512), so the source is
// reordered in and the result out around the primitive. Where the source or
// the result is channels last, the primitive runs on NHWC and only a tensor
// that is not is reordered. The weights are reordered once per weight (the
// weight cache) when no gradient is recorded. src/weights/dst are the
// tensors' layouts, *_run the primitive's.
struct ConvPrimitive {
  dnnl::convolution_forward primitive;
  dnnl::memory::desc src, weights, bias, dst, scratchpad;
  dnnl::memory::desc src_run, weights_run, dst_run;
  std::optional<dnnl::reorder> src_in, weights_in, dst_out;
  bool reference = false;  // oneDNN has only its reference loops for it (slow)
};

ConvPrimitive make_conv_primitive(const ForwardGeometry& g) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const auto f32 = g.type;  // the tensors' type: float32, or a 16-bit float
  const memory::desc src({g.n, g.c, g.h, g.w}, f32, g.src_nhwc ? tag::nhwc : tag::nchw);
  const memory::desc dst({g.n, g.o, g.oh, g.ow}, f32, g.dst_nhwc ? tag::nhwc : tag::nchw);
  const memory::desc weights =
      g.groups == 1 ? memory::desc({g.o, g.c, g.kh, g.kw}, f32, tag::oihw)
                    : memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, f32,
                                   tag::goihw);
  const memory::desc bias = g.has_bias ? memory::desc({g.o}, f32, tag::x) : memory::desc();
  // 1x1 kernels are plain GEMMs on NCHW, where the reorders would cost more
  // than they gain (2-core AMD EPYC: 0.4-0.8x; larger kernels gain 1.2-1.6x).
  const auto primitive_desc = [&](bool nhwc) {
    const bool blocked = g.kh * g.kw > 1 && !nhwc;
    auto any = [&](const memory::desc& d) {
      return blocked || nhwc ? memory::desc(d.dims(), f32, tag::any) : d;
    };
    auto run = [&](const memory::desc& d) {
      return nhwc ? memory::desc(d.dims(), f32, tag::nhwc) : any(d);
    };
    // oneDNN counts dilation from 0 (0 = dense), PyTorch from 1.
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, run(src),
        any(weights), bias, run(dst), {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.ph0, g.pw0},
        {g.ph1, g.pw1});
    return dnnl::convolution_forward::primitive_desc(desc, onednn_default_attr(), onednn_engine());
  };
  // A channels-last tensor runs the primitive on NHWC, unless oneDNN has only
  // its reference loops for that: then the NCHW way, with reorders.
  dnnl::convolution_forward::primitive_desc pd;
  try {
    pd = primitive_desc(g.src_nhwc || g.dst_nhwc);
  } catch (const dnnl::error&) {
    // A 16-bit float this CPU has no instructions for may have no
    // implementation at all: the caller converts to float32 instead.
    if (g.type == memory::data_type::f32) throw;
    ConvPrimitive none;
    none.reference = true;
    return none;
  }
  if ((g.src_nhwc || g.dst_nhwc) && std::string_view(pd.impl_info_str()).starts_with("ref"))
    pd = primitive_desc(false);
  ConvPrimitive p{dnnl::convolution_forward(pd), src, weights, bias, dst, pd.scratchpad_desc(),
                  pd.src_desc(), pd.weights_desc(), pd.dst_desc(), {}, {}, {}};
  const dnnl::engine& engine = onednn_engine();
  auto reorder = [&](const memory::desc& from, const memory::desc& to) {
    return std::optional<dnnl::reorder>(dnnl::reorder::primitive_desc(engine, from, engine, to));
  };
  if (p.src_run != src) p.src_in = reorder(src, p.src_run);
  if (p.weights_run != weights) p.weights_in = reorder(weights, p.weights_run);
  if (p.dst_run != dst) p.dst_out = reorder(p.dst_run, dst);
  p.reference = std::string_view(pd.impl_info_str()).starts_with("ref");
  return p;
}

// The registry of convolution primitives, keyed by ForwardGeometry::key().
OnednnPrimitiveCache<ConvPrimitive>& conv_primitive_cache() {
  static OnednnPrimitiveCache<ConvPrimitive> cache;
  return cache;
}

// The weights in the primitive's layout, owned by oneDNN.
dnnl::memory reorder_weights(const ConvPrimitive& conv, const void* w) {
  return reordered_copy(*conv.weights_in, conv.weights, w, conv.weights_run);
}

// The cached primitive of g.
std::shared_ptr<const ConvPrimitive> conv_primitive(const ForwardGeometry& g) {
  try {
    return conv_primitive_cache().get(g.key(), [&] { return make_conv_primitive(g); });
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv: oneDNN convolution failed: ", e.what()));
  }
}

// x, w, bias, y of g.type. weight: the tensor w points into, or undefined
// when w is a temporary. prepared: the weights as prepare_conv_weights made
// them (then w is null). False, with nothing done, for a 16-bit type oneDNN
// has only reference loops for on this CPU.
bool conv_onednn(const ForwardGeometry& g, const void* x, const void* w, const void* bias, void* y,
                 const Tensor& weight, const dnnl::memory* prepared = nullptr) {
  const auto conv = conv_primitive(g);
  if (conv->reference && g.type != dnnl::memory::data_type::f32) return false;
  try {
    const dnnl::engine& engine = onednn_engine();
    // One thread-local block holds the scratchpad and the reordered source and result.
    constexpr size_t kAlign = 64;
    auto aligned = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    const size_t scratch = aligned(conv->scratchpad.get_size());
    const size_t src_bytes = conv->src_in ? aligned(conv->src_run.get_size()) : 0;
    const size_t dst_bytes = conv->dst_out ? aligned(conv->dst_run.get_size()) : 0;
    char* block = static_cast<char*>(onednn_scratchpad(scratch + src_bytes + dst_bytes + 1));
    dnnl::stream& stream = onednn_stream();
    dnnl::memory src(conv->src, engine, const_cast<void*>(x));
    if (conv->src_in) {
      dnnl::memory run(conv->src_run, engine, block + scratch);
      conv->src_in->execute(stream, src, run);
      src = run;
    }
    dnnl::memory weights;
    if (prepared) {
      if (prepared->get_desc() != conv->weights_run)
        throw Error("conv: the prepared weights are not in the layout the primitive reads");
      weights = *prepared;
    } else if (!conv->weights_in) {
      weights = dnnl::memory(conv->weights, engine, const_cast<void*>(w));
    } else {
      std::shared_ptr<const void> cached;
      if (weight.defined() && !is_grad_enabled()) {
        cached = derived_weight(
            weight, DerivedWeight::conv_layout, conv->weights_run.get_size(),
            [&] { return std::make_shared<const dnnl::memory>(reorder_weights(*conv, w)); },
            [&](const void* c) {
              return static_cast<const dnnl::memory*>(c)->get_desc() == conv->weights_run;
            });
      }
      weights = cached ? *static_cast<const dnnl::memory*>(cached.get()) : reorder_weights(*conv, w);
    }
    dnnl::memory dst(conv->dst, engine, y);
    dnnl::memory dst_run = conv->dst_out ? dnnl::memory(conv->dst_run, engine, block + scratch + src_bytes) : dst;
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst_run}};
    if (g.has_bias) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(conv->bias, engine, const_cast<void*>(bias)));
    }
    if (scratch > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(conv->scratchpad, engine, block));
    }
    conv->primitive.execute(stream, args);
    if (conv->dst_out) conv->dst_out->execute(stream, dst_run, dst);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv: oneDNN convolution failed: ", e.what()));
  }
  return true;
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

// Runs kernel, which writes row-major results, into a row-major temporary,
// then copies it through the strides of call.out().
void through_row_major(const KernelCall& call, void (*kernel)(const KernelCall&)) {
  Tensor computed = empty(call.out().sizes(), {.dtype = call.out().dtype()});
  TensorList outs{computed};
  kernel(KernelCall{call.schema, call.inputs, outs, call.attrs, call.prepared});
  call.out().copy_(computed);
}

void conv_kernel(const KernelCall& call) {
  const ForwardGeometry g = forward_geometry(call);
  Tensor y = call.out();
  if (y.numel() == 0) return;
  if (!g.dst_nhwc && !y.is_contiguous()) return through_row_major(call, conv_kernel);
  const Tensor x = g.src_nhwc ? call.in(0) : call.in(0).contiguous();
  // Prepared weights (prepare_conv_weights): the tensor in their place holds no bytes.
  const auto* prepared = static_cast<const dnnl::memory*>(call.prepared);
  const Tensor w = prepared ? Tensor() : call.in(1).contiguous();
  const Tensor b = g.has_bias ? call.in(2).contiguous() : Tensor();
  if (g.c == 0) {  // no input channels: every output is its bias
    if (!g.has_bias) {
      y.zero_();
      return;
    }
    Shape per_channel(static_cast<size_t>(y.dim()), 1);
    per_channel[1] = g.o;
    y.copy_(b.view(per_channel).expand(y.sizes()));
    return;
  }
  const DType t = y.dtype();
  const auto bias = [&] { return g.has_bias ? b.data_ptr() : nullptr; };
  if (t == kFloat32) {
    conv_onednn(g, x.data_ptr(), prepared ? nullptr : w.data_ptr(), bias(), y.data_ptr(), w,
                prepared);
  } else if (prepared) {
    throw Error(detail::str_cat("conv: weights prepared for float32, called on ", t));
  } else if (t == kFloat64) {
    conv_f64(g, x.data<double>(), w.data<double>(), g.has_bias ? b.data<double>() : nullptr,
             y.data<double>());
  } else if (!conv_onednn(g, x.data_ptr(), w.data_ptr(), bias(), y.data_ptr(), w)) {
    // No kernel for the 16-bit float itself here: float32 around oneDNN.
    const Tensor x32 = x.to(kFloat32), w32 = w.to(kFloat32);
    const Tensor b32 = g.has_bias ? b.to(kFloat32) : Tensor();
    Tensor y32 = empty(y.sizes(), {.dtype = kFloat32});
    ForwardGeometry g32 = g;
    g32.type = dnnl::memory::data_type::f32;
    conv_onednn(g32, x32.data_ptr(), w32.data_ptr(), g.has_bias ? b32.data_ptr() : nullptr,
                y32.data_ptr(), Tensor());
    y.copy_(y32);
  }
}

// Prepared weights by the values they hold (InputPreparation::prepare's
// `values`), so that the executables of one program at several sizes share
// one copy where their primitives read one layout.
class PreparedWeights {
 public:
  std::shared_ptr<const dnnl::memory> find(const void* values, const dnnl::memory::desc& desc) {
    std::lock_guard lock(mutex_);
    std::erase_if(entries_, [](const Entry& e) { return e.weights.expired(); });
    for (const Entry& e : entries_)
      if (e.values == values)
        if (auto w = e.weights.lock(); w && w->get_desc() == desc) return w;
    return nullptr;
  }
  void add(const void* values, const std::shared_ptr<const dnnl::memory>& weights) {
    std::lock_guard lock(mutex_);
    entries_.push_back({values, weights});
  }

 private:
  struct Entry {
    const void* values;
    std::weak_ptr<const dnnl::memory> weights;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

PreparedWeights& prepared_weights() {
  static PreparedWeights p;
  return p;
}

// The weights written straight into `desc`'s places, a block of output
// channels at a time, or null where desc is not a layout of plain blocks.
std::shared_ptr<const dnnl::memory> pack_weights(const ForwardGeometry& g,
                                                 const dnnl::memory::desc& desc,
                                                 const InputRows& rows) {
  const std::vector<std::vector<int64_t>> tables = blocked_offsets(desc);
  const bool grouped = g.groups > 1;
  if (tables.size() != (grouped ? 5u : 4u)) return nullptr;
  auto packed = std::make_shared<dnnl::memory>(desc, onednn_engine());
  float* dst = static_cast<float*>(packed->get_data_handle());
  std::fill_n(dst, desc.get_size() / sizeof(float), 0.f);  // the blocks' padding
  dst += desc.data.offset0;
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  const auto& ti = tables[grouped + 1];
  const auto& th = tables[grouped + 2];
  const auto& tw = tables[grouped + 3];
  const int64_t per_channel = std::max<int64_t>(1, cg * g.kh * g.kw);
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 18) / per_channel);
  for (int64_t o0 = 0; o0 < g.o; o0 += block) {
    const int64_t o1 = std::min(g.o, o0 + block);
    const Tensor part = rows(o0, o1);
    const float* rows_data = part.data<float>();
    parallel_for(
        o1 - o0, std::max<int64_t>(1, kParallelGrain / per_channel), [&](int64_t b, int64_t e) {
          for (int64_t o = o0 + b; o < o0 + e; ++o) {
            const float* src = rows_data + (o - o0) * per_channel;
            const int64_t base = grouped ? tables[0][o / og] + tables[1][o % og] : tables[0][o];
            for (int64_t i = 0; i < cg; ++i)
              for (int64_t h = 0; h < g.kh; ++h)
                for (int64_t w = 0; w < g.kw; ++w) dst[base + ti[i] + th[h] + tw[w]] = *src++;
          }
        });
  }
  return packed;
}

// A frozen convolution's weight in the layout its primitive reads, for calls
// of call's layouts (backends/prepared.h): float32 with input channels, the
// result row-major or channels last. Owned by oneDNN, as the weight cache's
// copies of eager calls are, and shared by the calls over the same values
// that read that layout. The weights come a block of output channels at a
// time (pack_weights), so that a folded weight is never held whole beside
// its prepared form.
std::shared_ptr<const void> prepare_conv_weights(const KernelCall& call, const InputRows& rows,
                                                 const void* values) {
  const ForwardGeometry g = forward_geometry(call);
  const Tensor& y = call.out();
  if (y.dtype() != kFloat32 || call.in(1).dtype() != kFloat32 || y.numel() == 0 || g.c == 0 ||
      (!g.dst_nhwc && !y.is_contiguous()))
    return nullptr;
  try {
    const auto conv = conv_primitive(g);
    if (auto shared = prepared_weights().find(values, conv->weights_run)) return shared;
    std::shared_ptr<const dnnl::memory> packed = pack_weights(g, conv->weights_run, rows);
    if (!packed) {  // another kind of layout: oneDNN reorders the whole weight
      if (!conv->weights_in) return nullptr;  // (plain layouts are blocks of one)
      const Tensor w = rows(0, g.o);
      packed = std::make_shared<const dnnl::memory>(reorder_weights(*conv, w.data<float>()));
    }
    prepared_weights().add(values, packed);
    return packed;
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("conv: oneDNN could not prepare the weights: ", e.what()));
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

// a, unless b is larger or NaN: a NaN, once taken, is never replaced. Branch-free
// so that the loops below vectorize.
template <typename C>
inline C max_keep_nan(C a, C b) {
  const bool take = (b > a) | (b != b);
  return take ? b : a;
}

// Max pooling as two separable passes per plane: the max over kw of every input
// row (from a copy of the row padded with -inf), then the max over kh of those
// rows, both as loops along the output row. The first maximum in row-major
// window order wins, as in a direct scan.
template <typename T>
void max_pool(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const PoolPlanes p = pool_planes(x, call.out());
  if (p.oh * p.ow == 0) return;
  const auto& k = call.attrs.ints(0);
  const auto& s = call.attrs.ints(1);
  const auto& pad = call.attrs.ints(2);
  const auto& d = call.attrs.ints(3);
  const T* in = x.data<T>();
  T* out = call.out().data<T>();
  // Input rows a window can touch, and the padded row every window of one row reads.
  const int64_t row_len = (p.ow - 1) * s[1] + (k[1] - 1) * d[1] + 1;
  const C lowest = -std::numeric_limits<C>::infinity();
  const int64_t per_plane = std::max<int64_t>(1, p.oh * p.ow * k[0] + p.h * p.ow * k[1]);
  parallel_for(p.planes, std::max<int64_t>(1, kParallelGrain / per_plane), [&](int64_t begin,
                                                                               int64_t end) {
    std::vector<C> padded(static_cast<size_t>(row_len), lowest);
    std::vector<C> rows(static_cast<size_t>(p.h * p.ow)), acc(static_cast<size_t>(p.ow));
    const int64_t w_lo = std::min<int64_t>(pad[1], row_len);
    const int64_t w_hi = std::min<int64_t>(pad[1] + p.w, row_len);
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* src = in + plane * p.h * p.w;
      T* dst = out + plane * p.oh * p.ow;
      for (int64_t ih = 0; ih < p.h; ++ih) {
        const T* row = src + ih * p.w;
        for (int64_t i = w_lo; i < w_hi; ++i) padded[i] = C(row[i - pad[1]]);
        C* h = rows.data() + ih * p.ow;
        const C* pr = padded.data();
        for (int64_t ow = 0; ow < p.ow; ++ow) h[ow] = pr[ow * s[1]];
        for (int64_t kw = 1; kw < k[1]; ++kw) {
          const C* tap = pr + kw * d[1];
          for (int64_t ow = 0; ow < p.ow; ++ow) h[ow] = max_keep_nan(h[ow], tap[ow * s[1]]);
        }
      }
      for (int64_t oh = 0; oh < p.oh; ++oh) {
        std::fill(acc.begin(), acc.end(), lowest);
        for (int64_t kh = 0; kh < k[0]; ++kh) {
          const int64_t ih = oh * s[0] - pad[0] + kh * d[0];
          if (ih < 0 || ih >= p.h) continue;
          const C* h = rows.data() + ih * p.ow;
          for (int64_t ow = 0; ow < p.ow; ++ow) acc[ow] = max_keep_nan(acc[ow], h[ow]);
        }
        T* o = dst + oh * p.ow;
        for (int64_t ow = 0; ow < p.ow; ++ow) o[ow] = T(acc[ow]);
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

// Adaptive pooling's window along one dim: output cell i of `out` averages
// input rows floor(i * in / out) to ceil((i + 1) * in / out); and a bound on
// a window's taps (for the parallel grain).
std::pair<int64_t, int64_t> adaptive_range(int64_t i, int64_t in, int64_t out) {
  return {i * in / out, ((i + 1) * in + out - 1) / out};
}
int64_t adaptive_window(int64_t h, int64_t w, int64_t oh, int64_t ow) {
  return ((h + oh - 1) / oh + 1) * ((w + ow - 1) / ow + 1);
}

template <typename T>
void adaptive_avg_pool(const KernelCall& call) {
  using C = compute_t<T>;
  const Tensor x = call.in(0).contiguous();
  const PoolPlanes p = pool_planes(x, call.out());
  if (p.oh * p.ow == 0) return;
  const T* in = x.data<T>();
  T* out = call.out().data<T>();
  for_each_plane(p, adaptive_window(p.h, p.w, p.oh, p.ow), [&](int64_t plane) {
    const T* src = in + plane * p.h * p.w;
    T* dst = out + plane * p.oh * p.ow;
    for (int64_t oh = 0; oh < p.oh; ++oh) {
      const auto [h0, h1] = adaptive_range(oh, p.h, p.oh);
      for (int64_t ow = 0; ow < p.ow; ++ow) {
        const auto [w0, w1] = adaptive_range(ow, p.w, p.ow);
        C sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) sum += C(src[ih * p.w + iw]);
        dst[oh * p.ow + ow] = T(sum / C((h1 - h0) * (w1 - w0)));
      }
    }
  });
}

// Channels-last pooling: x's channels are innermost (stride 1), so each
// output pixel is a loop over the channels per window tap, which vectorizes;
// y has any strides. Each channel sees its taps in the order the plane loops
// above see them, so the results are theirs bitwise. taps(r, c, f) calls
// f(ih, iw) for the taps of output pixel (r, c) in row-major order, fold(a, v)
// folds a value into an accumulator that starts at `start`, and done(a, r, c)
// is the pixel's result.
template <typename T, typename C, typename Taps, typename Fold, typename Done>
void pool_nhwc(const KernelCall& call, int64_t taps_per_pixel, C start, Taps taps, Fold fold,
               Done done) {
  const Tensor& x = call.in(0);
  const Tensor& y = call.out();
  const int64_t channels = x.size(1), oh = y.size(2), ow = y.size(3);
  const Shape &xs = x.strides(), &ys = y.strides();
  const T* in = x.data<T>();
  T* out = y.data<T>();
  const int64_t per_row = std::max<int64_t>(1, ow * channels * taps_per_pixel);
  parallel_for(y.size(0) * oh, std::max<int64_t>(1, kParallelGrain / per_row),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> acc(static_cast<size_t>(channels));
                 C* __restrict a = acc.data();
                 for (int64_t row = begin; row < end; ++row) {
                   const int64_t n = row / oh, r = row % oh;
                   for (int64_t col = 0; col < ow; ++col) {
                     std::fill(acc.begin(), acc.end(), start);
                     taps(r, col, [&](int64_t ih, int64_t iw) {
                       const T* __restrict px = in + n * xs[0] + ih * xs[2] + iw * xs[3];
                       for (int64_t ch = 0; ch < channels; ++ch) a[ch] = fold(a[ch], C(px[ch]));
                     });
                     T* o = out + n * ys[0] + r * ys[2] + col * ys[3];
                     if (ys[1] == 1) {
                       for (int64_t ch = 0; ch < channels; ++ch) o[ch] = T(done(a[ch], r, col));
                     } else {
                       for (int64_t ch = 0; ch < channels; ++ch)
                         o[ch * ys[1]] = T(done(a[ch], r, col));
                     }
                   }
                 }
               });
}

template <typename T>
void max_pool_nhwc(const KernelCall& call) {
  using C = compute_t<T>;
  const auto& k = call.attrs.ints(0);
  const auto& s = call.attrs.ints(1);
  const auto& pad = call.attrs.ints(2);
  const auto& d = call.attrs.ints(3);
  const int64_t h = call.in(0).size(2), w = call.in(0).size(3);
  const auto taps = [&](int64_t r, int64_t c, auto&& f) {
    for (int64_t kh = 0; kh < k[0]; ++kh) {
      const int64_t ih = r * s[0] - pad[0] + kh * d[0];
      if (ih < 0 || ih >= h) continue;
      for (int64_t kw = 0; kw < k[1]; ++kw) {
        const int64_t iw = c * s[1] - pad[1] + kw * d[1];
        if (iw >= 0 && iw < w) f(ih, iw);
      }
    }
  };
  pool_nhwc<T>(
      call, k[0] * k[1], -std::numeric_limits<C>::infinity(), taps,
      [](C a, C v) { return max_keep_nan(a, v); }, [](C a, int64_t, int64_t) { return a; });
}

template <typename T>
void adaptive_avg_pool_nhwc(const KernelCall& call) {
  using C = compute_t<T>;
  const int64_t h = call.in(0).size(2), w = call.in(0).size(3);
  const int64_t oh = call.out().size(2), ow = call.out().size(3);
  if (oh * ow == 0) return;
  const auto taps = [&](int64_t r, int64_t c, auto&& f) {
    const auto [h0, h1] = adaptive_range(r, h, oh);
    const auto [w0, w1] = adaptive_range(c, w, ow);
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) f(ih, iw);
  };
  pool_nhwc<T>(
      call, adaptive_window(h, w, oh, ow), C(0), taps, [](C a, C v) { return a + v; },
      [&](C sum, int64_t r, int64_t c) {
        const auto [h0, h1] = adaptive_range(r, h, oh);
        const auto [w0, w1] = adaptive_range(c, w, ow);
        return sum / C((h1 - h0) * (w1 - w0));
      });
}

// A pool on any layouts: channels last where x is (any y), else the plane
// loops, into a temporary where y is not row-major.
void run_pool(const KernelCall& call, void (*planes)(const KernelCall&),
              void (*nhwc)(const KernelCall&)) {
  if (call.out().numel() == 0) return;
  if (nhwc && channels_last(call.in(0))) return nhwc(call);
  if (call.out().is_contiguous()) return planes(call);
  through_row_major(call, planes);
}

// conv1d/conv2d with an epilogue (backends/epilogue.h): the convolution as
// eager runs it, then the residual add and the relu in one pass over the
// result while it is still in cache, each element rounded as eager's add and
// relu round it, so the result is eager's bitwise. (oneDNN's post-ops would
// not be: its sum post-op starts the accumulation from the residual, and its
// relu post-op turns NaN into 0.)
std::string conv_epilogue_supports(OpId, std::span<const ops::TensorMeta>,
                                   const ops::TensorMeta& output, const ops::Attrs&,
                                   const Epilogue& epilogue) {
  if (output.dtype != kFloat32)
    return detail::str_cat("the CPU runs it on ", output.dtype, ", not float32");
  if (!contiguous_layout(output.sizes, output.strides) &&
      !channels_last_layout(output.sizes, output.strides))
    return detail::str_cat("its result's strides ", output.strides,
                           " are neither row-major nor channels last");
  size_t adds = 0;
  for (Epilogue::Kind k : epilogue.ops) adds += k == Epilogue::Kind::kAdd;
  if (adds > 1) return "it takes one residual add";
  return "";
}

void conv_epilogue_kernel(const KernelCall& call, const Epilogue& epilogue) {
  const bool add = std::find(epilogue.ops.begin(), epilogue.ops.end(), Epilogue::Kind::kAdd) !=
                   epilogue.ops.end();
  const size_t conv_inputs = add ? call.inputs.size() - 1 : call.inputs.size();
  conv_kernel(KernelCall{call.schema, call.inputs.subspan(0, conv_inputs), call.outputs, call.attrs,
                         call.prepared});
  Tensor y = call.out();
  // The residual in y's memory order (y is row-major or channels last).
  Tensor r;
  if (add) {
    r = call.inputs.back();
    if (r.strides() != y.strides())
      r = channels_last(y) ? r.permute({0, 2, 3, 1}).contiguous() : r.contiguous();
  }
  float* out = y.data<float>();
  const float* residual = add ? r.data<float>() : nullptr;
  // The ops in their order (an add before a relu, or either alone).
  const bool relu_first = !epilogue.ops.empty() && epilogue.ops.front() == Epilogue::Kind::kRelu;
  const bool relu = std::find(epilogue.ops.begin(), epilogue.ops.end(), Epilogue::Kind::kRelu) !=
                    epilogue.ops.end();
  // One branch-free loop per form, over pointers that do not alias, so that
  // each vectorizes (one loop with the tests inside ran 13 ms of a frozen
  // ResNet-50's 50 ms here). v < 0 ? 0 : v keeps NaN, as eager's relu.
  parallel_for(y.numel(), kParallelGrain, [out, residual, relu, relu_first](int64_t b, int64_t e) {
    float* __restrict o = out + b;
    const float* __restrict r = residual ? residual + b : nullptr;
    const int64_t n = e - b;
    if (!r) {
      for (int64_t i = 0; i < n; ++i) o[i] = o[i] < 0.f ? 0.f : o[i];
    } else if (relu_first) {
      for (int64_t i = 0; i < n; ++i) o[i] = (o[i] < 0.f ? 0.f : o[i]) + r[i];
    } else if (relu) {
      for (int64_t i = 0; i < n; ++i) {
        const float v = o[i] + r[i];
        o[i] = v < 0.f ? 0.f : v;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = o[i] + r[i];
    }
  });
}

}  // namespace
}  // namespace cpu

void register_cpu_conv_pool_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::conv1d, cpu::conv_kernel);
  t.set(OpId::conv2d, cpu::conv_kernel);
  for (OpId op : {OpId::conv1d, OpId::conv2d}) {
    register_epilogue_lowering(DeviceKind::CPU, op,
                               {cpu::conv_epilogue_supports, cpu::conv_epilogue_kernel});
    register_input_preparation(DeviceKind::CPU, op, {1, cpu::prepare_conv_weights});
  }
  t.set(OpId::max_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(), [&]<typename T>() {
      cpu::run_pool(c, cpu::max_pool<T>, cpu::max_pool_nhwc<T>);
    });
  });
  t.set(OpId::avg_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(),
                     [&]<typename T>() { cpu::run_pool(c, cpu::avg_pool<T>, nullptr); });
  });
  t.set(OpId::adaptive_avg_pool2d, [](const KernelCall& c) {
    cpu::visit_float(c.out().dtype(), [&]<typename T>() {
      cpu::run_pool(c, cpu::adaptive_avg_pool<T>, cpu::adaptive_avg_pool_nhwc<T>);
    });
  });
}

}  // namespace kiln::backend
