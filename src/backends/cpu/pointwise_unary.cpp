// CPU kernels of the unary elementwise ops.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/pointwise.h"
#include "backends/cpu/scalar_ops.h"
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

}  // namespace

void register_cpu_unary_kernels(KernelTable& t) {
  using ops::OpId;
  // The floating arithmetic is scalar_ops.h's, which generated kernels share.
#define KILN_FLOAT_UNARY(name)                                                     \
  t.set(OpId::name, [](const KernelCall& c) {                                      \
    unary_float(                                                                   \
        c, [](auto x) __attribute__((always_inline)) { return scalar::name(x); }); \
  })
  KILN_FLOAT_UNARY(exp);
  KILN_FLOAT_UNARY(log);
  KILN_FLOAT_UNARY(log1p);
  KILN_FLOAT_UNARY(expm1);
  KILN_FLOAT_UNARY(sqrt);
  KILN_FLOAT_UNARY(rsqrt);
  KILN_FLOAT_UNARY(reciprocal);
  KILN_FLOAT_UNARY(sin);
  KILN_FLOAT_UNARY(cos);
  KILN_FLOAT_UNARY(tanh);
  KILN_FLOAT_UNARY(sigmoid);
  KILN_FLOAT_UNARY(silu);
  KILN_FLOAT_UNARY(erf);
#undef KILN_FLOAT_UNARY
  t.set(OpId::gelu, [](const KernelCall& c) {
    if (c.attrs.str(0) == "tanh")
      unary_float(
          c, [](auto x) __attribute__((always_inline)) { return scalar::gelu_tanh(x); });
    else
      unary_float(
          c, [](auto x) __attribute__((always_inline)) { return scalar::gelu_erf(x); });
  });
  t.set(OpId::hardsigmoid, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return scalar::hardsigmoid(x); });
  });
  t.set(OpId::hardswish, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return scalar::hardswish(x); });
  });
  t.set(OpId::mish, [](const KernelCall& c) {
    unary_float(
        c, [](auto x) __attribute__((always_inline)) { return scalar::mish(x); });
  });
  // The attributes as the compute type, as the generated kernels' constants.
  t.set(OpId::leaky_relu, [](const KernelCall& c) {
    const double slope = c.attrs.f(0);
    unary_float(
        c, [slope](auto x) __attribute__((always_inline)) {
          using C = decltype(x);
          return scalar::leaky_relu(x, C(slope));
        });
  });
  t.set(OpId::hardtanh, [](const KernelCall& c) {
    const double lo = c.attrs.f(0), hi = c.attrs.f(1);
    unary_float(
        c, [ lo, hi ](auto x) __attribute__((always_inline)) {
          using C = decltype(x);
          return scalar::hardtanh(x, C(lo), C(hi));
        });
  });
  t.set(OpId::elu, [](const KernelCall& c) {
    const double alpha = c.attrs.f(0);
    unary_float(
        c, [alpha](auto x) __attribute__((always_inline)) {
          using C = decltype(x);
          return scalar::elu(x, C(alpha));
        });
  });
  t.set(OpId::softplus, [](const KernelCall& c) {
    const double beta = c.attrs.f(0), threshold = c.attrs.f(1);
    unary_float(
        c, [ beta, threshold ](auto x) __attribute__((always_inline)) {
          using C = decltype(x);
          return scalar::softplus(x, C(beta), C(threshold));
        });
  });
  // Ops of every dtype: integers wrap as the type does (abs(INT_MIN) is
  // INT_MIN, as PyTorch), floats are scalar_ops.h's.
  t.set(OpId::neg, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return scalar::neg(x);
      else
        return wrap_neg(x);
    });
  });
  t.set(OpId::abs, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      using C = decltype(x);
      if constexpr (std::is_floating_point_v<C>)
        return scalar::abs(x);
      else
        return x < C(0) ? wrap_neg(x) : x;
    });
  });
  t.set(OpId::square, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_floating_point_v<decltype(x)>)
        return scalar::square(x);
      else
        return wrap_mul(x, x);
    });
  });
  t.set(OpId::relu,
        [](const KernelCall& c) { unary_same(c, [](auto x) { return scalar::relu(x); }); });
  t.set(OpId::sign, [](const KernelCall& c) {
    unary_same(c, [](auto x) {
      if constexpr (std::is_same_v<decltype(x), bool>)
        return x;
      else
        return scalar::sign(x);
    });
  });
#define KILN_ROUNDING(name)                                \
  t.set(OpId::name, [](const KernelCall& c) {              \
    unary_same(c, [](auto x) {                             \
      if constexpr (std::is_floating_point_v<decltype(x)>) \
        return scalar::name(x);                            \
      else                                                 \
        return x; /* integers are whole already */         \
    });                                                    \
  })
  KILN_ROUNDING(floor);
  KILN_ROUNDING(ceil);
  KILN_ROUNDING(round);
#undef KILN_ROUNDING
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
