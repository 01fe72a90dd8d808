// The CPU reduction engine. An input is seen as a dense [outer, reduced, inner]
// block (a strided view when the layout allows it, else a contiguous copy):
//   inner == 1  rows of `reduced` contiguous elements, folded by SIMD lanes;
//   inner > 1   `reduced` rows of `inner` contiguous columns, accumulated
//               column-wise into a buffer so that the loop over columns vectorizes.
// Work is split over output elements, and over the reduced range as well when
// there are fewer outputs than threads (partial results are merged in order).
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/loops.h"
#include "backends/reduce_view.h"
#include "core/convert.h"
#include "kiln/tensor.h"

namespace kiln::backend::cpu {



inline constexpr int64_t kLanes = 32;       // independent accumulators of a row fold
inline constexpr int64_t kRowBlock = 1024;  // elements folded in Acc before widening to Total
inline constexpr int64_t kColumns = 256;    // columns of one inner > 1 work item
inline constexpr int64_t kColumnRowBlock = 64;

struct NoParam {};

// NaN-propagating max and min that vectorize (std::max would drop a NaN in x).
template <typename C>
inline C nan_max(C a, C x) {
  return (x > a || x != x) ? x : a;
}
template <typename C>
inline C nan_min(C a, C x) {
  return (x < a || x != x) ? x : a;
}

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<compute_t<T>>;

// A value of the data to shift a sum of it by (the first, in practice): kept
// when finite, else 0, since inf - inf would turn an infinite mean into NaN.
template <typename T>
compute_t<T> pivot_of(T first) {
  const auto v = static_cast<compute_t<T>>(first);
  return std::isfinite(static_cast<double>(v)) ? v : compute_t<T>(0);
}

// visit_dtype for the ops that take floating dtypes only (their shape rules
// reject the others), so that no integer instantiation is compiled.
template <typename F>
void visit_float_dtype(DType t, F&& f) {
  visit_dtype(t, [&]<typename T>() {
    if constexpr (kIsFloat<T>) f.template operator()<T>();
  });
}


// Ops of the engine provide:
//   using Total;  Total identity();  Total merge(Total earlier, Total later);
//   Total row(const T* p, int64_t n, int64_t first, int64_t k);
//   void columns(const T* p, int64_t row_stride, int64_t rows, int64_t first,
//                int64_t ncols, int64_t k0, Total* totals);   // folds into totals
//   void finish(int64_t k, Total t, int64_t n);               // writes output k
// `first` is the position of p's row within the reduced range; k the output index.
//
// LaneOp implements row and columns for ops that fold with per-lane accumulators:
// Derived provides Acc, Param, lane_identity, step(Acc, C, Param), lane_merge,
// fold(Total, Acc) and param(k) (a per-output constant such as a mean).
template <typename T, typename Derived>
struct LaneOp {
  using C = compute_t<T>;

