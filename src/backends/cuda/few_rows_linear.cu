// linear for inputs of a few rows (batch 1 to 8: an LSTM cell's projections,
// a classifier head): one warp per output feature reads its weight row once,
// coalesced, for every input row, and adds the bias. At these sizes a
// product is bound by its launch; this kernel costs one plain launch, where a
// cuBLASLt call costs several microseconds more of host time. Sums are in
// float (double for float64), in a fixed order: results are deterministic.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"

namespace kiln::backend::cuda {
namespace {

constexpr int kMaxRows = 8;
constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void few_rows_linear_kernel(const T* x, const T* w, const T* bias, T* out, int rows,
                                       int64_t n, int64_t k) {
  using C = dcompute_t<T>;
  const int64_t feature = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (feature >= n) return;
  const T* row = w + feature * k;
  C acc[kMaxRows] = {};
  for (int64_t j = lane; j < k; j += 32) {
    const C wv = to_compute(row[j]);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
      if (r < rows) acc[r] += wv * to_compute(x[r * k + j]);
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r >= rows) break;
    C v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) out[r * n + feature] = cvt<T>(bias ? v + to_compute(bias[feature]) : v);
  }
}

}  // namespace

bool few_rows_linear(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t rows = k == 0 ? 0 : x.numel() / k;
  if (rows < 1 || rows > kMaxRows || n < 32 || k > 16384 || !is_floating(out.dtype()) ||
      !weight.is_contiguous() || !x.is_contiguous() || !out.is_contiguous() ||
      (bias.defined() && !bias.is_contiguous()))
    return false;
  DeviceGuard guard(out.device().index());
  visit_device_dtype(out.dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) {
      const auto blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
      few_rows_linear_kernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream_for(out)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<const T*>(weight.data_ptr()),
          bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
          static_cast<T*>(out.data_ptr()), static_cast<int>(rows), n, k);
    }
  });
  check_launch("few-rows linear kernel");
  return true;
}

}  // namespace kiln::backend::cuda
