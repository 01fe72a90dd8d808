// CPU kernels of the matrix products: float32 through oneDNN's sgemm (reading
// transposed operands in place), float64 through our blocked kernel, the 16-bit
// floats through oneDNN's matmul primitive (or float32 sgemm where it has none).
#include <algorithm>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_gemm.h"
#include "backends/cpu/onednn_matmul.h"
#include "backends/cpu/scalar_ops.h"
#include "backends/cpu/weight_cache.h"
#include "backends/epilogue.h"
#include "core/shape_util.h"
#include "kiln/autograd.h"

namespace kiln::backend {
namespace cpu {
namespace {

using ops::OpId;

template <typename T>
void gemm(const MatrixRef<T>& a, const MatrixRef<T>& b, T* c, int64_t ldc, compute_t<T> alpha,
          compute_t<T> beta) {
  if constexpr (std::is_same_v<T, float>) gemm_f32(a, b, c, ldc, alpha, beta);
  else if constexpr (std::is_same_v<T, double>) gemm_f64(a, b, c, ldc, alpha, beta);
  else if constexpr (std::is_same_v<T, BFloat16>) gemm_bf16(a, b, c, ldc, alpha, beta);
  else gemm_f16(a, b, c, ldc, alpha, beta);
}

// The last two dims of t (from element offset) as a matrix.
template <typename T>
MatrixRef<T> matrix_at(const Tensor& t, int64_t offset) {
  const int64_t d = t.dim();
  return {t.data<T>() + offset, t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1)};
}

// The stride between consecutive rows when the dims before the last of t merge
// into one (so [B..., M, K] is a [B*M, K] matrix); nullopt when they don't.
// Dims of size 1 are skipped: their strides are arbitrary.
std::optional<int64_t> merged_row_stride(const Tensor& t) {
  std::optional<int64_t> row_stride;
  int64_t expected = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!row_stride) row_stride = t.stride(d);
    else if (t.stride(d) != expected) return std::nullopt;
    expected = t.stride(d) * t.size(d);
  }
  return row_stride.value_or(t.size(-1));  // a single row
}

// Element offsets of every batch matrix of t (already expanded to the full batch shape).
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  std::vector<int64_t> offsets(static_cast<size_t>(shape_numel(batch)), 0);
  int64_t span = 1;
  for (size_t d = batch.size(); d-- > 0;) {
    for (size_t i = 0; i < offsets.size(); ++i) {
      offsets[i] += static_cast<int64_t>((i / span) % batch[d]) * t.stride(static_cast<int64_t>(d));
    }
    span *= batch[d];
  }
  return offsets;
}

// out (contiguous, full batch shape [B..., M, N]) = alpha * a @ b + beta * out.
template <typename T>
void batched_gemm(const Tensor& out, const Tensor& a, const Tensor& b, compute_t<T> alpha,
                  compute_t<T> beta) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  T* c = out.data<T>();
  if (b.dim() == 2) {  // one GEMM over all batch rows when they merge, like linear layers
    if (const auto row_stride = merged_row_stride(a)) {
      const int64_t rows = n == 0 ? 0 : out.numel() / n;
      gemm<T>({a.data<T>(), rows, k, *row_stride, a.stride(-1)}, matrix_at<T>(b, 0), c, n, alpha,
              beta);
      return;
    }
  }
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  Shape full_a = batch, full_b = batch;
  full_a.insert(full_a.end(), {m, k});
  full_b.insert(full_b.end(), {k, n});
  const Tensor ea = a.expand(full_a), eb = b.expand(full_b);
  const auto off_a = batch_offsets(ea, batch), off_b = batch_offsets(eb, batch);
  const int64_t count = static_cast<int64_t>(off_a.size());
  auto one = [&](int64_t i) {
    gemm<T>(matrix_at<T>(ea, off_a[i]), matrix_at<T>(eb, off_b[i]), c + i * m * n, n, alpha, beta);
  };
  // Many small products: one per thread (sgemm runs single-threaded inside a
  // parallel region). Large ones: in turn, each using every thread.
  if (m * n * k < 64 * 64 * 64 && count > 1) {
    parallel_for(count, std::max<int64_t>(1, kParallelGrain * 8 / std::max<int64_t>(m * n * k, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) one(i);
                 });
  } else {
    for (int64_t i = 0; i < count; ++i) one(i);
  }
}

