// CPU kernels of the additive reductions: sum, prod, mean, var, std, norm and
// logsumexp. float32 and the 16-bit floats fold blocks of kRowBlock elements in
// float lanes and widen each block's result to double, which keeps float32
// sums accurate to about 1e-7 relative without giving up the vector width.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/column_reduce.h"
#include "backends/cpu/reduce_engine.h"
#include "backends/cpu/vec_math.h"

namespace kiln::backend::cpu {
namespace {

using ops::OpId;

// sum and mean (mean divides by the count; the empty mean is 0 / 0 = NaN).
template <typename T>
struct SumOp : LaneOp<T, SumOp<T>> {
  using Acc = typename AddTypes<T>::Acc;
  using Total = typename AddTypes<T>::Total;
  T* out;
  bool mean;
  Acc lane_identity() const { return Acc(0); }
  Acc step(Acc a, compute_t<T> x, NoParam) const { return a + static_cast<Acc>(x); }
  Acc lane_merge(Acc a, Acc b) const { return a + b; }
  Total fold(Total t, Acc a) const { return t + static_cast<Total>(a); }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return Total(0); }
  Total merge(Total a, Total b) const { return a + b; }
  void finish(int64_t k, Total t, int64_t n) const {
    if constexpr (kIsFloat<T>) {
      if (mean) t /= static_cast<double>(n);
    }
    out[k] = to_output<T>(t);
  }
};

// Products multiply in the total type (double for floats): partial products of
// float lanes could overflow or underflow where the whole product does not.
template <typename T>
struct ProdOp : LaneOp<T, ProdOp<T>> {
  using Total = typename AddTypes<T>::Total;
  using Acc = Total;
  T* out;
  Acc lane_identity() const { return Acc(1); }
  Acc step(Acc a, compute_t<T> x, NoParam) const { return a * static_cast<Acc>(x); }
  Acc lane_merge(Acc a, Acc b) const { return a * b; }
  Total fold(Total t, Acc a) const { return t * static_cast<Total>(a); }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return Total(1); }
  Total merge(Total a, Total b) const { return a * b; }
  void finish(int64_t k, Total t, int64_t) const { out[k] = to_output<T>(t); }
};

// The second pass of var and std: the sum of squared deviations from means[k].
template <typename T>
struct SquaredDeviationOp : LaneOp<T, SquaredDeviationOp<T>> {
  using Acc = compute_t<T>;
  using Total = double;
  T* out;
  const double* means;
  double correction;
  bool take_sqrt;
  Acc lane_identity() const { return Acc(0); }
  Acc step(Acc a, Acc x, Acc mean) const { return a + (x - mean) * (x - mean); }
  Acc lane_merge(Acc a, Acc b) const { return a + b; }
  Total fold(Total t, Acc a) const { return t + a; }
  Acc param(int64_t k) const { return static_cast<Acc>(means[k]); }
  Total identity() const { return 0; }
  Total merge(Total a, Total b) const { return a + b; }
  void finish(int64_t k, Total t, int64_t n) const {
    // PyTorch divides by max(0, N - correction): N <= correction gives inf or NaN.
    const double var = t / std::max(0.0, static_cast<double>(n) - correction);
    out[k] = static_cast<T>(static_cast<compute_t<T>>(take_sqrt ? std::sqrt(var) : var));
  }
};

// The first pass of var and std, and of nothing else: means into a buffer.
// The values are summed shifted by the first of their output's (a finite one;
// else 0): a constant row's mean is then exact, so its deviations are 0 and a
// divisor of 0 gives NaN, not the inf of a rounded mean's tiny deviations.
template <typename T>
struct MeanToBufferOp : LaneOp<T, MeanToBufferOp<T>> {
  using Acc = compute_t<T>;
  using Total = double;
  double* means;
  const T* data;  // the view's [outer, reduced, inner] elements
  int64_t reduced, inner;
  const T* firsts = nullptr;  // or each output's first element (rows gathered)
  Acc lane_identity() const { return Acc(0); }
  Acc step(Acc a, Acc x, Acc pivot) const { return a + (x - pivot); }
  Acc lane_merge(Acc a, Acc b) const { return a + b; }
  Total fold(Total t, Acc a) const { return t + a; }
  Acc param(int64_t k) const {
    return pivot_of(firsts ? firsts[k] : data[(k / inner) * reduced * inner + k % inner]);
  }
  Total identity() const { return 0; }
  Total merge(Total a, Total b) const { return a + b; }
  void finish(int64_t k, Total t, int64_t n) const {
    means[k] = n == 0 ? t / 0.0 : static_cast<double>(param(k)) + t / static_cast<double>(n);
  }
};

enum class NormKind { kL0, kL1, kL2, kP, kInf, kNegInf };

