// CPU kernels of batch_norm, layer_norm and group_norm. Statistics are two-pass
// (mean, then squared deviations) over data that stays in cache between the
// passes; sums run in the compute type (so the inner loops vectorize) over
// blocks added in double, on values shifted by a pivot, so that long rows and
// large offsets keep their precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/loops.h"
#include "backends/cpu/nn.h"
#include "backends/cpu/reduce_engine.h"
#include "backends/cpu/scalar_ops.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

constexpr int64_t kSumBlock = 512;

// A double mean as two compute-type parts: (x - hi) - lo keeps the double's
// precision when |mean| is large against the spread of the data.
template <typename C>
struct SplitMean {
  C hi, lo;
  explicit SplitMean(double mean)
      : hi(static_cast<C>(mean)), lo(static_cast<C>(mean - static_cast<double>(hi))) {}
};

// Sums of the terms below over blocks of kSumBlock elements, each in
// kLanes compute-type lanes (independent accumulators that the compiler keeps
// in one vector register), the block sums added in double. Plain pointer
// loops: through a lambda GCC read the data with gathers and kept the
// accumulator in memory, 8x slower.
constexpr int64_t kLanes = 16;

template <typename C>
double lanes_total(const C (&lanes)[kLanes]) {
  C s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return static_cast<double>(s);
}

// Sum of (p[i] - pivot): with a pivot from the data the terms stay small, so
// the float partial sums do not lose the low bits of a large common offset.
template <typename T>
double shifted_sum(const T* p, int64_t n, compute_t<T> pivot) {
  using C = compute_t<T>;
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const T* q = p + b;
    const int64_t len = std::min(kSumBlock, n - b), full = len - len % kLanes;
    C lanes[kLanes] = {};
    for (int64_t i = 0; i < full; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<C>(q[i + l]) - pivot;
    }
    for (int64_t i = full; i < len; ++i) lanes[i - full] += static_cast<C>(q[i]) - pivot;
    total += lanes_total(lanes);
  }
  return total;
}

template <typename T>
double squared_deviations_of(const T* p, int64_t n, SplitMean<compute_t<T>> m) {
  using C = compute_t<T>;
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const T* q = p + b;
    const int64_t len = std::min(kSumBlock, n - b), full = len - len % kLanes;
    C lanes[kLanes] = {};
    for (int64_t i = 0; i < full; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) {
        const C d = (static_cast<C>(q[i + l]) - m.hi) - m.lo;
        lanes[l] += d * d;
      }
    }
    for (int64_t i = full; i < len; ++i) {
      const C d = (static_cast<C>(q[i]) - m.hi) - m.lo;
      lanes[i - full] += d * d;
    }
    total += lanes_total(lanes);
  }
  return total;
}

// An optional parameter (already in the compute type C) or n copies of fallback.
template <typename C>
std::vector<C> param_or(const KernelCall& c, size_t i, int64_t n, C fallback) {
  if (i >= c.inputs.size() || !c.in(i).defined()) return std::vector<C>(n, fallback);
  const Tensor p = c.in(i).contiguous();
  return std::vector<C>(p.data<C>(), p.data<C>() + n);
}

// What follows the normalization in batch_norm_eval: + residual, then relu,
// each rounded to T as add's and relu's kernels round (scalar_ops.h).
template <typename T>
struct Epilogue {
  const T* residual = nullptr;  // contiguous, the input's sizes; null: none
  bool relu = false;
};

// y = (x - mean) * scale + shift over blocks of `inner` contiguous elements,
// then batch_norm_eval's epilogue where kResidual / kRelu say so; block j
// uses the statistics of row stat(j) and the parameters of channel(j).
template <typename T, bool kResidual, bool kRelu, typename Stat, typename Channel>
void normalize_blocks_as(const T* x, T* y, int64_t blocks, int64_t inner, const double* mean,
                         const double* rstd, const std::vector<compute_t<T>>& w,
                         const std::vector<compute_t<T>>& b, Stat stat, Channel channel,
                         const T* residual) {
  using C = compute_t<T>;
  parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t j0, int64_t j1) {
                 for (int64_t j = j0; j < j1; ++j) {
                   const int64_t r = stat(j), ch = channel(j);
                   const SplitMean<C> m(mean[r]);
                   const C a = static_cast<C>(rstd[r]) * w[ch], shift = b[ch];
                   const T* xj = x + j * inner;
                   T* yj = y + j * inner;
                   [[maybe_unused]] const T* rj = kResidual ? residual + j * inner : nullptr;
#pragma omp simd
                   for (int64_t i = 0; i < inner; ++i) {
                     T v = static_cast<T>(((static_cast<C>(xj[i]) - m.hi) - m.lo) * a + shift);
                     if constexpr (kResidual)
                       v = static_cast<T>(scalar::add(static_cast<C>(v), static_cast<C>(rj[i])));
                     if constexpr (kRelu) v = static_cast<T>(scalar::relu(static_cast<C>(v)));
                     yj[i] = v;
                   }
                 }
               });
}