// out (contiguous, rows of v.numel()) += beta * v on every row.
void add_row_vector(const Tensor& out, const Tensor& v, float beta) {
  const int64_t n = v.numel(), rows = n == 0 ? 0 : out.numel() / n;
  float* o = out.data<float>();
  const float* bias = v.data<float>();
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   float* row = o + r * n;
                   for (int64_t j = 0; j < n; ++j) row[j] += beta * bias[j];
                 }
               });
}

// out = alpha * a @ b + beta * init (init broadcast to out's shape and ignored when
// beta == 0). a [..., M, K] and b [..., K, N] broadcast over batch dims; out is
// contiguous with the full shape or that shape less the dims of 1-D operands.
void product(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta,
             const Tensor& init) {
  const int64_t m = a.size(-2), n = b.size(-1);
  const Shape batch_a(a.sizes().begin(), a.sizes().end() - 2);
  const Shape batch_b(b.sizes().begin(), b.sizes().end() - 2);
  Shape full = broadcast_pair(batch_a, batch_b, "matmul");
  full.insert(full.end(), {m, n});
  const bool use_init = init.defined() && beta != 0;
  Tensor o = out.view(full);
  const float alpha32 = float(alpha);
  // float32: the product first, then beta * init added by our own broadcast
  // kernel. sgemm's beta != 0 path ran 6x slower than beta == 0 on a 16-core
  // Xeon ([128, 768] @ [768, 768] with a bias: 765 us against 125 us).
  if (out.dtype() == kFloat32) {
    batched_gemm<float>(o, a, b, alpha32, 0.f);
    if (!use_init) return;
    if (init.dim() == 1 && init.is_contiguous() && init.dtype() == kFloat32) {
      add_row_vector(o, init, float(beta));  // a linear layer's bias
    } else {
      o.add_(init.expand(full), beta);
    }
    return;
  }
  if (use_init) o.copy_(init.expand(full));
  const float beta32 = use_init ? float(beta) : 0.f;
  switch (out.dtype()) {
    case kFloat64: return batched_gemm<double>(o, a, b, alpha, use_init ? beta : 0.0);
    case kBFloat16: return batched_gemm<BFloat16>(o, a, b, alpha32, beta32);
    default: return batched_gemm<Half>(o, a, b, alpha32, beta32);
  }
}

void matmul_kernel(const KernelCall& c) {
  const Tensor a = c.in(0).dim() == 1 ? c.in(0).unsqueeze(0) : c.in(0);
  const Tensor b = c.in(1).dim() == 1 ? c.in(1).unsqueeze(1) : c.in(1);
  product(c.out(), a, b, 1, 0, Tensor());
}

// Whether linear multiplies by a cached copy of its weight (weight_cache.h):
// float32 inference with a weight worth keeping (64K elements).
bool use_cached_weight(const Tensor& a, const Tensor& weight) {
  if (a.dtype() != kFloat32 || !weight.is_contiguous() || weight.numel() < 65536) return false;
  return !is_grad_enabled();
}

// The cached copy linear reads, by the number of rows (measured by
// bench/cpu_paths_bench.cpp, docs/benchmarks.md "Size thresholds of the CPU
// backend"): under 16 rows sgemm on a contiguous W^T (at BERT-base's shapes
// up to 2.2x faster than sgemm reading W transposed in place or the matmul
// primitive, measured on AVX2; BERT-base at 8 tokens 1.29x faster); from 16
// rows on, with contiguous operands, the matmul primitive on the weight layout
// oneDNN prefers. The copy costs the weight's size in the cache.
constexpr int64_t kPrimitiveRows = 16;