// The vector norms: sums of |x|^p for finite p, max or min of |x| for +-inf.
template <typename T, NormKind K>
struct NormOp : LaneOp<T, NormOp<T, K>> {
  using Acc = compute_t<T>;
  static constexpr bool kExtreme = K == NormKind::kInf || K == NormKind::kNegInf;
  using Total = std::conditional_t<kExtreme, Acc, double>;
  T* out;
  double p;
  Acc lane_identity() const {
    return K == NormKind::kNegInf ? std::numeric_limits<Acc>::infinity() : Acc(0);
  }
  Acc step(Acc a, Acc x, NoParam) const {
    const Acc ax = std::fabs(x);
    if constexpr (K == NormKind::kL0) return a + (x != Acc(0) ? Acc(1) : Acc(0));
    else if constexpr (K == NormKind::kL1) return a + ax;
    else if constexpr (K == NormKind::kL2) return a + x * x;
    else if constexpr (K == NormKind::kP) return a + std::pow(ax, static_cast<Acc>(p));
    else if constexpr (K == NormKind::kInf) return nan_max(a, ax);
    else return nan_min(a, ax);
  }
  Acc lane_merge(Acc a, Acc b) const {
    if constexpr (K == NormKind::kInf) return nan_max(a, b);
    else if constexpr (K == NormKind::kNegInf) return nan_min(a, b);
    else return a + b;
  }
  Total fold(Total t, Acc a) const {
    if constexpr (kExtreme) return lane_merge(t, a);
    else return t + a;
  }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return lane_identity(); }
  Total merge(Total a, Total b) const {
    if constexpr (kExtreme) return lane_merge(a, b);
    else return a + b;
  }
  void finish(int64_t k, Total t, int64_t) const {
    double r = t;
    if constexpr (K == NormKind::kL2) r = std::sqrt(r);
    if constexpr (K == NormKind::kP) r = std::pow(r, 1 / p);
    out[k] = static_cast<T>(static_cast<Acc>(r));
  }
};

// logsumexp, first pass: the max of each group into a buffer.
template <typename T>
struct MaxToBufferOp : LaneOp<T, MaxToBufferOp<T>> {
  using Acc = compute_t<T>;
  using Total = Acc;
  double* maxes;
  Acc lane_identity() const { return -std::numeric_limits<Acc>::infinity(); }
  Acc step(Acc a, Acc x, NoParam) const { return nan_max(a, x); }
  Acc lane_merge(Acc a, Acc b) const { return nan_max(a, b); }
  Total fold(Total t, Acc a) const { return nan_max(t, a); }
  NoParam param(int64_t) const { return {}; }
  Total identity() const { return lane_identity(); }
  Total merge(Total a, Total b) const { return nan_max(a, b); }
  void finish(int64_t k, Total t, int64_t) const { maxes[k] = t; }
};

// logsumexp, second pass: log(sum exp(x - max)) + max. An infinite max is not
// subtracted (inf - inf would be NaN): all -inf gives log(0) = -inf, +inf gives inf.
template <typename T>
struct ExpSumOp : LaneOp<T, ExpSumOp<T>> {
  using Acc = compute_t<T>;
  using Total = double;
  T* out;
  const double* maxes;
  Acc lane_identity() const { return Acc(0); }
  Acc step(Acc a, Acc x, Acc shift) const { return a + exp_f32(x - shift); }
  Acc lane_merge(Acc a, Acc b) const { return a + b; }
  Total fold(Total t, Acc a) const { return t + a; }
  Acc param(int64_t k) const { return std::isinf(maxes[k]) ? Acc(0) : static_cast<Acc>(maxes[k]); }
  Total identity() const { return 0; }
  Total merge(Total a, Total b) const { return a + b; }
  void finish(int64_t k, Total t, int64_t) const {
    out[k] = static_cast<T>(static_cast<Acc>(std::log(t) + param(k)));
  }
};

template <typename T>
void run_sum(const KernelCall& c, bool mean) {
  SumOp<T> op;
  op.out = c.out().data<T>();
  op.mean = mean;
  reduce_run<T>(make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true), op);
}

template <typename T>
void run_prod(const KernelCall& c) {
  ProdOp<T> op;
  op.out = c.out().data<T>();
  reduce_run<T>(make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true), op);
}

// Two passes (mean, then squared deviations) are exact enough where the
// one-pass E[x^2] - E[x]^2 cancels catastrophically.
template <typename T>
void run_var(const KernelCall& c, bool take_sqrt) {
  const ReduceView v = make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true);
  std::vector<double> means(v.outer * v.inner);
  MeanToBufferOp<T> first;
  first.means = means.data();
  first.data = reinterpret_cast<const T*>(v.data);
  first.reduced = v.reduced;
  first.inner = v.inner;
  std::vector<T> firsts;  // gathered rows: each row's first element
  if (!v.gather_sizes.empty() && v.reduced > 0) {
    firsts.resize(static_cast<size_t>(v.outer));
    for (int64_t k = 0; k < v.outer; ++k)
      gather_elements(first.data, v.gather_sizes, v.gather_strides, k * v.reduced, 1, &firsts[k]);
    first.firsts = firsts.data();
  }
  reduce_run<T>(v, first);
  SquaredDeviationOp<T> second;
  second.out = c.out().data<T>();
  second.means = means.data();
  second.correction = c.attrs.f(1);
  second.take_sqrt = take_sqrt;
  reduce_run<T>(v, second);
}

