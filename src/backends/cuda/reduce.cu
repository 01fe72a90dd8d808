// CUDA kernels of the reductions: sum, mean, prod, amax, amin, max_dim,
// min_dim, argmax, argmin, var, std, norm, logsumexp, any, all.
//
// The input is seen as [outer, reduced, inner] (backends/reduce_view.h). Each
// output is folded by a group of "lanes" of one block, then the lanes are
// merged in shared memory:
//   inner == 1: rows are contiguous; lanes run along a row (threadIdx.x), and
//               one block folds several rows when rows are short;
//   inner > 1:  threadIdx.x runs along the contiguous columns, lanes along
//               the reduced dim (threadIdx.y).
// When there are too few outputs to fill the GPU, the reduced range is also
// split across blocks (blockIdx.y); a second kernel merges the partial folds.
#include <cmath>
#include <limits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/reduce_view.h"
#include "ops/dispatch.h"
#include "ops/workspace.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kReduceThreads = 256;

struct ReduceShape {
  int64_t outer, reduced, inner;
  int64_t chunk;  // reduced elements per split
  int lanes_x;    // threadIdx.x extent
  int lanes_y;    // threadIdx.y extent
  bool rows;      // inner == 1: lanes along x
};

template <typename Op>
__device__ void reduce_body(const Op& op, const typename Op::In* x, const ReduceShape s,
                            typename Op::Acc* partials) {
  using Acc = typename Op::Acc;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int64_t M = s.outer * s.inner;
  const int lane = s.rows ? threadIdx.x : threadIdx.y;
  const int nlanes = s.rows ? s.lanes_x : s.lanes_y;
  const int64_t m = s.rows ? int64_t{blockIdx.x} * s.lanes_y + threadIdx.y
                           : int64_t{blockIdx.x} * s.lanes_x + threadIdx.x;
  const int64_t begin = int64_t{blockIdx.y} * s.chunk;
  const int64_t end = begin + s.chunk < s.reduced ? begin + s.chunk : s.reduced;
  Acc acc = op.identity();
  if (m < M) {
    const int64_t o = m / s.inner, i = m - o * s.inner;
    const typename Op::In* base = x + o * s.reduced * s.inner + i;
    for (int64_t r = begin + lane; r < end; r += nlanes)
      acc = op.step(acc, to_compute(base[r * s.inner]), r);
  }
  const int slot = threadIdx.y * s.lanes_x + threadIdx.x;
  smem[slot] = acc;
  __syncthreads();
  for (int w = nlanes / 2; w > 0; w /= 2) {
    if (lane < w) {
      const int other = s.rows ? slot + w : slot + w * s.lanes_x;
      smem[slot] = op.merge(smem[slot], smem[other]);
    }
    __syncthreads();
  }
  if (lane == 0 && m < M) {
    if (gridDim.y == 1)
      op.finish(m, smem[slot], s.reduced);
    else
      partials[int64_t{blockIdx.y} * M + m] = smem[slot];
  }
}

template <typename Op>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(Op op, const typename Op::In* x, ReduceShape s, typename Op::Acc* partials) {
  reduce_body(op, x, s, partials);
}

template <typename Op>
__global__ void merge_partials_kernel(Op op, const typename Op::Acc* partials, int64_t M,
                                      int splits, int64_t reduced) {
  for (int64_t m = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; m < M;
       m += int64_t{gridDim.x} * blockDim.x) {
    typename Op::Acc acc = partials[m];
    for (int s = 1; s < splits; ++s) acc = op.merge(acc, partials[s * M + m]);
    op.finish(m, acc, reduced);
  }
}