// linear; `activation` where the matmul primitive runs it (as its post-op).
// Returns whether it applied the activation.
bool run_linear(const KernelCall& c, LinearActivation activation) {
  const Tensor a = c.in(0).dim() == 1 ? c.in(0).unsqueeze(0) : c.in(0);
  const Tensor bias = c.inputs.size() > 2 ? c.in(2) : Tensor();
  if (use_cached_weight(a, c.in(1))) {
    const int64_t k = a.size(-1), rows = k > 0 ? a.numel() / k : 0;
    if (rows >= kPrimitiveRows && a.is_contiguous() && c.out().is_contiguous() &&
        (!bias.defined() || bias.is_contiguous())) {
      linear_f32_primitive(a.data<float>(), rows, k, c.in(1),
                           bias.defined() ? bias.data<float>() : nullptr, c.out().data<float>(),
                           activation);
      return true;
    }
    if (const Tensor wt = cached_transposed_weight(c.in(1)); wt.defined()) {
      product(c.out(), a, wt, 1, 1, bias);
      return activation == LinearActivation::kNone;
    }
  }
  // The bias is the GEMM's C operand (beta = 1): the add fuses into the product.
  product(c.out(), a, c.in(1).t(), 1, 1, bias);
  return activation == LinearActivation::kNone;
}

void linear_kernel(const KernelCall& c) { run_linear(c, LinearActivation::kNone); }

// linear with a gelu epilogue (backends/epilogue.h): on the matmul
// primitive, oneDNN's gelu as a post-op, applied as the product is written
// (within float32 tolerance of eager's gelu, not bitwise: strict leaves the
// two apart); elsewhere the product as eager runs it, then eager's gelu over
// the result.
std::string linear_epilogue_supports(OpId, std::span<const ops::TensorMeta> inputs,
                                     const ops::TensorMeta& output, const ops::Attrs&,
                                     const Epilogue& epilogue) {
  if (output.dtype != kFloat32)
    return detail::str_cat("the CPU runs it on ", output.dtype, ", not float32");
  if (epilogue.ops.size() != 1 ||
      (epilogue.ops[0] != Epilogue::Kind::kGelu && epilogue.ops[0] != Epilogue::Kind::kGeluTanh))
    return "linear takes one gelu as its epilogue";
  if (inputs.size() < 2 || inputs[0].dtype != kFloat32 || inputs[1].dtype != kFloat32)
    return "its operands are not float32";
  return "";
}

bool linear_epilogue_bitwise(std::span<const ops::TensorMeta>, const Epilogue&) { return false; }

void linear_epilogue_kernel(const KernelCall& call, const Epilogue& epilogue) {
  const bool tanh_form = epilogue.ops[0] == Epilogue::Kind::kGeluTanh;
  if (run_linear(call, tanh_form ? LinearActivation::kGeluTanh : LinearActivation::kGeluErf))
    return;
  // One loop per form, each vectorizable.
  float* y = call.out().data<float>();
  parallel_for(call.out().numel(), kParallelGrain, [y, tanh_form](int64_t b, int64_t e) {
    if (tanh_form) {
      for (int64_t i = b; i < e; ++i) y[i] = scalar::gelu_tanh(y[i]);
    } else {
      for (int64_t i = b; i < e; ++i) y[i] = scalar::gelu_erf(y[i]);
    }
  });
}

}  // namespace
}  // namespace cpu

void register_cpu_linalg_kernels(KernelTable& t) {
  register_epilogue_lowering(
      DeviceKind::CPU, ops::OpId::linear,
      {cpu::linear_epilogue_supports, cpu::linear_epilogue_kernel, cpu::linear_epilogue_bitwise});
  using ops::OpId;
  t.set(OpId::matmul, cpu::matmul_kernel);
  t.set(OpId::bmm, [](const KernelCall& c) {
    cpu::product(c.out(), c.in(0), c.in(1), 1, 0, Tensor());
  });
  t.set(OpId::addmm, [](const KernelCall& c) {
    cpu::product(c.out(), c.in(1), c.in(2), c.attrs.scalar(1).to_double(),
                 c.attrs.scalar(0).to_double(), c.in(0));
  });
  t.set(OpId::linear, cpu::linear_kernel);
}

}  // namespace kiln::backend
