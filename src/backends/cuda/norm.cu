// CUDA kernels of layer_norm, group_norm, batch_norm and dropout.
//
// layer_norm and group_norm normalize rows (a layer_norm row is the
// normalized shape; a group_norm row is one group of one sample, contiguous
// in memory): a group of lanes per row makes two passes for the statistics
// (mean, then squared deviations, accumulated in double) and one to write.
// batch_norm in training folds each channel in one block, then normalizes
// elementwise with per-channel scale and shift; in eval it is one elementwise
// pass over the running statistics. Parameters are in the compute type
// (float for the 16-bit floats), as the shape rules cast them.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/pointwise.cuh"
#include "core/philox.h"
#include "core/shape_util.h"
#include "ops/dispatch.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

constexpr int kThreads = 256;

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
  const int lane = threadIdx.x % group;
  const bool valid = row < rows;
  const T* xr = x + (valid ? row : 0) * n;
  double sum = 0;
  if (valid) {
    for (int64_t r = lane; r < n; r += group) sum += static_cast<double>(to_compute(xr[r]));
  }
  const double mean = group_reduce(sum, group, GroupSum{}) / static_cast<double>(n);
  double dev = 0;
  if (valid) {
    for (int64_t r = lane; r < n; r += group) {
      const double d = static_cast<double>(to_compute(xr[r])) - mean;
      dev += d * d;
    }
  }
  const double var = group_reduce(dev, group, GroupSum{}) / static_cast<double>(n);
  if (!valid) return;
  const C rstd = static_cast<C>(1 / sqrt(var + eps));
  // The mean as a float pair (hi + lo) keeps x - mean exact where x is large
  // against its spread, as the CPU kernels do.
  const C m_hi = static_cast<C>(mean), m_lo = static_cast<C>(mean - static_cast<double>(m_hi));
  T* yr = y + row * n;
  for (int64_t r = lane; r < n; r += group) {
    const int64_t k = p.param_index(row, r);
    const C scale = w ? w[k] : C(1), shift = b ? b[k] : C(0);
    yr[r] = cvt<T>(((to_compute(xr[r]) - m_hi) - m_lo) * rstd * scale + shift);
  }
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
  int group = 1;
  while (group < 32 && group < row_length) group *= 2;
  if (row_length > 1024) group = kThreads;
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

// batch_norm, eval: one pass that normalizes with the running statistics and
// copies them to the mean and var outputs. Block b of grid.x walks planes
// b, b + gridDim.x, ... (a plane is one channel of one sample, `inner`
// contiguous elements), so the channel is found once per plane, not per element.
template <typename T>
__global__ void batch_eval_kernel(const T* x, T* y, int64_t planes, int64_t channels, int64_t inner,
                                  double eps, const dcompute_t<T>* w, const dcompute_t<T>* b,
                                  const dcompute_t<T>* rm, const dcompute_t<T>* rv,
                                  dcompute_t<T>* mean_out, dcompute_t<T>* var_out) {
  using C = dcompute_t<T>;
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < channels;
       ch += int64_t{gridDim.x} * blockDim.x) {
    mean_out[ch] = rm[ch];
    var_out[ch] = rv[ch];
  }
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const int64_t ch = plane % channels;
    const C scale = static_cast<C>(1 / sqrt(static_cast<double>(rv[ch]) + eps)) * (w ? w[ch] : C(1));
    const C mean = rm[ch], shift = b ? b[ch] : C(0);
    const T* in = x + plane * inner;
    T* out = y + plane * inner;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      out[i] = cvt<T>((to_compute(in[i]) - mean) * scale + shift);
  }
}

// batch_norm, training: y = (x - mean) * scale + shift per channel, plane by
// plane as the eval kernel.
template <typename T>
__global__ void batch_apply_kernel(const T* x, T* y, int64_t planes, int64_t channels, int64_t inner,
                                   const dcompute_t<T>* scale_shift) {
  using C = dcompute_t<T>;
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const int64_t ch = plane % channels;
    const C mean_hi = scale_shift[channels + ch], mean_lo = scale_shift[3 * channels + ch];
    const C scale = scale_shift[ch], shift = scale_shift[2 * channels + ch];
    const T* in = x + plane * inner;
    T* out = y + plane * inner;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      out[i] = cvt<T>(((to_compute(in[i]) - mean_hi) - mean_lo) * scale + shift);
  }
}

// Threads per block of the plane kernels: enough for a plane, at most kThreads.
unsigned plane_threads(int64_t inner) {
  return static_cast<unsigned>(std::min<int64_t>(kThreads, std::max<int64_t>(32, (inner + 31) / 32 * 32)));
}

unsigned plane_blocks(int64_t planes) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(planes, int64_t{1} << 20)));
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
      if (!c.attrs.b(0)) {
        const Tensor rm = c.in(3).contiguous(), rv = c.in(4).contiguous();
        batch_eval_kernel<T><<<plane_blocks(std::max(n * channels, channels)), plane_threads(inner), 0,
                               stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(c.out(0).data_ptr()), n * channels,
            channels, inner, eps, static_cast<const C*>(w), static_cast<const C*>(b),
            static_cast<const C*>(rm.data_ptr()), static_cast<const C*>(rv.data_ptr()), mean_out,
            var_out);
        check_launch("batch_norm kernel");
        return;
      }
      Tensor scale_shift = ops::make_tensor({4 * channels}, c.out(1).dtype(), x.device(), false);
      auto* ss = static_cast<C*>(scale_shift.data_ptr());
      batch_stats_kernel<T><<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), n, channels, inner, eps, static_cast<const C*>(w),
          static_cast<const C*>(b), mean_out, var_out, ss);
      check_launch("batch_norm statistics kernel");
      if (x.numel() == 0) return;
      batch_apply_kernel<T><<<plane_blocks(n * channels), plane_threads(inner), 0, stream>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(c.out(0).data_ptr()), n * channels,
          channels, inner, ss);
      check_launch("batch_norm kernel");
    } else {
      unsupported_dtype(c, x.dtype());
    }
  });
}

// dropout: element i is kept iff philox::uniform_f32(seed, offset + i) >= p,
// the CPU's rule, so both backends drop the same elements.
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, double p, dcompute_t<T> scale,
                               uint64_t seed, uint64_t offset) {
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
          scale, static_cast<uint64_t>(c.attrs.i(1)), static_cast<uint64_t>(c.attrs.i(2)));
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
  t.set(OpId::dropout, dropout_op);
}

}  // namespace kiln::backend::cuda
