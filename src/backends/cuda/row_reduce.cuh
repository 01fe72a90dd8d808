// The rows of softmax, log_softmax and layer_norm on a CUDA device, in one
// place for the CUDA library kernels (softmax.cu, norm.cu) and the CUDA
// kernels kiln generates around them (compiler/codegen/cuda_source.h),
// whose NVRTC source embeds this file: a generated kernel that computes a
// row's elements from its inputs and reduces the row as it goes reduces it
// in the library's order, with the library's lanes (backends/cuda/
// row_group.h), so its results are the library's bit for bit
// (docs/architecture.md, "Generated kernels on CUDA"). Both compile it
// without contraction into FMA (--fmad=false).
//
// A row of n elements is reduced by `group` consecutive lanes of a block
// (group_reduce.cuh); every lane of the block calls the function, `valid`
// false for lanes past the last row. load(r, first) gives element r of the
// lane's row in the compute type C (first: the pass that reads each
// element first); store(r, v) writes element r of its result.
//
// No #include: NVRTC's source has no standard headers.
#pragma once

#include "backends/cuda/group_reduce.cuh"

namespace kiln::backend::cuda {

__device__ __forceinline__ float row_quiet_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double row_quiet_nan(double) {
  return __longlong_as_double(0x7ff8000000000000LL);
}
__device__ __forceinline__ float row_infinity(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double row_infinity(double) {
  return __longlong_as_double(0x7ff0000000000000LL);
}

// softmax (kLog: log_softmax) of a row: x - max, the sum of exponentials in
// double (long rows of float terms drift); a row holding a NaN gives NaNs,
// one of -inf NaNs too, as in PyTorch.
template <typename C, bool kLog, typename Load, typename Store>
__device__ __forceinline__ void softmax_row(const Load& load, const Store& store, long long n,
                                            int lane, int group, bool valid) {
  C m = -row_infinity(C());
  int nan = 0;
  if (valid) {
    for (long long r = lane; r < n; r += group) {
      const C v = load(r, true);
      m = v > m ? v : m;
      nan |= v != v;
    }
  }
  m = group_reduce(m, group, GroupMax{});
  nan = group_reduce(nan, group, GroupOr{});
  if (nan) m = row_quiet_nan(C());
  double total = 0;
  if (valid) {
    for (long long r = lane; r < n; r += group) total += ::exp(load(r, false) - m);
  }
  total = group_reduce(total, group, GroupSum{});
  if (!valid) return;
  if constexpr (kLog) {
    const C log_sum = static_cast<C>(::log(total));
    for (long long r = lane; r < n; r += group) store(r, (load(r, false) - m) - log_sum);
  } else {
    const C inv = static_cast<C>(1 / total);
    for (long long r = lane; r < n; r += group) store(r, ::exp(load(r, false) - m) * inv);
  }
}

// A normalized row (layer_norm, group_norm): the mean, then the squared
// deviations from it, in double; y = (x - mean) * rstd * scale + shift with
// params(r, &scale, &shift) giving element r's.
template <typename C, typename Load, typename Store, typename Params>
__device__ __forceinline__ void normalize_row(const Load& load, const Store& store,
                                              const Params& params, long long n, int lane,
                                              int group, bool valid, double eps) {
  double sum = 0;
  if (valid) {
    for (long long r = lane; r < n; r += group) sum += static_cast<double>(load(r, true));
  }
  const double mean = group_reduce(sum, group, GroupSum{}) / static_cast<double>(n);
  double dev = 0;
  if (valid) {
    for (long long r = lane; r < n; r += group) {
      const double d = static_cast<double>(load(r, false)) - mean;
      dev += d * d;
    }
  }
  const double var = group_reduce(dev, group, GroupSum{}) / static_cast<double>(n);
  if (!valid) return;
  const C rstd = static_cast<C>(1 / ::sqrt(var + eps));
  // The mean as a pair (hi + lo) keeps x - mean exact where x is large
  // against its spread, as the CPU kernels do.
  const C m_hi = static_cast<C>(mean), m_lo = static_cast<C>(mean - static_cast<double>(m_hi));
  for (long long r = lane; r < n; r += group) {
    C scale, shift;
    params(r, &scale, &shift);
    store(r, ((load(r, false) - m_hi) - m_lo) * rstd * scale + shift);
  }
}

}  // namespace kiln::backend::cuda