// The normalization, with an epilogue (batch_norm_eval's) applied to each
// element as it is made: one pass over memory.
template <typename T, typename Stat, typename Channel>
void normalize_blocks(const T* x, T* y, int64_t blocks, int64_t inner, const double* mean,
                      const double* rstd, const std::vector<compute_t<T>>& w,
                      const std::vector<compute_t<T>>& b, Stat stat, Channel channel,
                      const Epilogue<T>& e = {}) {
  const auto run = [&]<bool kResidual, bool kRelu>() {
    normalize_blocks_as<T, kResidual, kRelu>(x, y, blocks, inner, mean, rstd, w, b, stat, channel,
                                             e.residual);
  };
  if (e.residual && e.relu)
    run.template operator()<true, true>();
  else if (e.residual)
    run.template operator()<true, false>();
  else if (e.relu)
    run.template operator()<false, true>();
  else
    run.template operator()<false, false>();
}

// batch_norm's outputs from inputs (input, weight?, bias?, running_mean?,
// running_var?); mean_out and var_out take the statistics it used (the
// running ones in eval mode), null where nobody reads them.
template <typename T>
void batch_norm(const KernelCall& c, bool training, double eps, T* y, compute_t<T>* mean_out,
                compute_t<T>* var_out, const Epilogue<T>& epilogue = {}) {
  using C = compute_t<T>;
  const Tensor x = c.in(0).contiguous();
  const int64_t n = x.size(0), channels = x.size(1);
  const int64_t inner = n * channels == 0 ? 0 : x.numel() / (n * channels);
  std::vector<double> mean(channels), var(channels), rstd(channels);
  if (training && x.numel() == 0) {
    // No samples: 0 / 0, without walking n (which may be huge beside an empty dim).
    std::fill(mean.begin(), mean.end(), std::numeric_limits<double>::quiet_NaN());
    std::fill(var.begin(), var.end(), std::numeric_limits<double>::quiet_NaN());
  } else if (training) {
    const T* px = x.data<T>();
    const double count = static_cast<double>(n * inner);
    parallel_for(channels, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n * inner, 1)),
                 [&](int64_t c0, int64_t c1) {
                   for (int64_t ch = c0; ch < c1; ++ch) {
                     const C pivot = count > 0 ? pivot_of(px[ch * inner]) : C(0);
                     double s = 0;
                     for (int64_t k = 0; k < n; ++k) {
                       s += shifted_sum(px + (k * channels + ch) * inner, inner, pivot);
                     }
                     mean[ch] = static_cast<double>(pivot) + s / count;
                     const SplitMean<C> m(mean[ch]);
                     double d = 0;
                     for (int64_t k = 0; k < n; ++k) {
                       d += squared_deviations_of(px + (k * channels + ch) * inner, inner, m);
                     }
                     var[ch] = d / count;
                   }
                 });
  } else {
    const auto rm = param_or<C>(c, 3, channels, 0), rv = param_or<C>(c, 4, channels, 1);
    std::copy(rm.begin(), rm.end(), mean.begin());
    std::copy(rv.begin(), rv.end(), var.begin());
  }
  for (int64_t ch = 0; ch < channels; ++ch) {
    rstd[ch] = 1 / std::sqrt(var[ch] + eps);
    if (mean_out) mean_out[ch] = static_cast<C>(mean[ch]);
    if (var_out) var_out[ch] = static_cast<C>(var[ch]);
  }
  const auto w = param_or<C>(c, 1, channels, 1), b = param_or<C>(c, 2, channels, 0);
  auto channel_of = [channels](int64_t j) { return j % channels; };
  if (x.numel() == 0) return;
  normalize_blocks(x.data<T>(), y, n * channels, inner, mean.data(), rstd.data(), w, b, channel_of,
                   channel_of, epilogue);
}

// One row: statistics from a compute-type copy (16-bit inputs) or the row itself.
template <typename T>
void layer_norm_row(const T* x, T* y, int64_t k, double eps, const compute_t<T>* w,
                    const compute_t<T>* b, std::vector<compute_t<T>>& buffer) {
  using C = compute_t<T>;
  const C* row;
  if constexpr (std::is_same_v<T, C>) {
    row = x;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < k; ++i) buffer[i] = static_cast<C>(x[i]);
    row = buffer.data();
  }
  const SplitMean<C> m(static_cast<double>(row[0]) +
                       shifted_sum(row, k, row[0]) / static_cast<double>(k));
  const double var = squared_deviations_of(row, k, m) / static_cast<double>(k);
  const C rs = static_cast<C>(1 / std::sqrt(var + eps));
