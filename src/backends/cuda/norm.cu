// CUDA kernels of layer_norm, group_norm, batch_norm and dropout.
//
// layer_norm and group_norm normalize rows (a layer_norm row is the
// normalized shape; a group_norm row is one group of one sample, contiguous
// in memory): a group of lanes per row makes two passes for the statistics
// (mean, then squared deviations, accumulated in double) and one to write
// (backends/cuda/row_reduce.cuh, which kiln's generated kernels share).
// batch_norm in training folds each channel in one block, then normalizes
// elementwise with per-channel scale and shift; in eval it is one elementwise
// pass over the running statistics. Parameters are in the compute type
// (float for the 16-bit floats), as the shape rules cast them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/pointwise.cuh"
#include "backends/cuda/row_group.h"
#include "backends/cuda/row_reduce.cuh"
#include "core/philox.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"
#include "ops/random.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = kRowThreads;

// Which parameter an element of a row uses: layer_norm its position in the
// row; group_norm its channel.
struct RowParams {
  int64_t groups = 0;  // 0: layer_norm
  int64_t channels_per_group = 1;
  int64_t inner = 1;
  __device__ int64_t param_index(int64_t row, int64_t r) const {
    if (groups == 0) return r;
    return (row % groups) * channels_per_group + r / inner;
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    norm_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, int group, double eps,
                     const dcompute_t<T>* w, const dcompute_t<T>* b, RowParams p) {
  using C = dcompute_t<T>;
  const int64_t row = int64_t{blockIdx.x} * (blockDim.x / group) + threadIdx.x / group;
  const bool valid = row < rows;
  const T* xr = x + (valid ? row : 0) * n;
  T* yr = y + (valid ? row : 0) * n;
  normalize_row<C>([xr](int64_t r, bool) { return to_compute(xr[r]); },
                   [yr](int64_t r, C v) { yr[r] = cvt<T>(v); },
                   [&](int64_t r, C* scale, C* shift) {
                     const int64_t k = p.param_index(row, r);
                     *scale = w ? w[k] : C(1);
                     *shift = b ? b[k] : C(0);
                   },
                   n, static_cast<int>(threadIdx.x % group), group, valid, eps);
}

const void* optional_ptr(const KernelCall& c, size_t i, std::vector<Tensor>& keep) {
  if (i >= c.inputs.size() || !c.in(i).defined()) return nullptr;
  keep.push_back(c.in(i).contiguous());
  return keep.back().data_ptr();
}

void norm_rows(const KernelCall& c, int64_t row_length, double eps, RowParams p) {
  const Tensor x = c.in(0).contiguous();
  const Tensor& out = c.out();
  if (x.numel() == 0 || row_length == 0) return;
  const int64_t rows = x.numel() / row_length;
  std::vector<Tensor> keep;
  const void* w = optional_ptr(c, 1, keep);
  const void* b = optional_ptr(c, 2, keep);
  const int group = row_group(row_length);
  const int64_t rows_per_block = kThreads / group;
  DeviceGuard guard(x.device().index());
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      using C = dcompute_t<T>;
      norm_rows_kernel<T><<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                            kThreads, 0, stream_for(out)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), rows, row_length,
          group, eps, static_cast<const C*>(w), static_cast<const C*>(b), p);
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
  check_launch("norm kernel");
}

void layer_norm_op(const KernelCall& c) {
  norm_rows(c, shape_numel(c.attrs.ints(0)), c.attrs.f(1), RowParams{});
}

void group_norm_op(const KernelCall& c) {
  const Tensor& x = c.in(0);
  const int64_t n = x.size(0), channels = x.size(1), groups = c.attrs.i(0);
  const int64_t inner = n * channels == 0 ? 0 : x.numel() / (n * channels);
  norm_rows(c, channels / groups * inner, c.attrs.f(1),
            RowParams{groups, channels / groups, inner});
}

