#include "backends/cpu/onednn_matmul.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_context.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

// A cached primitive, or none when oneDNN cannot build one for the key.
struct Bf16Matmul {
  bool available = false;
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

// Strides of size-1 dims are meaningless; oneDNN wants them consistent.
dnnl::memory::desc strided_desc(const MatrixRef<BFloat16>& m) {
  const int64_t rs = m.rows <= 1 ? std::max<int64_t>(m.cols, 1) * std::max<int64_t>(m.col_stride, 1) : m.row_stride;
  const int64_t cs = m.cols <= 1 ? 1 : m.col_stride;
  return dnnl::memory::desc({m.rows, m.cols}, dnnl::memory::data_type::bf16, {rs, cs});
}

Bf16Matmul make_bf16_matmul(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b,
                            int64_t ldc, float alpha, float beta) {
  Bf16Matmul m;
  try {
    m.a = strided_desc(a);
    m.b = strided_desc(b);
    m.c = dnnl::memory::desc({a.rows, b.cols}, dnnl::memory::data_type::bf16, {ldc, 1});
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
    m.available = false;  // unimplemented here: the caller converts to float32 instead
  }
  return m;
}

// The registry of bfloat16 matmul primitives, keyed by shapes, strides, alpha and beta.
OnednnPrimitiveCache<Bf16Matmul>& bf16_matmul_cache() {
  static OnednnPrimitiveCache<Bf16Matmul> cache;
  return cache;
}

int64_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

void gemm_bf16_via_f32(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b, BFloat16* c,
                       int64_t ldc, float alpha, float beta) {
  auto to_float = [](const MatrixRef<BFloat16>& m) {
    std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
    for (int64_t i = 0; i < m.rows; ++i)
      for (int64_t j = 0; j < m.cols; ++j)
        out[i * m.cols + j] = float(m.data[i * m.row_stride + j * m.col_stride]);
    return out;
  };
  const std::vector<float> fa = to_float(a), fb = to_float(b);
  std::vector<float> fc(static_cast<size_t>(a.rows * b.cols), 0.f);
  if (beta != 0.f) {
    for (int64_t i = 0; i < a.rows; ++i)
      for (int64_t j = 0; j < b.cols; ++j) fc[i * b.cols + j] = float(c[i * ldc + j]);
  }
  gemm_f32({fa.data(), a.rows, a.cols, a.cols, 1}, {fb.data(), b.rows, b.cols, b.cols, 1},
           fc.data(), b.cols, alpha, beta);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.cols; ++j) c[i * ldc + j] = BFloat16(fc[i * b.cols + j]);
}

}  // namespace

void gemm_bf16(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b, BFloat16* c,
               int64_t ldc, float alpha, float beta) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm_bf16_via_f32(a, b, c, ldc, alpha, beta);
  const std::vector<int64_t> key = {m,          k,  n,  a.row_stride, a.col_stride, b.row_stride,
                                    b.col_stride, ldc, float_bits(alpha), float_bits(beta)};
  auto mm = bf16_matmul_cache().get(key, [&] { return make_bf16_matmul(a, b, ldc, alpha, beta); });
  if (!mm->available) return gemm_bf16_via_f32(a, b, c, ldc, alpha, beta);
  try {
    const dnnl::engine& engine = onednn_engine();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(mm->a, engine, const_cast<BFloat16*>(a.data))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(mm->b, engine, const_cast<BFloat16*>(b.data))},
        {DNNL_ARG_DST, dnnl::memory(mm->c, engine, c)}};
    const size_t scratch = mm->scratchpad.get_size();
    if (scratch > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(mm->scratchpad, engine, onednn_scratchpad(scratch)));
    }
    dnnl::stream& stream = onednn_stream();
    mm->primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("onednn: bfloat16 matmul failed: ", e.what()));
  }
}

}  // namespace kiln::backend::cpu
