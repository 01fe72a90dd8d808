#include "backends/cpu/onednn_matmul.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_context.h"
#include "backends/cpu/weight_cache.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

// A cached primitive, or none when oneDNN cannot build one for the key.
struct MatmulPrimitive {
  bool available = false;
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

template <typename T>
constexpr dnnl::memory::data_type onednn_type() {
  if constexpr (std::is_same_v<T, float>)
    return dnnl::memory::data_type::f32;
  else if constexpr (std::is_same_v<T, Half>)
    return dnnl::memory::data_type::f16;
  else
    return dnnl::memory::data_type::bf16;
}

// Strides of size-1 dims are meaningless; oneDNN wants them consistent.
template <typename T>
dnnl::memory::desc strided_desc(const MatrixRef<T>& m) {
  const int64_t cs = m.cols <= 1 ? 1 : m.col_stride;
  const int64_t rs =
      m.rows <= 1 ? std::max<int64_t>(m.cols, 1) * std::max<int64_t>(cs, 1) : m.row_stride;
  return dnnl::memory::desc({m.rows, m.cols}, onednn_type<T>(), {rs, cs});
}

template <typename T>
MatmulPrimitive make_matmul(const MatrixRef<T>& a, const MatrixRef<T>& b, int64_t ldc, float alpha,
                            float beta) {
  MatmulPrimitive m;
  try {
    m.a = strided_desc(a);
    m.b = strided_desc(b);
    m.c = dnnl::memory::desc({a.rows, b.cols}, onednn_type<T>(), {ldc, 1});
    dnnl::primitive_attr attr = onednn_default_attr();
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.a, m.b, m.c), attr, onednn_engine());
    m.primitive = dnnl::matmul(pd);
    m.scratchpad = pd.scratchpad_desc();
    m.available = true;
  } catch (const dnnl::error&) {
    m.available =
        false;  // oneDNN has no kernel for this type here: the caller goes through float32
  }
  return m;
}

// The registry of matmul primitives, keyed by dtype, shapes, strides, alpha and beta.
OnednnPrimitiveCache<MatmulPrimitive>& matmul_cache() {
  static OnednnPrimitiveCache<MatmulPrimitive> cache;
  return cache;
}

int64_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

template <typename T>
std::vector<float> to_float(const MatrixRef<T>& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  parallel_for(m.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m.cols, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   for (int64_t j = 0; j < m.cols; ++j)
                     out[i * m.cols + j] = float(m.data[i * m.row_stride + j * m.col_stride]);
               });
  return out;
}

template <typename T>
void gemm_via_f32(const MatrixRef<T>& a, const MatrixRef<T>& b, T* c, int64_t ldc, float alpha,
                  float beta) {
  const int64_t m = a.rows, n = b.cols;
  const std::vector<float> fa = to_float(a), fb = to_float(b);
  std::vector<float> fc = beta != 0.f ? to_float(MatrixRef<T>{c, m, n, ldc, 1})
                                      : std::vector<float>(static_cast<size_t>(m * n));
  gemm_f32({fa.data(), m, a.cols, a.cols, 1}, {fb.data(), b.rows, n, n, 1}, fc.data(), n, alpha,
           beta);
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = T(fc[i * n + j]);
               });
}

// The cached primitive for this product; available is false when oneDNN has
// no kernel for it.
template <typename T>
std::shared_ptr<const MatmulPrimitive> matmul_for(const MatrixRef<T>& a, const MatrixRef<T>& b,
                                                  int64_t ldc, float alpha, float beta) {
  const std::vector<int64_t> key = {static_cast<int64_t>(onednn_type<T>()),
                                    a.rows,
                                    a.cols,
                                    b.cols,
                                    a.row_stride,
                                    a.col_stride,
                                    b.row_stride,
                                    b.col_stride,
                                    ldc,
                                    float_bits(alpha),
                                    float_bits(beta)};
  return matmul_cache().get(key, [&] { return make_matmul(a, b, ldc, alpha, beta); });
}

template <typename T>
void run_matmul(const MatmulPrimitive& mm, const MatrixRef<T>& a, const MatrixRef<T>& b, T* c) {
  try {
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(mm.a, engine, const_cast<T*>(a.data))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(mm.b, engine, const_cast<T*>(b.data))},
        {DNNL_ARG_DST, dnnl::memory(mm.c, engine, c)}};
    const size_t scratch = mm.scratchpad.get_size();
    if (scratch > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(mm.scratchpad, engine, onednn_scratchpad(scratch)));
    }
    dnnl::stream& stream = onednn_stream();
    mm.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("onednn: matmul primitive failed: ", e.what()));
  }
}

