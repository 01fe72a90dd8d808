// CUDA kernels of softmax, log_softmax and cumsum along one dim, over the
// [outer, n, inner] line view of the input (backends/reduce_view.h).
//   inner == 1: a group of lanes per row (a part of a warp for rows up to
//               1024 elements, a whole block for longer ones), reducing with
//               warp shuffles (backends/cuda/row_reduce.cuh, which kiln's
//               generated kernels share);
//   inner > 1:  a thread per column, coalesced across the columns.
// softmax is numerically stable (x - max); a row of -inf gives NaN, as in
// PyTorch. cumsum accumulates floats in double and integers in wrapping
// 64-bit, as the CPU backend does.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/cuda/row_group.h"
#include "backends/cuda/row_reduce.cuh"
#include "backends/reduce_view.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = kRowThreads;

template <typename T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, int group) {
  using C = dcompute_t<T>;
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / group) + threadIdx.x / group;
  const bool valid = row < rows;
  const T* xr = x + (valid ? row : 0) * n;
  T* yr = y + (valid ? row : 0) * n;
  softmax_row<C, kLog>([xr](int64_t r, bool) { return to_compute(xr[r]); },
                       [yr](int64_t r, C v) { yr[r] = cvt<T>(v); }, n,
                       static_cast<int>(threadIdx.x % group), group, valid);
}

template <typename T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmax_columns_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using C = dcompute_t<T>;
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < outer * inner;
       w += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = w / inner, i = w - o * inner;
    const T* xc = x + o * n * inner + i;
    T* yc = y + o * n * inner + i;
    C m = -INFINITY;
    bool nan = false;
    for (int64_t r = 0; r < n; ++r) {
      const C v = to_compute(xc[r * inner]);
      m = v > m ? v : m;
      nan = nan || v != v;
    }
    if (nan) m = NAN;
    double total = 0;
    for (int64_t r = 0; r < n; ++r) total += exp(to_compute(xc[r * inner]) - m);
    if constexpr (kLog) {
      const C log_sum = static_cast<C>(log(total));
      for (int64_t r = 0; r < n; ++r)
        yc[r * inner] = cvt<T>((to_compute(xc[r * inner]) - m) - log_sum);
    } else {
      const C inv = static_cast<C>(1 / total);
      for (int64_t r = 0; r < n; ++r)
        yc[r * inner] = cvt<T>(exp(to_compute(xc[r * inner]) - m) * inv);
    }
  }
}

unsigned grid_for(int64_t work, int per_block) {
  return static_cast<unsigned>(
      std::min<int64_t>((work + per_block - 1) / per_block, int64_t{1} << 20));
}

template <bool kLog>
void softmax_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : c.attrs.i(0));
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      DeviceGuard guard(x.device().index());
      const cudaStream_t stream = stream_for(c.out());
      const T* in = reinterpret_cast<const T*>(v.data);
      T* out = static_cast<T*>(c.out().data_ptr());
      if (v.inner == 1) {
        const int group = row_group(v.reduced);
        const int64_t rows_per_block = kThreads / group;
        const unsigned grid =
            static_cast<unsigned>((v.outer + rows_per_block - 1) / rows_per_block);
        softmax_rows_kernel<T, kLog>
            <<<grid, kThreads, 0, stream>>>(in, out, v.outer, v.reduced, group);
      } else {
        softmax_columns_kernel<T, kLog>
            <<<grid_for(v.outer * v.inner, kThreads), kThreads, 0, stream>>>(in, out, v.outer,
                                                                             v.reduced, v.inner);
      }
      check_launch(kLog ? "log_softmax kernel" : "softmax kernel");
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
}

// cumsum accumulators: double for floats, wrapping uint64 for integers.
template <typename C>
using scan_acc_t = std::conditional_t<std::is_floating_point_v<C>, double, uint64_t>;

template <typename T>
__device__ inline T scan_out(scan_acc_t<dcompute_t<T>> s) {
  using C = dcompute_t<T>;
  if constexpr (std::is_floating_point_v<C>)
    return cvt<T>(static_cast<C>(s));
  else
    return static_cast<T>(static_cast<C>(s));
}

template <typename T>
__device__ inline scan_acc_t<dcompute_t<T>> scan_in(T x) {
  using Acc = scan_acc_t<dcompute_t<T>>;
  if constexpr (std::is_floating_point_v<Acc>)
    return static_cast<Acc>(to_compute(x));
  else
    return static_cast<Acc>(static_cast<int64_t>(x));
}

// A thread per line: lines down columns (inner > 1) or short rows.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    scan_lines_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < outer * inner;
       w += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = w / inner, i = w - o * inner;
    const int64_t base = o * n * inner + i;
    scan_acc_t<dcompute_t<T>> s = 0;
    for (int64_t r = 0; r < n; ++r) {
      s += scan_in(x[base + r * inner]);
      y[base + r * inner] = scan_out<T>(s);
    }
  }
}

// A block per long contiguous row: kThreads elements at a time, scanned with
// warp shuffles, plus the running total of the earlier ones.
template <typename T>
__global__ void __launch_bounds__(kThreads) scan_rows_kernel(const T* x, T* y, int64_t n) {
  using Acc = scan_acc_t<dcompute_t<T>>;
  __shared__ Acc warp_totals[kThreads / 32];
  __shared__ Acc carry_shared;
  const T* xr = x + int64_t{blockIdx.x} * n;
  T* yr = y + int64_t{blockIdx.x} * n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  Acc carry = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t r = base + threadIdx.x;
    Acc v = r < n ? scan_in(xr[r]) : Acc(0);
    for (int o = 1; o < 32; o *= 2) {
      const Acc up = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += up;
    }
    if (lane == 31) warp_totals[warp] = v;
    __syncthreads();
    Acc before = 0;
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    if (r < n) yr[r] = scan_out<T>(carry + before + v);
    if (threadIdx.x == kThreads - 1) carry_shared = carry + before + v;
    __syncthreads();
    carry = carry_shared;
    __syncthreads();
  }
}

void cumsum_kernel(const KernelCall& c) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  const ReduceView v = make_line_view(x, x.dim() == 0 ? 0 : c.attrs.i(0));
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsBoolT<T>) {
      unsupported_dtype(c, x.dtype());
    } else {
      DeviceGuard guard(x.device().index());
      const cudaStream_t stream = stream_for(c.out());
      const T* in = reinterpret_cast<const T*>(v.data);
      T* out = static_cast<T*>(c.out().data_ptr());
      if (v.inner == 1 && v.reduced > 64) {
        scan_rows_kernel<T>
            <<<static_cast<unsigned>(v.outer), kThreads, 0, stream>>>(in, out, v.reduced);
      } else {
        scan_lines_kernel<T><<<grid_for(v.outer * v.inner, kThreads), kThreads, 0, stream>>>(
            in, out, v.outer, v.reduced, v.inner);
      }
      check_launch("cumsum kernel");
    }
  });
}

}  // namespace

void register_cuda_softmax_kernels(KernelTable& t) {
  t.set(OpId::softmax, softmax_kernel<false>);
  t.set(OpId::log_softmax, softmax_kernel<true>);
  t.set(OpId::cumsum, cumsum_kernel);
}

}  // namespace kiln::backend::cuda