// batch_norm, training: the mean and biased variance of channel blockIdx.x.
// Writes them to the outputs and the scale and shift of the normalization.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    batch_stats_kernel(const T* x, int64_t n, int64_t channels, int64_t inner, double eps,
                       const dcompute_t<T>* w, const dcompute_t<T>* b, dcompute_t<T>* mean_out,
                       dcompute_t<T>* var_out, dcompute_t<T>* scale_shift) {
  using C = dcompute_t<T>;
  const int64_t ch = blockIdx.x;
  const int64_t count = n * inner;
  double sum = 0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t k = e / inner, i = e - k * inner;
    sum += static_cast<double>(to_compute(x[(k * channels + ch) * inner + i]));
  }
  const double mean = group_reduce(sum, kThreads, GroupSum{}) / static_cast<double>(count);
  double dev = 0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t k = e / inner, i = e - k * inner;
    const double d = static_cast<double>(to_compute(x[(k * channels + ch) * inner + i])) - mean;
    dev += d * d;
  }
  const double var = group_reduce(dev, kThreads, GroupSum{}) / static_cast<double>(count);
  if (threadIdx.x == 0) {
    mean_out[ch] = static_cast<C>(mean);
    var_out[ch] = static_cast<C>(var);
    const C scale = static_cast<C>(1 / sqrt(var + eps)) * (w ? w[ch] : C(1));
    scale_shift[ch] = scale;
    const C hi = static_cast<C>(mean);
    scale_shift[channels + ch] = hi;
    scale_shift[2 * channels + ch] = b ? b[ch] : C(0);
    scale_shift[3 * channels + ch] = static_cast<C>(mean - static_cast<double>(hi));
  }
}

// batch_norm's normalization, y = ((x - m1) - m2) * scale + shift with four
// coefficients per channel: eval mode takes m1 = running mean, m2 = 0 (the
// same rounding as x - mean), training the batch mean split in a high and a
// low part. A plane is one channel of one sample, `inner` contiguous elements.
// Block b covers planes [b * per_block, (b + 1) * per_block): their
// coefficients are computed once into shared memory, then the block streams
// the planes' elements as one range, 16 bytes at a time where every plane is
// 16-byte aligned. Small planes (7x7 maps) share a block so that it does
// enough work; large ones get a block each.
constexpr int kMaxBlockPlanes = 64;

template <typename C>
struct EvalCoefficients {
  const C *w, *b, *rm, *rv;
  C *mean_out, *var_out;  // the running statistics are copied to these (batch_norm_eval: null)
  double eps;
  int64_t channels;
  __device__ void operator()(int64_t plane, C* m1, C* m2, C* scale, C* shift) const {
    const int64_t ch = plane % channels;
    *m1 = rm[ch];
    *m2 = C(0);
    *scale = static_cast<C>(1 / sqrt(static_cast<double>(rv[ch]) + eps)) * (w ? w[ch] : C(1));
    *shift = b ? b[ch] : C(0);
    if (plane < channels && mean_out) {
      mean_out[ch] = rm[ch];
      var_out[ch] = rv[ch];
    }
  }
};

template <typename C>
struct TrainCoefficients {
  const C* scale_shift;  // [scale, mean_hi, shift, mean_lo] x channels (batch_stats_kernel)
  int64_t channels;
  __device__ void operator()(int64_t plane, C* m1, C* m2, C* scale, C* shift) const {
    const int64_t ch = plane % channels;
    *scale = scale_shift[ch];
    *m1 = scale_shift[channels + ch];
    *shift = scale_shift[2 * channels + ch];
    *m2 = scale_shift[3 * channels + ch];
  }
};

template <typename T>
struct alignas(16) Pack16 {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};

// What batch_norm_eval does after the normalization: + residual (rounded
// to T first, as eager's add reads batch_norm's output), then relu (keeping
// NaN, as eager's relu).
template <typename T>
struct Epilogue {
  const T* residual = nullptr;  // laid out as the output
  bool relu = false;
  __device__ T operator()(T v, T r) const {
    using C = dcompute_t<T>;
    if (residual) v = cvt<T>(to_compute(v) + to_compute(r));
    if (relu && to_compute(v) < C(0)) v = cvt<T>(C(0));
    return v;
  }
};

