// The matrix-multiply entry points of the CPU backend, shared by the matrix
// products and the float64 convolution: float32 through oneDNN's sgemm, float64
// through our own cache-blocked OpenMP kernel (oneDNN has no double GEMM).
#pragma once

#include <cstdint>

namespace kiln::backend::cpu {

// A strided matrix operand: element (i, j) is data[i * row_stride + j * col_stride].
template <typename T>
struct MatrixRef {
  const T* data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;
};

// c (rows of a x cols of b, row-major with leading dim ldc) = alpha * a @ b + beta * c.
// beta == 0 overwrites c without reading it. Throws kiln::Error if oneDNN fails.
void gemm_f32(const MatrixRef<float>& a, const MatrixRef<float>& b, float* c, int64_t ldc,
              float alpha, float beta);
void gemm_f64(const MatrixRef<double>& a, const MatrixRef<double>& b, double* c, int64_t ldc,
              double alpha, double beta);

}  // namespace kiln::backend::cpu