template <typename T, NormKind K>
void run_norm_kind(const KernelCall& c, const ReduceView& v) {
  NormOp<T, K> op;
  op.out = c.out().data<T>();
  op.p = c.attrs.f(0);
  reduce_run<T>(v, op);
}

template <typename T>
void run_norm(const KernelCall& c) {
  const ReduceView v = make_reduce_view(c.in(0), reduce_dims_attr(c, 1), false, true);
  const double p = c.attrs.f(0);
  if (p == 0) run_norm_kind<T, NormKind::kL0>(c, v);
  else if (p == 1) run_norm_kind<T, NormKind::kL1>(c, v);
  else if (p == 2) run_norm_kind<T, NormKind::kL2>(c, v);
  else if (p == std::numeric_limits<double>::infinity()) run_norm_kind<T, NormKind::kInf>(c, v);
  else if (p == -std::numeric_limits<double>::infinity()) run_norm_kind<T, NormKind::kNegInf>(c, v);
  else run_norm_kind<T, NormKind::kP>(c, v);
}

template <typename T>
void run_logsumexp(const KernelCall& c) {
  const ReduceView v = make_reduce_view(c.in(0), reduce_dims_attr(c, 0), false, true);
  std::vector<double> maxes(v.outer * v.inner);
  MaxToBufferOp<T> first;
  first.maxes = maxes.data();
  reduce_run<T>(v, first);
  ExpSumOp<T> second;
  second.out = c.out().data<T>();
  second.maxes = maxes.data();
  reduce_run<T>(v, second);
}

}  // namespace

bool reduces_produced_columns(OpId op, DType dtype) {
  return (op == OpId::sum || op == OpId::mean || op == OpId::amax || op == OpId::amin) &&
         (dtype == kFloat32 || dtype == kFloat64);
}

void reduce_produced_columns(OpId op, DType dtype, int64_t outer, int64_t reduced, int64_t inner,
                             void* out, const ColumnTiles& produce, void* into) {
  if (!reduces_produced_columns(op, dtype))
    throw Error(detail::str_cat("reduce_produced_columns: ", ops::op_schema(op).name, " of ", dtype,
                                " does not reduce produced columns"));
  visit_float_dtype(dtype, [&]<typename T>() {
    const auto run = [&](const auto& reduction) {
      reduce_columns_produced<T>(outer, reduced, inner, reduction, produce, static_cast<T*>(into));
    };
    if (op == OpId::sum || op == OpId::mean) {
      SumOp<T> sum;
      sum.out = static_cast<T*>(out);
      sum.mean = op == OpId::mean;
      run(sum);
    } else if (op == OpId::amax) {
      ExtremeOp<T, true> amax;
      amax.out = static_cast<T*>(out);
      run(amax);
    } else {
      ExtremeOp<T, false> amin;
      amin.out = static_cast<T*>(out);
      run(amin);
    }
  });
}

void register_cpu_sum_kernels(KernelTable& t) {
  t.set(OpId::sum, [](const KernelCall& c) {
    visit_dtype(c.in(0).dtype(), [&]<typename T>() { run_sum<T>(c, false); });
  });
  t.set(OpId::prod, [](const KernelCall& c) {
    visit_dtype(c.in(0).dtype(), [&]<typename T>() { run_prod<T>(c); });
  });
  t.set(OpId::mean, [](const KernelCall& c) {
    visit_float_dtype(c.in(0).dtype(), [&]<typename T>() { run_sum<T>(c, true); });
  });
  t.set(OpId::var, [](const KernelCall& c) {
    visit_float_dtype(c.in(0).dtype(), [&]<typename T>() { run_var<T>(c, false); });
  });
  t.set(OpId::std, [](const KernelCall& c) {
    visit_float_dtype(c.in(0).dtype(), [&]<typename T>() { run_var<T>(c, true); });
  });
  t.set(OpId::norm, [](const KernelCall& c) {
    visit_float_dtype(c.in(0).dtype(), [&]<typename T>() { run_norm<T>(c); });
  });
  t.set(OpId::logsumexp, [](const KernelCall& c) {
    visit_float_dtype(c.in(0).dtype(), [&]<typename T>() { run_logsumexp<T>(c); });
  });
}

}  // namespace kiln::backend::cpu
