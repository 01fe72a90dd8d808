// Integer arithmetic that the CPU and CUDA kernels share (host and device).
#pragma once

#include <limits>
#include <type_traits>

#include "core/philox.h"  // KILN_HOST_DEVICE
#include "kiln/scalar.h"

namespace kiln::backend {

// base^exp by squaring, wrapping as the type does; a negative exponent gives
// 1 for base 1, +-1 for base -1 and 0 otherwise (PyTorch's integer pow).
template <typename C>
KILN_HOST_DEVICE inline C integer_pow(C base, C exp) {
  if constexpr (std::is_same_v<C, bool>) {
    return base || !exp;
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (exp < C(0)) {
        if (base == C(1)) return C(1);
        if (base == C(-1)) return (exp % 2) ? C(-1) : C(1);
        return C(0);
      }
    }
    // The products wrap in an unsigned type of at least int's width (a signed
    // product that overflows, or a narrow one promoted to int, is undefined
    // behaviour); the result keeps the low bits, as the type's own wrapping.
    using U = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
    U result = 1, b = static_cast<U>(base);
    while (exp) {
      if (exp & 1) result = static_cast<U>(result * b);
      b = static_cast<U>(b * b);
      exp = static_cast<C>(exp >> 1);
    }
    return static_cast<C>(result);
  }
}

// a + b, a - b, a * b and -a wrapping as the type does (two's complement, as
// PyTorch): on signed integers the plain operators are undefined behaviour on
// overflow (INT64_MIN * -1, -INT64_MIN). Other types: the plain operators.
template <typename C>
using WrapUnsigned =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
template <typename C>
KILN_HOST_DEVICE inline C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<C>(static_cast<WrapUnsigned<C>>(a) + static_cast<WrapUnsigned<C>>(b));
  } else {
    return a + b;
  }
}
template <typename C>
KILN_HOST_DEVICE inline C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<C>(static_cast<WrapUnsigned<C>>(a) - static_cast<WrapUnsigned<C>>(b));
  } else {
    return a - b;
  }
}
template <typename C>
KILN_HOST_DEVICE inline C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<C>(static_cast<WrapUnsigned<C>>(a) * static_cast<WrapUnsigned<C>>(b));
  } else {
    return a * b;
  }
}
template <typename C>
KILN_HOST_DEVICE inline C wrap_neg(C a) {
  return wrap_sub(C(0), a);
}

// A clamp bound as the compute type C: for integers, a bound outside the
// type's range clamps to its end instead of wrapping.
template <typename C>
C saturating_bound(const Scalar& s) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    const double v = s.to_double();
    if (v <= static_cast<double>(std::numeric_limits<C>::lowest()))
      return std::numeric_limits<C>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<C>::max()))
      return std::numeric_limits<C>::max();
  }
  return s.to<C>();
}

}  // namespace kiln::backend