int pow2_at_most(int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

int multiprocessors(int device) {
  static int count[64] = {};
  if (device < 64 && count[device]) return count[device];
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
  if (device < 64) count[device] = n;
  return n;
}

// Folds the view of x for every output with op (whose finish writes them).
template <typename Op>
void run_reduce(const Tensor& like, const ReduceView& v, Op op) {
  using Acc = typename Op::Acc;
  const int64_t M = v.outer * v.inner;
  if (M == 0) return;
  const int device = like.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = stream_for(like);
  ReduceShape s{v.outer, v.reduced, v.inner, v.reduced, 1, 1, v.inner == 1};
  if (s.rows) {
    s.lanes_x = pow2_at_most(v.reduced, kReduceThreads);
    s.lanes_y = kReduceThreads / s.lanes_x;
  } else {
    s.lanes_x = pow2_at_most(v.inner, 32);
    s.lanes_y = kReduceThreads / s.lanes_x;
  }
  const int outputs_per_block = s.rows ? s.lanes_y : s.lanes_x;
  const int64_t blocks = (M + outputs_per_block - 1) / outputs_per_block;
  const int lanes = s.rows ? s.lanes_x : s.lanes_y;
  // Split the reduced range when the outputs alone leave most of the GPU idle
  // and each split still folds at least 16 elements per lane.
  const int64_t target = 4 * int64_t{multiprocessors(device)};
  int64_t splits = 1;
  if (blocks < target && v.reduced > int64_t{lanes} * 32) {
    splits = std::min<int64_t>(
        {(target + blocks - 1) / blocks, v.reduced / (int64_t{lanes} * 16), 1024});
    splits = std::max<int64_t>(splits, 1);
  }
  s.chunk = std::max<int64_t>(1, (v.reduced + splits - 1) / splits);
  splits = std::max<int64_t>(1, (v.reduced + s.chunk - 1) / s.chunk);
  Tensor workspace;
  Acc* partials = nullptr;
  if (splits > 1) {
    workspace = ops::make_workspace(static_cast<size_t>(splits * M) * sizeof(Acc), like.device());
    partials = static_cast<Acc*>(workspace.data_ptr());
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  const dim3 block(s.lanes_x, s.lanes_y);
  reduce_kernel<Op><<<grid, block, kReduceThreads * sizeof(Acc), stream>>>(
      op, reinterpret_cast<const typename Op::In*>(v.data), s, partials);
  check_launch("reduce kernel");
  if (splits > 1) {
    const unsigned g = static_cast<unsigned>(std::min<int64_t>((M + 255) / 256, 65536));
    merge_partials_kernel<Op>
        <<<g, 256, 0, stream>>>(op, partials, M, static_cast<int>(splits), v.reduced);
    check_launch("reduce merge kernel");
  }
}

template <typename C>
__device__ inline C nan_max(C a, C x) {
  return (x > a || x != x) ? x : a;
}
template <typename C>
__device__ inline C nan_min(C a, C x) {
  return (x < a || x != x) ? x : a;
}

// The accumulator of sums: float for float32 and the 16-bit floats, double
// for double, int64 for the integers.
template <typename C>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<C>, C, int64_t>;

template <typename T>
struct SumOp {
  using In = T;
  using C = dcompute_t<T>;
  using Acc = sum_acc_t<C>;
  T* out;
  bool mean;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc step(Acc a, C x, int64_t) const { return a + static_cast<Acc>(x); }
  __device__ Acc merge(Acc a, Acc b) const { return a + b; }
  __device__ void finish(int64_t m, Acc t, int64_t n) const {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (mean) t /= static_cast<Acc>(n);
    }
    out[m] = cvt<T>(t);
  }
};

// Products in double (int64 for integers): float partial products could
// overflow or underflow where the whole product does not.
template <typename T>
struct ProdOp {
  using In = T;
  using C = dcompute_t<T>;
  using Acc = std::conditional_t<std::is_floating_point_v<C>, double, int64_t>;
  T* out;
  __device__ Acc identity() const { return Acc(1); }
  __device__ Acc step(Acc a, C x, int64_t) const { return a * static_cast<Acc>(x); }
  __device__ Acc merge(Acc a, Acc b) const { return a * b; }
  __device__ void finish(int64_t m, Acc t, int64_t) const { out[m] = cvt<T>(static_cast<C>(t)); }
};

template <typename C, bool kMax>
__host__ __device__ constexpr C extreme_identity() {
  if constexpr (std::is_same_v<C, bool>)
    return !kMax;
  else if constexpr (std::is_floating_point_v<C>)
    return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  else
    return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}

template <typename T, bool kMax>
struct ExtremeOp {
  using In = T;
  using C = dcompute_t<T>;
  using Acc = C;
  T* out;
  __device__ Acc identity() const { return extreme_identity<C, kMax>(); }
  __device__ Acc step(Acc a, C x, int64_t) const { return kMax ? nan_max(a, x) : nan_min(a, x); }
  __device__ Acc merge(Acc a, Acc b) const { return step(a, b, 0); }
  __device__ void finish(int64_t m, Acc t, int64_t) const { out[m] = cvt<T>(t); }
};

// The extreme value and its first index; NaN is the extreme of all.
template <typename T, bool kMax>
struct ArgOp {
  using In = T;
  using C = dcompute_t<T>;
  struct Acc {
    C value;
    int64_t index;  // -1: nothing seen
  };
  T* values;  // null for argmax and argmin
  int64_t* indices;
  // Whether (x, i) comes before (best, j): a better value, or an equal one
  // (NaN equals NaN here) at a smaller index.
  __device__ static bool before(C x, int64_t i, C best, int64_t j) {
    if (j < 0) return true;
    if (i < 0) return false;
    const bool xn = x != x, bn = best != best;
    if (xn || bn) return xn && (!bn || i < j);
    if (x == best) return i < j;
    return kMax ? x > best : x < best;
  }
  __device__ Acc identity() const { return {C(0), -1}; }
  __device__ Acc step(Acc a, C x, int64_t r) const {
    return before(x, r, a.value, a.index) ? Acc{x, r} : a;
  }
  __device__ Acc merge(Acc a, Acc b) const {
    return before(b.value, b.index, a.value, a.index) ? b : a;
  }
  __device__ void finish(int64_t m, Acc t, int64_t) const {
    if (values) values[m] = cvt<T>(t.value);
    indices[m] = t.index;
  }
};

template <typename T, bool kAny>
struct LogicalOp {
  using In = T;
  using C = dcompute_t<T>;
  using Acc = int;
  bool* out;
  __device__ Acc identity() const { return kAny ? 0 : 1; }
  __device__ Acc step(Acc a, C x, int64_t) const {
    const int nonzero = x != C(0);
    return kAny ? (a | nonzero) : (a & nonzero);
  }
  __device__ Acc merge(Acc a, Acc b) const { return kAny ? (a | b) : (a & b); }
  __device__ void finish(int64_t m, Acc t, int64_t) const { out[m] = t != 0; }
};

// var and std by Welford's method in double, partial folds merged by Chan's formula.
template <typename T>
struct VarOp {
  using In = T;
  using C = dcompute_t<T>;
  struct Acc {
    double mean, m2;
    int64_t n;
  };
  T* out;
  double correction;
  bool take_sqrt;
  __device__ Acc identity() const { return {0, 0, 0}; }
  __device__ Acc step(Acc a, C x, int64_t) const {
    const double v = static_cast<double>(x);
    a.n += 1;
    const double delta = v - a.mean;
    a.mean += delta / static_cast<double>(a.n);
    a.m2 += delta * (v - a.mean);
    return a;
  }
  __device__ Acc merge(Acc a, Acc b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const double delta = b.mean - a.mean;
    const double nb_over_n = static_cast<double>(b.n) / static_cast<double>(n);
    return {a.mean + delta * nb_over_n,
            a.m2 + b.m2 + delta * delta * static_cast<double>(a.n) * nb_over_n, n};
  }
  __device__ void finish(int64_t m, Acc t, int64_t n) const {
    // PyTorch divides by max(0, N - correction): N <= correction gives inf or NaN.
    const double d = static_cast<double>(n) - correction;
    const double var = t.m2 / (d > 0 ? d : 0.0);
    out[m] = cvt<T>(static_cast<C>(take_sqrt ? sqrt(var) : var));
  }
};

enum class NormKind { kL0, kL1, kL2, kP, kInf, kNegInf };

template <typename T, NormKind K>
struct NormOp {
  using In = T;
  using C = dcompute_t<T>;
  static constexpr bool kExtreme = K == NormKind::kInf || K == NormKind::kNegInf;
  using Acc = std::conditional_t<kExtreme, C, double>;
  T* out;
  double p;
  __device__ Acc identity() const {
    return K == NormKind::kNegInf ? std::numeric_limits<Acc>::infinity() : Acc(0);
  }
  __device__ Acc step(Acc a, C x, int64_t) const {
    const C ax = x < C(0) ? -x : x;
    if constexpr (K == NormKind::kL0)
      return a + (x != C(0) ? 1.0 : 0.0);
    else if constexpr (K == NormKind::kL1)
      return a + static_cast<double>(ax);
    else if constexpr (K == NormKind::kL2)
      return a + static_cast<double>(x) * static_cast<double>(x);
    else if constexpr (K == NormKind::kP)
      return a + pow(static_cast<double>(ax), p);
    else if constexpr (K == NormKind::kInf)
      return nan_max(a, (x != x) ? x : ax);
    else
      return nan_min(a, (x != x) ? x : ax);
  }
  __device__ Acc merge(Acc a, Acc b) const {
    if constexpr (K == NormKind::kInf)
      return nan_max(a, b);
    else if constexpr (K == NormKind::kNegInf)
      return nan_min(a, b);
    else
      return a + b;
  }
  __device__ void finish(int64_t m, Acc t, int64_t) const {
    double r = static_cast<double>(t);
    if constexpr (K == NormKind::kL2) r = sqrt(r);
    if constexpr (K == NormKind::kP) r = pow(r, 1 / p);
    out[m] = cvt<T>(static_cast<C>(r));
  }
};

// logsumexp in one pass: a running max and the sum of exp(x - max), rescaled
// when the max grows. An infinite max is not subtracted (inf - inf is NaN).
template <typename T>
struct LogSumExpOp {
  using In = T;
  using C = dcompute_t<T>;
  struct Acc {
    double max, sum;
  };
  T* out;
  __device__ static double shift_of(double m) { return isinf(m) ? 0.0 : m; }
  __device__ Acc identity() const { return {-INFINITY, 0.0}; }
  __device__ Acc merge(Acc a, Acc b) const {
    if (a.max != a.max || b.max != b.max) return {NAN, NAN};
    const double m = a.max > b.max ? a.max : b.max;
    if (m == -INFINITY) return {m, 0.0};
    const double sa = a.sum == 0 ? 0.0 : a.sum * exp(shift_of(a.max) - shift_of(m));
    const double sb = b.sum == 0 ? 0.0 : b.sum * exp(shift_of(b.max) - shift_of(m));
    return {m, sa + sb};
  }
  __device__ Acc step(Acc a, C x, int64_t) const {
    const double v = static_cast<double>(x);
    return merge(a, Acc{v, exp(v - shift_of(v))});
  }
  __device__ void finish(int64_t m, Acc t, int64_t) const {
    out[m] = cvt<T>(static_cast<C>(log(t.sum) + shift_of(t.max)));
  }
};

template <typename F>
void visit_float(const KernelCall& c, DType t, F&& f) {
  visit_device_dtype(t, [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      f.template operator()<T>();
    else
      unsupported_dtype(c, t);
  });
}

ReduceView view_of(const KernelCall& c, size_t dims_attr) {
  return make_reduce_view(c.in(0), reduce_dims_attr(c, dims_attr), false);
}

template <bool kMax>
void extreme_kernel(const KernelCall& c) {
  visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
    run_reduce(c.out(), view_of(c, 0), ExtremeOp<T, kMax>{static_cast<T*>(c.out().data_ptr())});
  });
}