#pragma omp simd
  for (int64_t i = 0; i < k; ++i)
    y[i] = static_cast<T>(((row[i] - m.hi) - m.lo) * rs * w[i] + b[i]);
}

template <typename T>
void layer_norm(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor x = c.in(0).contiguous();
  if (x.numel() == 0) return;
  const int64_t k = shape_numel(c.attrs.ints(0)), rows = x.numel() / k;
  const auto w = param_or<C>(c, 1, k, 1), b = param_or<C>(c, 2, k, 0);
  const double eps = c.attrs.f(1);
  const T* px = x.data<T>();
  T* py = c.out().data<T>();
  // A row costs three passes in cache: a quarter of the usual grain already
  // pays for a thread, so BERT's 128 rows of 768 reach up to 12 threads.
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / (4 * k)), [&](int64_t r0, int64_t r1) {
    std::vector<C> buffer(std::is_same_v<T, C> ? 0 : k);
    for (int64_t r = r0; r < r1; ++r)
      layer_norm_row(px + r * k, py + r * k, k, eps, w.data(), b.data(), buffer);
  });
}

template <typename T>
void group_norm(const KernelCall& c) {
  using C = compute_t<T>;
  const Tensor x = c.in(0).contiguous();
  if (x.numel() == 0) return;
  const int64_t n = x.size(0), channels = x.size(1), groups = c.attrs.i(0);
  const int64_t inner = x.numel() / (n * channels);
  const int64_t per_group = channels / groups, row = per_group * inner;
  const T* px = x.data<T>();
  std::vector<double> mean(n * groups), rstd(n * groups);
  const double eps = c.attrs.f(1);
  parallel_for(n * groups, std::max<int64_t>(1, kParallelGrain / row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = px + r * row;
      const C pivot = pivot_of(xr[0]);
      mean[r] = static_cast<double>(pivot) + shifted_sum(xr, row, pivot) / static_cast<double>(row);
      const double var =
          squared_deviations_of(xr, row, SplitMean<C>(mean[r])) / static_cast<double>(row);
      rstd[r] = 1 / std::sqrt(var + eps);
    }
  });
  const auto w = param_or<C>(c, 1, channels, 1), b = param_or<C>(c, 2, channels, 0);
  // Block j is channel j % C of sample j / C, in group row (j / C) * G + (j % C) / per_group.
  normalize_blocks(
      px, c.out().data<T>(), n * channels, inner, mean.data(), rstd.data(), w, b,
      [=](int64_t j) { return (j / channels) * groups + (j % channels) / per_group; },
      [=](int64_t j) { return j % channels; });
}

// batch_norm_eval: the normalization over the running statistics, + residual
// and relu applied to each element as it is made, each rounded as eager's
// add and relu kernels round: one pass over memory where eager makes three.
template <typename T>
void batch_norm_eval(const KernelCall& c) {
  Epilogue<T> e{.relu = c.attrs.b(1)};
  Tensor residual;
  if (c.inputs.size() > 5 && c.in(5).defined()) {
    residual = c.in(5).contiguous();
    e.residual = residual.data<T>();
  }
  batch_norm<T>(c, false, c.attrs.f(0), c.out(0).data<T>(), nullptr, nullptr, e);
}

}  // namespace

void register_cpu_norm_kernels(KernelTable& t) {
  t.set(OpId::batch_norm_eval, [](const KernelCall& c) {
    visit_floating(c.in(0).dtype(), [&]<typename T>() { batch_norm_eval<T>(c); });
  });
  t.set(OpId::batch_norm, [](const KernelCall& c) {
    visit_floating(c.in(0).dtype(), [&]<typename T>() {
      using C = compute_t<T>;
      batch_norm<T>(c, c.attrs.b(0), c.attrs.f(1), c.out(0).data<T>(), c.out(1).data<C>(),
                    c.out(2).data<C>());
    });
  });
  t.set(OpId::layer_norm, [](const KernelCall& c) {
    visit_floating(c.in(0).dtype(), [&]<typename T>() { layer_norm<T>(c); });
  });
  t.set(OpId::group_norm, [](const KernelCall& c) {
    visit_floating(c.in(0).dtype(), [&]<typename T>() { group_norm<T>(c); });
  });
}

}  // namespace kiln::backend::cpu
