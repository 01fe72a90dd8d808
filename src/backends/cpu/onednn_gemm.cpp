#include "backends/cpu/onednn_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/onednn_matmul.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

// c = beta * c over an m x n block (beta == 0 writes zeros, whatever c held).
template <typename T>
void scale_output(T* c, int64_t m, int64_t n, int64_t ldc, T beta) {
  if (beta == T(1)) return;
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i) {
                   T* row = c + i * ldc;
                   if (beta == T(0)) std::fill(row, row + n, T(0));
                   else for (int64_t j = 0; j < n; ++j) row[j] *= beta;
                 }
               });
}

// A copy of m, row-major and contiguous.
template <typename T>
std::vector<T> pack_row_major(const MatrixRef<T>& m) {
  std::vector<T> out(static_cast<size_t>(m.rows * m.cols));
  parallel_for(m.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m.cols, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   for (int64_t j = 0; j < m.cols; ++j)
                     out[i * m.cols + j] = m.data[i * m.row_stride + j * m.col_stride];
               });
  return out;
}

// How sgemm reads an operand: 'N' when its rows are unit-stride, 'T' when its
// columns are; nullopt when neither (the operand must be packed first).
struct BlasOperand {
  char trans;
  int64_t ld;
};
std::optional<BlasOperand> blas_operand(const MatrixRef<float>& m) {
  // Strides of dims of size 1 are meaningless: any value reads the same element.
  const int64_t rs = m.rows <= 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride;
  const int64_t cs = m.cols <= 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride;
  if ((m.cols <= 1 || m.col_stride == 1) && rs >= std::max<int64_t>(m.cols, 1)) return BlasOperand{'N', rs};
  if ((m.rows <= 1 || m.row_stride == 1) && cs >= std::max<int64_t>(m.rows, 1)) return BlasOperand{'T', cs};
  return std::nullopt;
}

// The 4 x 16 register tile of the float64 kernel: acc stays in vector registers.
constexpr int64_t kTileRows = 4, kTileCols = 16;
constexpr int64_t kBlockRows = 64, kBlockCols = 256, kBlockDepth = 256;

inline void f64_tile(const double* a, int64_t lda, const double* b, int64_t ldb, int64_t kc,
                     double* c, int64_t ldc, double alpha) {
  double acc[kTileRows][kTileCols] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const double* bp = b + p * ldb;
    for (int64_t r = 0; r < kTileRows; ++r) {
      const double ar = a[r * lda + p];
      for (int64_t v = 0; v < kTileCols; ++v) acc[r][v] += ar * bp[v];
    }
  }
  for (int64_t r = 0; r < kTileRows; ++r)
    for (int64_t v = 0; v < kTileCols; ++v) c[r * ldc + v] += alpha * acc[r][v];
}

inline void f64_edge(const double* a, int64_t lda, const double* b, int64_t ldb, int64_t kc,
                     double* c, int64_t ldc, double alpha, int64_t mr, int64_t nr) {
  for (int64_t r = 0; r < mr; ++r) {
    for (int64_t p = 0; p < kc; ++p) {
      const double ar = alpha * a[r * lda + p];
      const double* bp = b + p * ldb;
      for (int64_t j = 0; j < nr; ++j) c[r * ldc + j] += ar * bp[j];
    }
  }
}

// One kBlockRows x kBlockCols block of c += alpha * a @ b, a and b packed row-major.
void f64_block(const double* a, const double* b, double* c, int64_t ldc, int64_t k, int64_t n,
               int64_t i0, int64_t i1, int64_t j0, int64_t j1, double alpha) {
  for (int64_t p0 = 0; p0 < k; p0 += kBlockDepth) {
    const int64_t kc = std::min(kBlockDepth, k - p0);
    for (int64_t i = i0; i < i1; i += kTileRows) {
      const int64_t mr = std::min(kTileRows, i1 - i);
      for (int64_t j = j0; j < j1; j += kTileCols) {
        const int64_t nr = std::min(kTileCols, j1 - j);
        const double* ap = a + i * k + p0;
        const double* bp = b + p0 * n + j;
        double* cp = c + i * ldc + j;
        if (mr == kTileRows && nr == kTileCols) f64_tile(ap, k, bp, n, kc, cp, ldc, alpha);
        else f64_edge(ap, k, bp, n, kc, cp, ldc, alpha, mr, nr);
      }
    }
  }
}

}  // namespace

void gemm_f32(const MatrixRef<float>& a, const MatrixRef<float>& b, float* c, int64_t ldc,
              float alpha, float beta) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_output(c, m, n, ldc, beta);
  std::vector<float> a_packed, b_packed;
  auto la = blas_operand(a);
  auto lb = blas_operand(b);
  const float* pa = a.data;
  const float* pb = b.data;
  if (!la) {
    a_packed = pack_row_major(a);
    pa = a_packed.data();
    la = BlasOperand{'N', k};
  }
  if (!lb) {
    b_packed = pack_row_major(b);
    pb = b_packed.data();
    lb = BlasOperand{'N', n};
  }
  // A transposed right operand (a linear layer's weight [n, k]) with 16 rows or
  // more goes through the matmul primitive: sgemm's kernels read it up to 5x
  // slower there (measured on AVX-512: [128, 3072] @ [3072, 768]^T 2.8 ms
  // against 1.3 ms). Below 16 rows neither wins at every shape
  // (bench/cpu_paths_bench.cpp); inference reads a cached W^T instead (linalg.cpp).
  if (la->trans == 'N' && lb->trans == 'T' && m >= 16 &&
      gemm_f32_primitive({pa, m, k, la->ld, 1}, {pb, k, n, 1, lb->ld}, c, ldc, alpha, beta)) {
    return;
  }
  const dnnl_status_t status =
      dnnl_sgemm(la->trans, lb->trans, m, n, k, alpha, pa, la->ld, pb, lb->ld, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error(detail::str_cat("onednn: sgemm failed with status ", static_cast<int>(status),
                                " for a ", m, "x", k, " @ ", k, "x", n, " product"));
  }
}

void gemm_f64(const MatrixRef<double>& a, const MatrixRef<double>& b, double* c, int64_t ldc,
              double alpha, double beta) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  scale_output(c, m, n, ldc, beta);
  if (k == 0) return;
  const std::vector<double> pa = pack_row_major(a);
  const std::vector<double> pb = pack_row_major(b);
  const int64_t row_blocks = (m + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  // Small products stay on one thread: waking the team costs more than they do.
  const int64_t grain = m * n * k < (int64_t{1} << 20) ? row_blocks * col_blocks : 1;
  parallel_for(row_blocks * col_blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t i0 = (blk / col_blocks) * kBlockRows, j0 = (blk % col_blocks) * kBlockCols;
      f64_block(pa.data(), pb.data(), c, ldc, k, n, i0, std::min(m, i0 + kBlockRows), j0,
                std::min(n, j0 + kBlockCols), alpha);
    }
  });
}

}  // namespace kiln::backend::cpu
