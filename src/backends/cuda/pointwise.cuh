// Helpers shared by the CUDA pointwise kernels: dtype sets, scalars as device
// values, and the error for a dtype an op has no CUDA kernel for.
#pragma once

#include <cstring>
#include <type_traits>

#include "backends/backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/elementwise.cuh"

namespace kiln::backend::cuda {

template <typename T>
inline constexpr bool kIsFloatT = std::is_floating_point_v<T> || kIsHalfLike<T>;
template <typename T>
inline constexpr bool kIsBoolT = std::is_same_v<T, bool>;

// A Scalar converted as the CPU kernels convert it, as device type T.
template <typename T>
T scalar_as(const Scalar& s) {
  const host_t<T> h = s.to<host_t<T>>();
  T v;
  static_assert(sizeof(v) == sizeof(h));
  std::memcpy(static_cast<void*>(&v), &h, sizeof(T));
  return v;
}

[[noreturn]] void unsupported_dtype(const KernelCall& c, DType t);

struct Identity {
  template <typename C>
  __device__ C operator()(C x) const {
    return x;
  }
};

}  // namespace kiln::backend::cuda