template <typename T>
void gemm_half(const MatrixRef<T>& a, const MatrixRef<T>& b, T* c, int64_t ldc, float alpha,
               float beta) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm_via_f32(a, b, c, ldc, alpha, beta);
  const auto mm = matmul_for(a, b, ldc, alpha, beta);
  if (!mm->available) return gemm_via_f32(a, b, c, ldc, alpha, beta);
  run_matmul(*mm, a, b, c);
}

// linear's primitive: src [M, K] row-major, the weight [N, K] in the layout
// oneDNN prefers (reordered once per weight, weight cache), bias added by the
// primitive, dst [M, N] row-major.
struct LinearPrimitive {
  dnnl::matmul primitive;
  dnnl::memory::desc src, weights_user, weights, bias, dst, scratchpad;
  dnnl::reorder weights_in;
};

LinearPrimitive make_linear(int64_t m, int64_t k, int64_t n, bool has_bias,
                            LinearActivation activation) {
  using dnnl::memory;
  const auto f32 = memory::data_type::f32;
  LinearPrimitive p;
  p.src = memory::desc({m, k}, f32, memory::format_tag::ab);
  p.weights_user = memory::desc({k, n}, f32, memory::format_tag::ba);  // W [N, K] read as W^T
  p.bias = has_bias ? memory::desc({1, n}, f32, memory::format_tag::ab) : memory::desc();
  p.dst = memory::desc({m, n}, f32, memory::format_tag::ab);
  const memory::desc weights_any({k, n}, f32, memory::format_tag::any);
  dnnl::primitive_attr attr = onednn_default_attr();
  if (activation != LinearActivation::kNone) {
    dnnl::post_ops post;
    post.append_eltwise(1.f,
                        activation == LinearActivation::kGeluErf
                            ? dnnl::algorithm::eltwise_gelu_erf
                            : dnnl::algorithm::eltwise_gelu_tanh,
                        0.f, 0.f);
    attr.set_post_ops(post);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.src, weights_any, p.bias, p.dst), attr,
                                        onednn_engine());
  p.primitive = dnnl::matmul(pd);
  p.weights = pd.weights_desc();
  p.scratchpad = pd.scratchpad_desc();
  p.weights_in = dnnl::reorder(
      dnnl::reorder::primitive_desc(onednn_engine(), p.weights_user, onednn_engine(), p.weights));
  return p;
}

dnnl::memory reorder_linear_weight(const LinearPrimitive& p, const float* w) {
  return reordered_copy(p.weights_in, p.weights_user, w, p.weights);
}

}  // namespace

void linear_f32_primitive(const float* x, int64_t m, int64_t k, const Tensor& weight,
                          const float* bias, float* y, LinearActivation activation) {
  const int64_t n = weight.size(0);
  static OnednnPrimitiveCache<LinearPrimitive> cache;
  try {
    const auto p = cache.get({m, k, n, bias != nullptr, static_cast<int64_t>(activation)},
                             [&] { return make_linear(m, k, n, bias != nullptr, activation); });
    const float* w = static_cast<const float*>(weight.data_ptr());
    const auto cached = derived_weight(
        weight, DerivedWeight::matmul_layout, p->weights.get_size(),
        [&] { return std::make_shared<const dnnl::memory>(reorder_linear_weight(*p, w)); },
        [&](const void* c) {
          return static_cast<const dnnl::memory*>(c)->get_desc() == p->weights;
        });
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(p->src, engine, const_cast<float*>(x))},
        {DNNL_ARG_WEIGHTS,
         cached ? *static_cast<const dnnl::memory*>(cached.get()) : reorder_linear_weight(*p, w)},
        {DNNL_ARG_DST, dnnl::memory(p->dst, engine, y)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias, engine, const_cast<float*>(bias)));
    const size_t scratch = p->scratchpad.get_size();
    if (scratch > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(p->scratchpad, engine, onednn_scratchpad(scratch)));
    }
    dnnl::stream& stream = onednn_stream();
    p->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("linear: oneDNN matmul primitive failed: ", e.what()));
  }
}

void gemm_bf16(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b, BFloat16* c, int64_t ldc,
               float alpha, float beta) {
  gemm_half(a, b, c, ldc, alpha, beta);
}

void gemm_f16(const MatrixRef<Half>& a, const MatrixRef<Half>& b, Half* c, int64_t ldc, float alpha,
              float beta) {
  gemm_half(a, b, c, ldc, alpha, beta);
}

bool gemm_f32_primitive(const MatrixRef<float>& a, const MatrixRef<float>& b, float* c, int64_t ldc,
                        float alpha, float beta) {
  const auto mm = matmul_for(a, b, ldc, alpha, beta);
  if (!mm->available) return false;
  run_matmul(*mm, a, b, c);
  return true;
}

}  // namespace kiln::backend::cpu