  template <typename Total>
  Total fold_row(const T* p, int64_t n, int64_t k, Total total) const {
    const Derived& d = static_cast<const Derived&>(*this);
    using Acc = typename Derived::Acc;
    const auto c = d.param(k);
    for (int64_t b = 0; b < n; b += kRowBlock) {
      const int64_t m = std::min(kRowBlock, n - b);
      const T* q = p + b;
      Acc lanes[kLanes];
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] = d.lane_identity();
      int64_t i = 0;
      for (; i + kLanes <= m; i += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) lanes[j] = d.step(lanes[j], static_cast<C>(q[i + j]), c);
      }
      for (; i < m; ++i) lanes[i % kLanes] = d.step(lanes[i % kLanes], static_cast<C>(q[i]), c);
      for (int64_t w = kLanes / 2; w > 0; w /= 2) {
        for (int64_t j = 0; j < w; ++j) lanes[j] = d.lane_merge(lanes[j], lanes[j + w]);
      }
      total = d.fold(total, lanes[0]);
    }
    return total;
  }

  auto row(const T* p, int64_t n, int64_t /*first*/, int64_t k) const {
    const Derived& d = static_cast<const Derived&>(*this);
    return fold_row(p, n, k, d.identity());
  }

  template <typename Total>
  void columns(const T* p, int64_t row_stride, int64_t rows, int64_t /*first*/, int64_t ncols,
               int64_t k0, Total* totals) const {
    const Derived& d = static_cast<const Derived&>(*this);
    using Acc = typename Derived::Acc;
    using Param = decltype(d.param(k0));
    Param cs[kColumns];
    for (int64_t j = 0; j < ncols; ++j) cs[j] = d.param(k0 + j);
    if (ncols == row_stride && 2 * ncols <= kLanes) {
      narrow_columns(p, rows, ncols, cs, totals);
      return;
    }
    Acc acc[kColumns];
    for (int64_t r0 = 0; r0 < rows; r0 += kColumnRowBlock) {
      const int64_t r1 = std::min(rows, r0 + kColumnRowBlock);
      for (int64_t j = 0; j < ncols; ++j) acc[j] = d.lane_identity();
      for (int64_t r = r0; r < r1; ++r) {
        const T* q = p + r * row_stride;
        for (int64_t j = 0; j < ncols; ++j) acc[j] = d.step(acc[j], static_cast<C>(q[j]), cs[j]);
      }
      for (int64_t j = 0; j < ncols; ++j) totals[j] = d.fold(totals[j], acc[j]);
    }
  }

  // Dense rows narrower than half the lanes ([N, 3] reduced over N, say): the
  // rows are one contiguous run, folded by `width` lanes (a multiple of ncols),
  // so lane j always holds column j % ncols and the loop stays vectorizable.
  template <typename Param, typename Total>
  void narrow_columns(const T* p, int64_t rows, int64_t ncols, const Param* cs,
                      Total* totals) const {
    const Derived& d = static_cast<const Derived&>(*this);
    using Acc = typename Derived::Acc;
    const int64_t width = ncols * (kLanes / ncols);
    Param lane_params[kLanes];
    for (int64_t j = 0; j < width; ++j) lane_params[j] = cs[j % ncols];
    const int64_t block_rows = std::max<int64_t>(1, kRowBlock / ncols);
    for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
      const T* q = p + r0 * ncols;
      const int64_t m = (std::min(rows, r0 + block_rows) - r0) * ncols;
      Acc lanes[kLanes];
      for (int64_t j = 0; j < width; ++j) lanes[j] = d.lane_identity();
      int64_t i = 0;
      for (; i + width <= m; i += width) {
        for (int64_t j = 0; j < width; ++j) {
          lanes[j] = d.step(lanes[j], static_cast<C>(q[i + j]), lane_params[j]);
        }
      }
      for (int64_t j = 0; i + j < m; ++j) {
        lanes[j] = d.step(lanes[j], static_cast<C>(q[i + j]), lane_params[j]);
      }
      for (int64_t j = ncols; j < width; ++j) lanes[j % ncols] = d.lane_merge(lanes[j % ncols], lanes[j]);
      for (int64_t j = 0; j < ncols; ++j) totals[j] = d.fold(totals[j], lanes[j]);
    }
  }
};

// The identity of a max (kMax) or min fold over C.
template <typename C, bool kMax>
constexpr C extreme_identity() {
  if constexpr (std::numeric_limits<C>::has_infinity) {
    return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  } else {
    return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
}

template <typename T, bool kMax>
struct ExtremeOp : LaneOp<T, ExtremeOp<T, kMax>> {
  using Acc = compute_t<T>;
  using Total = Acc;
  T* out = nullptr;
  Acc lane_identity() const { return extreme_identity<Acc, kMax>(); }
  Acc step(Acc a, Acc x, NoParam) const { return kMax ? nan_max(a, x) : nan_min(a, x); }
  Acc lane_merge(Acc a, Acc b) const { return step(a, b, {}); }
  Total fold(Total t, Acc a) const { return step(t, a, {}); }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return lane_identity(); }
  Total merge(Total a, Total b) const { return step(a, b, {}); }
  void finish(int64_t k, Total t, int64_t) const { out[k] = static_cast<T>(t); }
};

// Lane and total types of additive folds: integers wrap in uint64 (defined
// overflow, the same bits as int64 arithmetic), floats widen to double.
template <typename T>
struct AddTypes {
  using Acc = std::conditional_t<kIsFloat<T>, compute_t<T>, uint64_t>;
  using Total = std::conditional_t<kIsFloat<T>, double, uint64_t>;
};

template <typename T, typename Total>
T to_output(Total t) {
  if constexpr (std::is_same_v<Total, uint64_t>) return convert<T>(static_cast<int64_t>(t));
  else return convert<T>(t);
}

// How many pieces to cut the reduced range of each of `items` work items into, so
// that all threads have work when the items alone are too few.
inline int64_t reduce_segments(int64_t items, int64_t reduced, int64_t work_per_row) {
  const int64_t threads = omp_get_max_threads();
  const int64_t work = items * reduced * work_per_row;
  if (threads <= 1 || items >= threads || work < 2 * kParallelGrain || omp_in_parallel()) return 1;
  const int64_t wanted = (threads + items - 1) / items;
  const int64_t affordable = std::max<int64_t>(1, reduced * work_per_row / (kParallelGrain / 4));
  return std::max<int64_t>(1, std::min({wanted, affordable, reduced}));
}

// Merges per-segment partial totals (segment-major, nout each) in segment order.
template <typename Op, typename Total>
void reduce_finish_segments(const Op& op, const std::vector<Total>& partial, int64_t segments,
                            int64_t nout, int64_t reduced) {
  parallel_for(nout, kParallelGrain / 8, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      Total t = partial[k];
      for (int64_t s = 1; s < segments; ++s) t = op.merge(t, partial[s * nout + k]);
      op.finish(k, t, reduced);
    }
  });
}

