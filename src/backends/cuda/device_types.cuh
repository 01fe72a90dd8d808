// Element types on the device: kiln's dtypes as CUDA types, the types kernels
// compute in, and value conversion with the CPU backend's semantics (to bool
// is "not zero", 16-bit floats go through float, rounding to nearest even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln::backend::cuda {

// The device type of a host element type: Half and BFloat16 have the same bits
// as CUDA's __half and __nv_bfloat16.
template <typename T>
struct device_type {
  using type = T;
};
template <>
struct device_type<Half> {
  using type = __half;
};
template <>
struct device_type<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using device_t = typename device_type<T>::type;

// The host type of a device type, and a host Scalar as a device value.
template <typename T>
struct host_type {
  using type = T;
};
template <>
struct host_type<__half> {
  using type = Half;
};
template <>
struct host_type<__nv_bfloat16> {
  using type = BFloat16;
};
template <typename T>
using host_t = typename host_type<T>::type;

// The type a kernel computes in: float for the 16-bit floats.
template <typename T>
struct dcompute_type {
  using type = T;
};
template <>
struct dcompute_type<__half> {
  using type = float;
};
template <>
struct dcompute_type<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using dcompute_t = typename dcompute_type<T>::type;

template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename To, typename From>
__host__ __device__ inline To cvt(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, __half>) {
    return cvt<To>(__half2float(x));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return cvt<To>(__bfloat162float(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

// Loads a stored value as its compute type.
template <typename T>
__device__ inline dcompute_t<T> to_compute(T x) {
  return cvt<dcompute_t<T>>(x);
}

// Calls f.template operator()<T>() with T the device type of dtype t.
template <typename F>
decltype(auto) visit_device_dtype(DType t, F&& f) {
  return visit_dtype(t, [&]<typename H>() { return f.template operator()<device_t<H>>(); });
}

}  // namespace kiln::backend::cuda
