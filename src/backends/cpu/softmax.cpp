// CPU kernels of softmax and log_softmax, numerically stable (x - max). A row
// of -inf has max -inf and gives NaN, as PyTorch. Rows along an inner dim make
// three passes over a row that stays in cache (max; exp and sum; scale), so
// the input is read from memory once; along an outer dim the same passes run
// over blocks of columns.
#include <cmath>

#include "backends/cpu/reduce_engine.h"
#include "backends/cpu/vec_math.h"

namespace kiln::backend::cpu {
namespace {

// float and double keep exp(x - max) in the output between passes; the 16-bit
// types recompute it instead of rounding it to 16 bits twice.
template <typename T>
constexpr bool kStoresExp = std::is_same_v<T, compute_t<T>>;

// Sum of exp(x - m) over a row, writing the terms to y when kStore.
template <typename T, bool kStore>
double exp_sum_row(const T* x, T* y, int64_t n, compute_t<T> m) {
  using C = compute_t<T>;
  double total = 0;
  for (int64_t b = 0; b < n; b += kRowBlock) {
    const int64_t end = std::min(n, b + kRowBlock);
    C block = 0;  // a float sum over one block, added into double: accurate and vectorized
#pragma omp simd reduction(+ : block)
    for (int64_t i = b; i < end; ++i) {
      const C e = exp_f32(static_cast<C>(x[i]) - m);
      if constexpr (kStore) y[i] = e;
      block += e;
    }
    total += block;
  }
  return total;
}

// The row's maximum, NaN when the row holds one; one vectorized pass.
template <typename T>
compute_t<T> row_max(const T* x, int64_t n) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    const C v = static_cast<C>(x[i]);
    m = v > m ? v : m;
    nan |= v != v;
  }
  return nan ? std::numeric_limits<C>::quiet_NaN() : m;
}

template <typename T, bool kLog>
void softmax_row(const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  const C m = row_max(x, n);
  constexpr bool kStore = kStoresExp<T> && !kLog;
  const double total = exp_sum_row<T, kStore>(x, y, n, m);
  if constexpr (kLog) {
    const C log_sum = static_cast<C>(std::log(total));
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<C>(x[i]) - m) - log_sum);
  } else if constexpr (kStore) {
    const C inv = static_cast<C>(1 / total);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  } else {
    const C inv = static_cast<C>(1 / total);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(exp_f32(static_cast<C>(x[i]) - m) * inv);
  }
}

// Softmax down `rows` rows of ncols columns (row_stride apart), column-wise.
template <typename T, bool kLog>
void softmax_columns(const T* x, T* y, int64_t rows, int64_t row_stride, int64_t ncols) {
  using C = compute_t<T>;
  constexpr bool kStore = kStoresExp<T> && !kLog;
  C m[kColumns], acc[kColumns], scale[kColumns];
  double total[kColumns];
  for (int64_t j = 0; j < ncols; ++j) {
    m[j] = -std::numeric_limits<C>::infinity();
    total[j] = 0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ncols; ++j) m[j] = nan_max(m[j], static_cast<C>(x[r * row_stride + j]));
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kColumnRowBlock) {
    for (int64_t j = 0; j < ncols; ++j) acc[j] = 0;
    for (int64_t r = r0; r < std::min(rows, r0 + kColumnRowBlock); ++r) {
      for (int64_t j = 0; j < ncols; ++j) {
        const C e = exp_f32(static_cast<C>(x[r * row_stride + j]) - m[j]);
        if constexpr (kStore) y[r * row_stride + j] = e;
        acc[j] += e;
      }
    }
    for (int64_t j = 0; j < ncols; ++j) total[j] += acc[j];
  }
  for (int64_t j = 0; j < ncols; ++j) {
    scale[j] = static_cast<C>(kLog ? std::log(total[j]) : 1 / total[j]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* q = x + r * row_stride;
    T* w = y + r * row_stride;
    for (int64_t j = 0; j < ncols; ++j) {
      if constexpr (kLog) w[j] = static_cast<T>((static_cast<C>(q[j]) - m[j]) - scale[j]);
      else if constexpr (kStore) w[j] *= scale[j];
      else w[j] = static_cast<T>(exp_f32(static_cast<C>(q[j]) - m[j]) * scale[j]);
    }
  }
}

template <typename T, bool kLog>
void run_softmax(const ReduceView& v, T* y) {
  const T* x = reinterpret_cast<const T*>(v.data);
  const int64_t n = v.reduced, inner = v.inner;
  if (inner == 1) {
    parallel_for(v.outer, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) softmax_row<T, kLog>(x + o * n, y + o * n, n);
    });
    return;
  }
  const int64_t chunks = (inner + kColumns - 1) / kColumns;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (n * std::min(inner, kColumns)));
  parallel_for(v.outer * chunks, grain, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / chunks, i0 = (w % chunks) * kColumns;
      const int64_t offset = o * n * inner + i0;
      softmax_columns<T, kLog>(x + offset, y + offset, n, inner, std::min(kColumns, inner - i0));
    }
  });
}

template <bool kLog>
void softmax_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : c.attrs.i(0));
  visit_float_dtype(x.dtype(), [&]<typename T>() { run_softmax<T, kLog>(v, c.out().data<T>()); });
}

}  // namespace

void register_cpu_softmax_kernels(KernelTable& t) {
  t.set(ops::OpId::softmax, softmax_kernel<false>);
  t.set(ops::OpId::log_softmax, softmax_kernel<true>);
}

}  // namespace kiln::backend::cpu
