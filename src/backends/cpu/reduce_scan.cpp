// CPU kernel of cumsum. Floats accumulate in double (a long float32 prefix sum
// would drift), integers in wrapping uint64. Along an inner dim (stride 1) each
// line is a sequential scan; along an outer dim whole rows are added into a
// running row, which vectorizes.
#include "backends/cpu/reduce_engine.h"

namespace kiln::backend::cpu {
namespace {

template <typename T>
void scan_lines(const T* x, T* y, int64_t outer, int64_t n) {
  using Acc = typename AddTypes<T>::Total;
  parallel_for(outer, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      Acc s = 0;
      for (int64_t r = 0; r < n; ++r) {
        s += static_cast<Acc>(static_cast<compute_t<T>>(x[o * n + r]));
        y[o * n + r] = to_output<T>(s);
      }
    }
  });
}

template <typename T>
void scan_rows(const T* x, T* y, const ReduceView& v) {
  using Acc = typename AddTypes<T>::Total;
  const int64_t n = v.reduced, inner = v.inner;
  const int64_t chunks = (inner + kColumns - 1) / kColumns;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (n * std::min(inner, kColumns)));
  parallel_for(v.outer * chunks, grain, [&](int64_t b, int64_t e) {
    Acc acc[kColumns];
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / chunks, i0 = (w % chunks) * kColumns;
      const int64_t ncols = std::min(kColumns, inner - i0);
      for (int64_t j = 0; j < ncols; ++j) acc[j] = 0;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t base = (o * n + r) * inner + i0;
        for (int64_t j = 0; j < ncols; ++j) {
          acc[j] += static_cast<Acc>(static_cast<compute_t<T>>(x[base + j]));
          y[base + j] = to_output<T>(acc[j]);
        }
      }
    }
  });
}

void cumsum_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : c.attrs.i(0));
  if (x.numel() == 0) return;
  visit_dtype(x.dtype(), [&]<typename T>() {
    const T* in = reinterpret_cast<const T*>(v.data);
    T* out = c.out().data<T>();
    if (v.inner == 1) scan_lines(in, out, v.outer, v.reduced);
    else scan_rows(in, out, v);
  });
}

}  // namespace

void register_cpu_scan_kernels(KernelTable& t) { t.set(ops::OpId::cumsum, cumsum_kernel); }

}  // namespace kiln::backend::cpu