// max_dim / min_dim (two outputs) and argmax / argmin (one; no dim = all dims).
template <bool kMax>
void arg_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const ReduceView v = make_arg_reduce_view(c);
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    T* values = c.outputs.size() == 2 ? static_cast<T*>(c.out(0).data_ptr()) : nullptr;
    auto* indices = static_cast<int64_t*>(c.out(c.outputs.size() - 1).data_ptr());
    run_reduce(c.out(0), v, ArgOp<T, kMax>{values, indices});
  });
}

template <bool kAny>
void logical_kernel(const KernelCall& c) {
  visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
    run_reduce(c.out(), view_of(c, 0), LogicalOp<T, kAny>{static_cast<bool*>(c.out().data_ptr())});
  });
}

template <typename T, NormKind K>
void norm_of_kind(const KernelCall& c, const ReduceView& v) {
  run_reduce(c.out(), v, NormOp<T, K>{static_cast<T*>(c.out().data_ptr()), c.attrs.f(0)});
}

}  // namespace

void register_cuda_reduce_kernels(KernelTable& t) {
  t.set(OpId::sum, [](const KernelCall& c) {
    visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
      run_reduce(c.out(), view_of(c, 0), SumOp<T>{static_cast<T*>(c.out().data_ptr()), false});
    });
  });
  t.set(OpId::mean, [](const KernelCall& c) {
    visit_float(c, c.in(0).dtype(), [&]<typename T>() {
      run_reduce(c.out(), view_of(c, 0), SumOp<T>{static_cast<T*>(c.out().data_ptr()), true});
    });
  });
  t.set(OpId::prod, [](const KernelCall& c) {
    visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
      run_reduce(c.out(), view_of(c, 0), ProdOp<T>{static_cast<T*>(c.out().data_ptr())});
    });
  });
  t.set(OpId::amax, extreme_kernel<true>);
  t.set(OpId::amin, extreme_kernel<false>);
  t.set(OpId::max_dim, arg_kernel<true>);
  t.set(OpId::min_dim, arg_kernel<false>);
  t.set(OpId::argmax, arg_kernel<true>);
  t.set(OpId::argmin, arg_kernel<false>);
  t.set(OpId::any, logical_kernel<true>);
  t.set(OpId::all, logical_kernel<false>);
  auto var_like = [](bool take_sqrt) {
    return [take_sqrt](const KernelCall& c) {
      visit_float(c, c.in(0).dtype(), [&]<typename T>() {
        run_reduce(c.out(), view_of(c, 0),
                   VarOp<T>{static_cast<T*>(c.out().data_ptr()), c.attrs.f(1), take_sqrt});
      });
    };
  };
  t.set(OpId::var, var_like(false));
  t.set(OpId::std, var_like(true));
  t.set(OpId::norm, [](const KernelCall& c) {
    visit_float(c, c.in(0).dtype(), [&]<typename T>() {
      const ReduceView v = view_of(c, 1);
      const double p = c.attrs.f(0);
      if (p == 0)
        norm_of_kind<T, NormKind::kL0>(c, v);
      else if (p == 1)
        norm_of_kind<T, NormKind::kL1>(c, v);
      else if (p == 2)
        norm_of_kind<T, NormKind::kL2>(c, v);
      else if (p == std::numeric_limits<double>::infinity())
        norm_of_kind<T, NormKind::kInf>(c, v);
      else if (p == -std::numeric_limits<double>::infinity())
        norm_of_kind<T, NormKind::kNegInf>(c, v);
      else
        norm_of_kind<T, NormKind::kP>(c, v);
    });
  });
  t.set(OpId::logsumexp, [](const KernelCall& c) {
    visit_float(c, c.in(0).dtype(), [&]<typename T>() {
      run_reduce(c.out(), view_of(c, 0), LogSumExpOp<T>{static_cast<T*>(c.out().data_ptr())});
    });
  });
}

}  // namespace kiln::backend::cuda
