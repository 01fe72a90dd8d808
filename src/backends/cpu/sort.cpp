// CPU kernels of sort and topk. Each line along the dim is ordered as a
// permutation of its indices under a total order (value, NaN above every
// number, then index), so that equal values keep their order whichever
// algorithm runs: std::sort for whole lines, std::partial_sort for topk.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/reduce_engine.h"

namespace kiln::backend::cpu {
namespace {

// Whether line element a comes before element b.
template <typename T>
struct LineOrder {
  const T* line;
  int64_t stride;
  bool descending;

  bool operator()(int64_t a, int64_t b) const {
    using C = compute_t<T>;
    const C va = static_cast<C>(line[a * stride]), vb = static_cast<C>(line[b * stride]);
    if constexpr (std::is_floating_point_v<C>) {
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na || nb) {
        if (na && nb) return a < b;
        return descending ? na : nb;
      }
    }
    if (va != vb) return descending ? va > vb : va < vb;
    return a < b;
  }
};

// The first k of each line's order, into values and indices [outer, k, inner].
template <typename T>
void order_lines(const T* x, const ReduceView& v, int64_t k, bool descending, T* values,
                 int64_t* indices) {
  const int64_t n = v.reduced, inner = v.inner;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n * 8, 1));
  parallel_for(v.outer * inner, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t w = b; w < e; ++w) {
      const int64_t o = w / inner, i = w % inner;
      const LineOrder<T> before{x + o * n * inner + i, inner, descending};
      std::iota(order.begin(), order.end(), int64_t{0});
      if (k < n)
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      else
        std::sort(order.begin(), order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * inner + i;
        values[at] = before.line[order[static_cast<size_t>(j)] * inner];
        indices[at] = order[static_cast<size_t>(j)];
      }
    }
  });
}

void order_kernel(const KernelCall& c, int64_t dim, int64_t k, bool descending) {
  const Tensor& x = c.in(0);
  if (c.out(0).numel() == 0) return;
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : dim);
  visit_dtype(x.dtype(), [&]<typename T>() {
    order_lines(reinterpret_cast<const T*>(v.data), v, k, descending, c.out(0).data<T>(),
                c.out(1).data<int64_t>());
  });
}

}  // namespace

void register_cpu_sort_kernels(KernelTable& t) {
  t.set(ops::OpId::sort, [](const KernelCall& c) {
    const Tensor& x = c.in(0);
    const int64_t dim = c.attrs.i(0);
    order_kernel(c, dim, x.dim() == 0 ? 1 : x.size(dim), c.attrs.b(1));
  });
  t.set(ops::OpId::topk, [](const KernelCall& c) {
    // A 0-dim input is its own top value, for k 0 as for 1 (as PyTorch).
    order_kernel(c, c.attrs.i(1), c.in(0).dim() == 0 ? 1 : c.attrs.i(0), c.attrs.b(2));
  });
}

}  // namespace kiln::backend::cpu
