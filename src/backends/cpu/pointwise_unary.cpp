// CPU kernels of the unary elementwise ops.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/pointwise.h"
#include "backends/cpu/vec_math.h"
#include "backends/int_math.h"

namespace kiln::backend::cpu {
namespace {

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<compute_t<T>>;

// out = f(in) with out and in of one dtype; f sees the compute type.
template <typename F>
void unary_same(const KernelCall& c, F f) {
  ElementwiseIter it(c.out(), c.inputs.first(1));
  visit_dtype(c.out().dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    map_elements<T, T>(
        it, [&](T x) __attribute__((always_inline))->T { return T(f(static_cast<C>(x))); });
  });
}

// Floating dtypes only (the shape rule promotes integers to float32).
template <typename F>
void unary_float(const KernelCall& c, F f) {
  ElementwiseIter it(c.out(), c.inputs.first(1));
  visit_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (kIsFloat<T>) {
      using C = compute_t<T>;
      map_elements<T, T>(
          it, [&](T x) __attribute__((always_inline))->T { return T(f(static_cast<C>(x))); });
    }
  });
}

template <typename F>
void unary_to_bool(const KernelCall& c, F f) {
  ElementwiseIter it(c.out(), c.inputs.first(1));
  visit_dtype(c.in(0).dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    map_elements<bool, T>(it, [&](T x) -> bool { return f(static_cast<C>(x)); });
  });
}

// The helpers, and the lambdas that call them, are always inlined: a call
// inside the element loop would keep it from vectorizing.
template <typename C>
[[gnu::always_inline]] inline C sigmoid_of(C x) {
  return C(1) / (C(1) + exp_f32(-x));
}

template <typename C>
[[gnu::always_inline]] inline C gelu_erf(C x) {
  // erfc keeps precision where 1 + erf(x) cancels (large negative x).
  return C(0.5) * x * erfc_f32(x * C(-0.70710678118654752440));
}

template <typename C>
[[gnu::always_inline]] inline C gelu_tanh(C x) {
  const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
  return C(0.5) * x * (C(1) + tanh_f32(inner));
}

}  // namespace

void register_cpu_unary_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::neg, [](const KernelCall& c) { unary_same(c, [](auto x) { return wrap_neg(x); }); });
  t.set(OpId::abs, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      using C = decltype(x);
      if constexpr (std::is_floating_point_v<C>)
        return std::fabs(x);
      else
        return x < C(0) ? wrap_neg(x) : x;  // abs(INT_MIN) is INT_MIN, as PyTorch
    });
  });
  t.set(OpId::exp, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return exp_f32(x); });
  });
  t.set(OpId::log, [](const KernelCall& c) { unary_float(c, [](auto x) { return std::log(x); }); });
  t.set(OpId::log1p,
        [](const KernelCall& c) { unary_float(c, [](auto x) { return std::log1p(x); }); });
  t.set(OpId::expm1,
        [](const KernelCall& c) { unary_float(c, [](auto x) { return std::expm1(x); }); });
  t.set(OpId::sqrt,
        [](const KernelCall& c) { unary_float(c, [](auto x) { return std::sqrt(x); }); });
  t.set(OpId::rsqrt, [](const KernelCall& c) {
    unary_float(c, [](auto x) { return decltype(x)(1) / std::sqrt(x); });
  });
  t.set(OpId::reciprocal,
        [](const KernelCall& c) { unary_float(c, [](auto x) { return decltype(x)(1) / x; }); });
  t.set(OpId::square,
        [](const KernelCall& c) { unary_same(c, [](auto x) { return wrap_mul(x, x); }); });
  t.set(OpId::sin, [](const KernelCall& c) { unary_float(c, [](auto x) { return std::sin(x); }); });
  t.set(OpId::cos, [](const KernelCall& c) { unary_float(c, [](auto x) { return std::cos(x); }); });
  t.set(OpId::tanh, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return tanh_f32(x); });
  });
  t.set(OpId::sigmoid, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return sigmoid_of(x); });
  });
  t.set(OpId::relu, [](const KernelCall& c) {
    unary_same(c, [](auto x) { return x < decltype(x)(0) ? decltype(x)(0) : x; });  // keeps NaN
  });
  t.set(OpId::gelu, [](const KernelCall& c) {
    if (c.attrs.str(0) == "tanh")
      unary_float(
          c, [](auto x) __attribute__((always_inline)) { return gelu_tanh(x); });
    else
      unary_float(
          c, [](auto x) __attribute__((always_inline)) { return gelu_erf(x); });
  });
  t.set(OpId::silu, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return x * sigmoid_of(x); });
  });
  t.set(OpId::erf, [](const KernelCall& c) { unary_float(c, [](auto x) { return std::erf(x); }); });
  t.set(OpId::sign, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      using C = decltype(x);
      if constexpr (std::is_same_v<C, bool>)
        return x;
      else
        return C((C(0) < x) - (x < C(0)));
    });
  });
  t.set(OpId::floor, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return std::floor(x);
      else
        return x;
    });
  });
  t.set(OpId::ceil, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return std::ceil(x);
      else
        return x;
    });
  });
  t.set(OpId::round, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return std::nearbyint(x);
      else
        return x;
    });
  });
  t.set(OpId::logical_not,
        [](const KernelCall& c) { unary_to_bool(c, [](auto x) { return x == decltype(x)(0); }); });
  t.set(OpId::isnan, [](const KernelCall& c) { unary_to_bool(c, [](auto x) { return x != x; }); });
  t.set(OpId::isinf, [](const KernelCall& c) {
    unary_to_bool(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return std::isinf(x);
      else
        return false;
    });
  });
}

}  // namespace kiln::backend::cpu