template <typename T, int kWidth, typename Coefficients>
__device__ void batch_apply_range(const T* x, T* y, int64_t count, int64_t inner, int n_planes,
                                  const dcompute_t<T> (&coef)[4][kMaxBlockPlanes],
                                  Epilogue<T> epilogue) {
  using C = dcompute_t<T>;
  using P = std::conditional_t<kWidth == 1, T, Pack16<T>>;
  const int64_t packs = count / kWidth;
  const bool fused = epilogue.residual || epilogue.relu;
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    // More than one plane only where inner is small: the offset fits 32 bits.
    const int p = n_planes == 1 ? 0
                                : static_cast<int>(static_cast<uint32_t>(j * kWidth) /
                                                   static_cast<uint32_t>(inner));
    const C m1 = coef[0][p], m2 = coef[1][p], scale = coef[2][p], shift = coef[3][p];
    const P in = reinterpret_cast<const P*>(x)[j];
    P out;
    if constexpr (kWidth == 1) {
      out = cvt<T>(((to_compute(in) - m1) - m2) * scale + shift);
      if (fused) out = epilogue(out, epilogue.residual ? epilogue.residual[j] : out);
    } else {
#pragma unroll
      for (int k = 0; k < kWidth; ++k) out.v[k] = cvt<T>(((to_compute(in.v[k]) - m1) - m2) * scale + shift);
      if (fused) {
        const P r = epilogue.residual ? reinterpret_cast<const P*>(epilogue.residual)[j] : out;
#pragma unroll
        for (int k = 0; k < kWidth; ++k) out.v[k] = epilogue(out.v[k], r.v[k]);
      }
    }
    reinterpret_cast<P*>(y)[j] = out;
  }
}

template <typename T, typename Coefficients>
__global__ void __launch_bounds__(kThreads)
    batch_apply_kernel(const T* x, T* y, int64_t planes, int64_t inner, int per_block,
                       bool vectorized, Coefficients coefficients, Epilogue<T> epilogue) {
  using C = dcompute_t<T>;
  __shared__ C coef[4][kMaxBlockPlanes];
  const int64_t first = blockIdx.x * int64_t{per_block};
  const int n_planes = static_cast<int>(planes - first < per_block ? planes - first : per_block);
  for (int p = threadIdx.x; p < n_planes; p += blockDim.x)
    coefficients(first + p, &coef[0][p], &coef[1][p], &coef[2][p], &coef[3][p]);
  __syncthreads();
  const int64_t count = n_planes * inner;
  x += first * inner;
  y += first * inner;
  if (epilogue.residual) epilogue.residual += first * inner;
  if (vectorized) {
    batch_apply_range<T, Pack16<T>::kCount, Coefficients>(x, y, count, inner, n_planes, coef,
                                                          epilogue);
  } else {
    batch_apply_range<T, 1, Coefficients>(x, y, count, inner, n_planes, coef, epilogue);
  }
}

// The launch of batch_apply_kernel over `planes` planes of `inner` elements.
template <typename T, typename Coefficients>
void launch_batch_apply(const T* x, T* y, int64_t planes, int64_t inner, Coefficients coefficients,
                        cudaStream_t stream, Epilogue<T> epilogue = {}) {
  constexpr int64_t kBlockElements = 4096;  // small planes are grouped up to this many elements
  constexpr int64_t kMinBlocks = 264;       // two blocks per SM of an H100/H200
  const int64_t grouped = std::min<int64_t>(kBlockElements / std::max<int64_t>(inner, 1), planes / kMinBlocks);
  const int per_block = static_cast<int>(std::clamp<int64_t>(grouped, 1, kMaxBlockPlanes));
  const int64_t blocks = (planes + per_block - 1) / per_block;
  constexpr int kWidth = Pack16<T>::kCount;
  const bool vectorized = inner % kWidth == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(epilogue.residual) % 16 == 0;
  const int64_t packs = per_block * inner / (vectorized ? kWidth : 1);
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>((packs + 31) / 32 * 32, 32, kThreads));
  // blocks <= planes / per_block stays below 2^31 for any tensor a device holds.
  batch_apply_kernel<T, Coefficients><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      x, y, planes, inner, per_block, vectorized, coefficients, epilogue);
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