// One segment [r0, r1) of the reduced range out of `segments` equal ones.
inline void reduce_segment_range(int64_t s, int64_t segments, int64_t reduced, int64_t& r0,
                                 int64_t& r1) {
  const int64_t len = (reduced + segments - 1) / segments;
  r0 = std::min(reduced, s * len);
  r1 = std::min(reduced, r0 + len);
}

// Elements [begin, begin + n) of the row-major order of the strided view
// (sizes, strides in elements) over base, copied to out.
template <typename T>
void gather_elements(const T* base, const std::vector<int64_t>& sizes,
                     const std::vector<int64_t>& strides, int64_t begin, int64_t n, T* out) {
  const auto rank = static_cast<int64_t>(sizes.size());
  int64_t small[8];
  std::vector<int64_t> large(rank > 8 ? rank : 0);
  int64_t* index = rank > 8 ? large.data() : small;
  int64_t rem = begin;
  for (int64_t d = rank - 1; d >= 0; --d) {
    index[d] = rem % sizes[d];
    rem /= sizes[d];
  }
  const int64_t last = rank - 1, step = strides[last];
  while (n > 0) {
    const T* p = base;
    for (int64_t d = 0; d < rank; ++d) p += index[d] * strides[d];
    const int64_t run = std::min(sizes[last] - index[last], n);
    if (step == 1)
      std::copy(p, p + run, out);
    else
      for (int64_t i = 0; i < run; ++i) out[i] = p[i * step];
    out += run;
    n -= run;
    index[last] += run;
    for (int64_t d = last; d > 0 && index[d] == sizes[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

template <typename T, typename Op>
void reduce_rows(const ReduceView& v, const Op& op) {
  using Total = decltype(op.identity());
  const T* data = reinterpret_cast<const T*>(v.data);
  const int64_t outer = v.outer, reduced = v.reduced;
  const int64_t segments = reduce_segments(outer, reduced, 1);
  const bool gathered = !v.gather_sizes.empty();
  // Elements [r0, r1) of row o: in place, or gathered into the thread's
  // buffer (of a row's elements at most).
  using Buffer = std::unique_ptr<T[]>;
  const auto row_of = [&](int64_t o, int64_t r0, int64_t r1, Buffer& buffer) -> const T* {
    if (!gathered) return data + o * reduced + r0;
    if (!buffer) buffer = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(reduced));
    gather_elements(data, v.gather_sizes, v.gather_strides, o * reduced + r0, r1 - r0,
                    buffer.get());
    return buffer.get();
  };
  if (segments == 1) {
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / reduced), [&](int64_t b, int64_t e) {
      Buffer buffer;
      for (int64_t o = b; o < e; ++o)
        op.finish(o, op.row(row_of(o, 0, reduced, buffer), reduced, 0, o), reduced);
    });
    return;
  }
  std::vector<Total> partial(segments * outer);
  parallel_for(segments * outer, 1, [&](int64_t b, int64_t e) {
    Buffer buffer;
    for (int64_t w = b; w < e; ++w) {
      const int64_t s = w / outer, o = w % outer;
      int64_t r0, r1;
      reduce_segment_range(s, segments, reduced, r0, r1);
      partial[w] = r0 < r1 ? op.row(row_of(o, r0, r1, buffer), r1 - r0, r0, o) : op.identity();
    }
  });
  reduce_finish_segments(op, partial, segments, outer, reduced);
}

// The columns of [outer, reduced, inner] values in work items of up to
// kColumns columns (and segments of the reduced range where the items are
// fewer than the threads): fold(o, r0, r1, i0, ncols, k0, totals) folds
// rows [r0, r1) of outer o's columns [i0, i0 + ncols) into totals, which
// finish() or the segments' merge then take.
template <typename T, typename Op, typename Fold>
void reduce_columns_by(int64_t outer, int64_t reduced, int64_t inner, const Op& op,
                       const Fold& fold) {
  using Total = decltype(op.identity());
  const int64_t chunks = (inner + kColumns - 1) / kColumns;
  const int64_t items = outer * chunks;
  const int64_t nout = outer * inner;
  const int64_t segments = reduce_segments(items, reduced, std::min(inner, kColumns));
  std::vector<Total> partial(segments > 1 ? segments * nout : 0);
  const int64_t grain =
      segments > 1 ? 1 : std::max<int64_t>(1, kParallelGrain / (reduced * std::min(inner, kColumns)));
  parallel_for(segments * items, grain, [&](int64_t b, int64_t e) {
    Total totals[kColumns];
    for (int64_t w = b; w < e; ++w) {
      const int64_t s = w / items, item = w % items;
      const int64_t o = item / chunks, i0 = (item % chunks) * kColumns;
      const int64_t ncols = std::min(kColumns, inner - i0);
      int64_t r0, r1;
      reduce_segment_range(s, segments, reduced, r0, r1);
      for (int64_t j = 0; j < ncols; ++j) totals[j] = op.identity();
      const int64_t k0 = o * inner + i0;
      fold(o, r0, r1, i0, ncols, k0, totals);
      for (int64_t j = 0; j < ncols; ++j) {
        if (segments == 1) op.finish(k0 + j, totals[j], reduced);
        else partial[s * nout + k0 + j] = totals[j];
      }
    }
  });
  if (segments > 1) reduce_finish_segments(op, partial, segments, nout, reduced);
}

template <typename T, typename Op>
void reduce_columns(const ReduceView& v, const Op& op) {
  const T* data = reinterpret_cast<const T*>(v.data);
  const int64_t reduced = v.reduced, inner = v.inner;
  reduce_columns_by<T>(
      v.outer, reduced, inner, op,
      [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t ncols, int64_t k0, auto* totals) {
        op.columns(data + (o * reduced + r0) * inner + i0, inner, r1 - r0, r0, ncols, k0, totals);
      });
}

// reduce_run over [outer, reduced, inner] values (inner > 1) that are never
// in memory whole: produce(o, r0, r1, i0, ncols, tile, stride) writes rows
// [r0, r1) of outer o's columns [i0, i0 + ncols) into `tile`, rows `stride`
// elements apart, and each tile is folded while in cache. Tiles hold the
// rows op.columns folds as one block over memory, with the same choice of
// its narrow form, so the results are reduce_run's bit for bit (a fused
// group's column reduction, compiler/codegen/row_reduction.h). With `into`
// (a contiguous [outer, reduced, inner] tensor's values), each tile is its
// place there, rows `inner` apart, as the fold over memory reads them: the
// values are then stored as they are folded.
template <typename T, typename Op, typename Produce>
void reduce_columns_produced(int64_t outer, int64_t reduced, int64_t inner, const Op& op,
                             const Produce& produce, T* into = nullptr) {
  const int64_t nout = outer * inner;
  if (nout == 0) return;
  if (reduced == 0) {
    for (int64_t k = 0; k < nout; ++k) op.finish(k, op.identity(), 0);
    return;
  }
  // Over memory the narrow form folds dense rows of all `inner` columns, in
  // blocks of kRowBlock / inner rows; a tile holds several such blocks.
  const bool narrow = 2 * inner <= kLanes;
  const int64_t stride = narrow ? inner : kColumns;
  const int64_t narrow_rows = std::max<int64_t>(1, kRowBlock / inner);
  const int64_t block =
      narrow ? narrow_rows * std::max<int64_t>(1, 8 * kRowBlock / (narrow_rows * inner))
             : kColumnRowBlock;
  reduce_columns_by<T>(
      outer, reduced, inner, op,
      [&](int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t ncols, int64_t k0, auto* totals) {
        thread_local std::vector<T> tile;  // kept: no allocation per work item
        tile.resize(into ? 0 : static_cast<size_t>(block * stride));
        for (int64_t r = r0; r < r1; r += block) {
          const int64_t rows = std::min(block, r1 - r);
          T* at = into ? into + (o * reduced + r) * inner + i0 : tile.data();
          const int64_t apart = into ? inner : stride;
          produce(o, r, r + rows, i0, ncols, at, apart);
          op.columns(at, apart, rows, r, ncols, k0, totals);
        }
      });
}

// Runs op over the view: every output element gets finish() exactly once.
template <typename T, typename Op>
void reduce_run(const ReduceView& v, const Op& op) {
  const int64_t nout = v.outer * v.inner;
  if (nout == 0) return;
  if (v.reduced == 0) {  // an empty reduction: the identity (sum 0, prod 1, mean NaN, ...)
    for (int64_t k = 0; k < nout; ++k) op.finish(k, op.identity(), 0);
    return;
  }
  if (v.inner == 1) reduce_rows<T>(v, op);
  else reduce_columns<T>(v, op);
}

}  // namespace kiln::backend::cpu

namespace kiln::backend::cpu {

// The kernel groups of the reduce files, registered by register_cpu_reduce_kernels.
void register_cpu_sum_kernels(KernelTable& table);     // reduce_sum.cpp
void register_cpu_extreme_kernels(KernelTable& table); // reduce_extreme.cpp
void register_cpu_scan_kernels(KernelTable& table);    // reduce_scan.cpp
void register_cpu_softmax_kernels(KernelTable& table); // softmax.cpp
void register_cpu_sort_kernels(KernelTable& table);    // sort.cpp

}  // namespace kiln::backend::cpu
