// 16-bit float matrix products through oneDNN's matmul primitive (float32
// accumulation, one rounding at the end), where this CPU has kernels for them.
#pragma once

#include <cstdint>

#include "backends/cpu/onednn_gemm.h"
#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::backend::cpu {

// c (row-major, leading dim ldc) = alpha * a @ b + beta * c, beta == 0 ignoring c.
// Falls back to float32 sgemm and a final rounding when oneDNN has no kernel
// for this dtype on this CPU (float16 before AVX512-FP16) or for these strides.
void gemm_bf16(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b, BFloat16* c,
               int64_t ldc, float alpha, float beta);
void gemm_f16(const MatrixRef<Half>& a, const MatrixRef<Half>& b, Half* c, int64_t ldc,
              float alpha, float beta);

// float32 through the matmul primitive, for a transposed right operand (a
// linear layer's weight), which sgemm reads slowly at some sizes. m, n, k > 0.
// Returns false, doing nothing, when oneDNN has no kernel for these strides.
bool gemm_f32_primitive(const MatrixRef<float>& a, const MatrixRef<float>& b, float* c,
                        int64_t ldc, float alpha, float beta);

// An activation the linear primitive applies to its result as it writes it
// (a oneDNN post-op: its own gelu, within float32 tolerance of kiln's, not
// bitwise).
enum class LinearActivation : uint8_t { kNone, kGeluErf, kGeluTanh };

// linear without gradient recording, float32: y [m, n] = x [m, k] @ weight^T + bias
// (bias may be null), all contiguous, through a matmul primitive on the weight
// layout oneDNN prefers; the reordered weight is kept in the weight cache.
void linear_f32_primitive(const float* x, int64_t m, int64_t k, const Tensor& weight,
                          const float* bias, float* y,
                          LinearActivation activation = LinearActivation::kNone);

}  // namespace kiln::backend::cpu