void batch_norm_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const int64_t n = x.size(0), channels = x.size(1);
  const int64_t inner = n * channels == 0 ? 0 : x.numel() / (n * channels);
  const double eps = c.attrs.f(1);
  std::vector<Tensor> keep;
  const void* w = optional_ptr(c, 1, keep);
  const void* b = optional_ptr(c, 2, keep);
  DeviceGuard guard(x.device().index());
  const cudaStream_t stream = stream_for(c.out(0));
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      using C = dcompute_t<T>;
      if (channels == 0) return;
      auto* mean_out = static_cast<C*>(c.out(1).data_ptr());
      auto* var_out = static_cast<C*>(c.out(2).data_ptr());
      const auto* xp = static_cast<const T*>(x.data_ptr());
      auto* yp = static_cast<T*>(c.out(0).data_ptr());
      if (!c.attrs.b(0)) {
        const Tensor rm = c.in(3).contiguous(), rv = c.in(4).contiguous();
        // With no samples the kernel runs over one plane per channel, to copy
        // the running statistics (n may be huge beside an empty dim).
        launch_batch_apply<T>(
            xp, yp, x.numel() == 0 ? channels : n * channels, inner,
            EvalCoefficients<C>{static_cast<const C*>(w), static_cast<const C*>(b),
                                static_cast<const C*>(rm.data_ptr()),
                                static_cast<const C*>(rv.data_ptr()), mean_out, var_out, eps,
                                channels},
            stream);
        check_launch("batch_norm kernel");
        return;
      }
      Tensor scale_shift = ops::make_tensor({4 * channels}, c.out(1).dtype(), x.device(), false);
      auto* ss = static_cast<C*>(scale_shift.data_ptr());
      batch_stats_kernel<T><<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
          xp, n, channels, inner, eps, static_cast<const C*>(w), static_cast<const C*>(b), mean_out,
          var_out, ss);
      check_launch("batch_norm statistics kernel");
      if (x.numel() == 0) return;
      launch_batch_apply<T>(xp, yp, n * channels, inner, TrainCoefficients<C>{ss, channels}, stream);
      check_launch("batch_norm kernel");
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
}

// batch_norm_eval: the eval pass of batch_norm with its epilogue.
void batch_norm_eval_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  const int64_t n = x.size(0), channels = x.size(1);
  if (x.numel() == 0) return;
  const int64_t inner = x.numel() / (n * channels);
  std::vector<Tensor> keep;
  const void* w = optional_ptr(c, 1, keep);
  const void* b = optional_ptr(c, 2, keep);
  const Tensor rm = c.in(3).contiguous(), rv = c.in(4).contiguous();
  const Tensor residual =
      c.inputs.size() > 5 && c.in(5).defined() ? c.in(5).contiguous() : Tensor();
  DeviceGuard guard(x.device().index());
  const cudaStream_t stream = stream_for(c.out(0));
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      using C = dcompute_t<T>;
      const Epilogue<T> epilogue{
          residual.defined() ? static_cast<const T*>(residual.data_ptr()) : nullptr, c.attrs.b(1)};
      launch_batch_apply<T>(static_cast<const T*>(x.data_ptr()),
                            static_cast<T*>(c.out(0).data_ptr()), n * channels, inner,
                            EvalCoefficients<C>{static_cast<const C*>(w), static_cast<const C*>(b),
                                                static_cast<const C*>(rm.data_ptr()),
                                                static_cast<const C*>(rv.data_ptr()), nullptr,
                                                nullptr, c.attrs.f(0), channels},
                            stream, epilogue);
      check_launch("batch_norm_eval kernel");
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
}

// dropout: element i is kept iff philox::uniform_f32(seed, offset + i) >= p,
// the CPU's rule, so both backends drop the same elements.
// In a recorded device graph, the seed and base offset are read from
// `words` (ops::recorded_philox), and `offset` is added to the base.
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, double p, dcompute_t<T> scale,
                               uint64_t seed, uint64_t offset, const uint64_t* words) {
  if (words) seed = words[0], offset += words[1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const bool keep = philox::uniform_f32(seed, offset + static_cast<uint64_t>(i)) >= p;
    y[i] = keep ? cvt<T>(to_compute(x[i]) * scale) : cvt<T>(0.0f);
  }
}

void dropout_op(const KernelCall& c) {
  const Tensor x = c.in(0).contiguous();
  if (x.numel() == 0) return;
  const double p = c.attrs.f(0);
  DeviceGuard guard(x.device().index());
  visit_device_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      using C = dcompute_t<T>;
      const C scale = p < 1 ? static_cast<C>(1 / (1 - p)) : C(0);
      dropout_kernel<T><<<grid_for(x.numel()), kThreads, 0, stream_for(x)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(c.out().data_ptr()), x.numel(), p,
          scale, static_cast<uint64_t>(c.attrs.i(1)), static_cast<uint64_t>(c.attrs.i(2)), ops::recorded_philox());
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
  check_launch("dropout kernel");
}

}  // namespace

void register_cuda_norm_kernels(KernelTable& t) {
  t.set(OpId::layer_norm, layer_norm_op);
  t.set(OpId::group_norm, group_norm_op);
  t.set(OpId::batch_norm, batch_norm_op);
  t.set(OpId::batch_norm_eval, batch_norm_eval_op);
  t.set(OpId::dropout, dropout_op);
}

}  // namespace kiln::backend::cuda
