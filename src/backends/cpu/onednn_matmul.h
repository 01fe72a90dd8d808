// bfloat16 matrix products through oneDNN's matmul primitive (float32
// accumulation, one rounding at the end), used where this CPU supports it.
#pragma once

#include <cstdint>

#include "backends/cpu/onednn_gemm.h"
#include "kiln/dtype.h"

namespace kiln::backend::cpu {

// c (row-major, leading dim ldc) = alpha * a @ b + beta * c, beta == 0 ignoring c.
// Falls back to float32 sgemm and a final rounding when oneDNN has no bf16
// kernel for this CPU or these strides.
void gemm_bf16(const MatrixRef<BFloat16>& a, const MatrixRef<BFloat16>& b, BFloat16* c,
               int64_t ldc, float alpha, float beta);

}  // namespace kiln::backend::cpu
