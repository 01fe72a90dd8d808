// CPU kernels of the order reductions: amax, amin, max_dim, min_dim, argmax,
// argmin, and of the logical ones: any, all. NaN is the largest and the smallest
// value (it propagates, and its index is returned); ties keep the first index.
#include <limits>

#include "backends/cpu/reduce_engine.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

// max_dim, min_dim, argmax and argmin: the extreme value and its first index.
template <typename T, bool kMax>
struct ArgOp {
  using C = compute_t<T>;
  struct Total {
    C value;
    int64_t index;  // -1: no element seen yet
  };
  T* values = nullptr;  // absent for argmax and argmin
  int64_t* indices = nullptr;

  // Whether x replaces best: strictly better (ties keep the first), or the first NaN.
  static bool better(C x, C best, int64_t best_index) {
    return best_index < 0 || (kMax ? x > best : x < best) || (x != x && best == best);
  }
  Total identity() const { return {extreme_identity<C, kMax>(), -1}; }
  Total merge(Total a, Total b) const {
    if (b.index < 0) return a;
    return better(b.value, a.value, a.index) ? b : a;
  }
  // Two passes: a vectorized fold finds the value, a scan its first position.
  Total row(const T* p, int64_t n, int64_t first, int64_t k) const {
    const C m = ExtremeOp<T, kMax>{}.row(p, n, first, k);
    int64_t i = 0;
    if (m != m) {
      while (static_cast<C>(p[i]) == static_cast<C>(p[i])) ++i;
    } else {
      while (static_cast<C>(p[i]) != m) ++i;
    }
    return {m, first + i};
  }
  void columns(const T* p, int64_t row_stride, int64_t rows, int64_t first, int64_t ncols,
               int64_t, Total* totals) const {
    C best[kColumns];
    int64_t index[kColumns];
    for (int64_t j = 0; j < ncols; ++j) {
      best[j] = totals[j].value;
      index[j] = totals[j].index;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* q = p + r * row_stride;
      for (int64_t j = 0; j < ncols; ++j) {
        const C x = static_cast<C>(q[j]);
        const bool b = better(x, best[j], index[j]);
        best[j] = b ? x : best[j];
        index[j] = b ? first + r : index[j];
      }
    }
    for (int64_t j = 0; j < ncols; ++j) totals[j] = {best[j], index[j]};
  }
  void finish(int64_t k, Total t, int64_t) const {
    if (values) values[k] = static_cast<T>(t.value);
    indices[k] = t.index;
  }
};

template <typename T, bool kAny>
struct LogicalOp : LaneOp<T, LogicalOp<T, kAny>> {
  using Acc = uint8_t;
  using Total = uint8_t;
  bool* out = nullptr;
  Acc lane_identity() const { return kAny ? 0 : 1; }
  Acc step(Acc a, compute_t<T> x, NoParam) const {
    const Acc nonzero = x != compute_t<T>(0);
    return kAny ? (a | nonzero) : (a & nonzero);
  }
  Acc lane_merge(Acc a, Acc b) const { return kAny ? (a | b) : (a & b); }
  Total fold(Total t, Acc a) const { return lane_merge(t, a); }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return lane_identity(); }
  Total merge(Total a, Total b) const { return lane_merge(a, b); }
  void finish(int64_t k, Total t, int64_t) const { out[k] = t != 0; }
};

template <bool kMax>
void extreme_kernel(const KernelCall& c) {
  visit_dtype(c.in(0).dtype(), [&]<typename T>() {
    ExtremeOp<T, kMax> op;
    op.out = c.out().data<T>();
    reduce_run<T>(make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true), op);
  });
}

// max_dim / min_dim (two outputs) and argmax / argmin (one; no dim = all dims).
template <bool kMax>
void arg_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const ReduceView v = make_arg_reduce_view(c);
  visit_dtype(x.dtype(), [&]<typename T>() {
    ArgOp<T, kMax> op;
    if (c.outputs.size() == 2) op.values = c.out(0).data<T>();
    op.indices = c.out(c.outputs.size() - 1).data<int64_t>();
    reduce_run<T>(v, op);
  });
}

template <bool kAny>
void logical_kernel(const KernelCall& c) {
  visit_dtype(c.in(0).dtype(), [&]<typename T>() {
    LogicalOp<T, kAny> op;
    op.out = c.out().data<bool>();
    reduce_run<T>(make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true), op);
  });
}

}  // namespace

void register_cpu_extreme_kernels(KernelTable& t) {
  t.set(OpId::amax, extreme_kernel<true>);
  t.set(OpId::amin, extreme_kernel<false>);
  t.set(OpId::max_dim, arg_kernel<true>);
  t.set(OpId::min_dim, arg_kernel<false>);
  t.set(OpId::argmax, arg_kernel<true>);
  t.set(OpId::argmin, arg_kernel<false>);
  t.set(OpId::any, logical_kernel<true>);
  t.set(OpId::all, logical_kernel<false>);
}

}  // namespace kiln::backend::cpu
