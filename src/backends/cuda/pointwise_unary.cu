// CUDA kernels of the unary elementwise ops. 16-bit floats compute in float.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

// float and double overloads of the device math functions.
#define KILN_DEVICE_MATH(name, f32, f64)                        \
  __device__ inline float name(float x) { return f32(x); }     \
  __device__ inline double name(double x) { return f64(x); }
KILN_DEVICE_MATH(d_exp, expf, exp)
KILN_DEVICE_MATH(d_log, logf, log)
KILN_DEVICE_MATH(d_log1p, log1pf, log1p)
KILN_DEVICE_MATH(d_expm1, expm1f, expm1)
KILN_DEVICE_MATH(d_sqrt, sqrtf, sqrt)
KILN_DEVICE_MATH(d_sin, sinf, sin)
KILN_DEVICE_MATH(d_cos, cosf, cos)
KILN_DEVICE_MATH(d_tanh, tanhf, tanh)
KILN_DEVICE_MATH(d_erf, erff, erf)
KILN_DEVICE_MATH(d_erfc, erfcf, erfc)
KILN_DEVICE_MATH(d_fabs, fabsf, fabs)
KILN_DEVICE_MATH(d_floor, floorf, floor)
KILN_DEVICE_MATH(d_ceil, ceilf, ceil)
KILN_DEVICE_MATH(d_rint, rintf, rint)
#undef KILN_DEVICE_MATH

#define KILN_UNARY_FUNCTOR(Name, expr)          \
  struct Name {                                 \
    template <typename C>                       \
    __device__ C operator()(C x) const {        \
      return expr;                              \
    }                                           \
  };
KILN_UNARY_FUNCTOR(Exp, d_exp(x))
KILN_UNARY_FUNCTOR(Log, d_log(x))
KILN_UNARY_FUNCTOR(Log1p, d_log1p(x))
KILN_UNARY_FUNCTOR(Expm1, d_expm1(x))
KILN_UNARY_FUNCTOR(Sqrt, d_sqrt(x))
KILN_UNARY_FUNCTOR(Rsqrt, C(1) / d_sqrt(x))
KILN_UNARY_FUNCTOR(Reciprocal, C(1) / x)
KILN_UNARY_FUNCTOR(Sin, d_sin(x))
KILN_UNARY_FUNCTOR(Cos, d_cos(x))
KILN_UNARY_FUNCTOR(Tanh, d_tanh(x))
KILN_UNARY_FUNCTOR(Sigmoid, C(1) / (C(1) + d_exp(-x)))
KILN_UNARY_FUNCTOR(Silu, x / (C(1) + d_exp(-x)))
KILN_UNARY_FUNCTOR(Erf, d_erf(x))
// erfc keeps precision where 1 + erf(x) cancels (large negative x).
KILN_UNARY_FUNCTOR(GeluErf, C(0.5) * x * d_erfc(x * C(-0.70710678118654752440)))
KILN_UNARY_FUNCTOR(GeluTanh,
                   C(0.5) * x * (C(1) + d_tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x))))
KILN_UNARY_FUNCTOR(Floor, d_floor(x))
KILN_UNARY_FUNCTOR(Ceil, d_ceil(x))
KILN_UNARY_FUNCTOR(Round, d_rint(x))
KILN_UNARY_FUNCTOR(Neg, static_cast<C>(-x))
KILN_UNARY_FUNCTOR(Square, static_cast<C>(x * x))
#undef KILN_UNARY_FUNCTOR

struct Relu {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? C(0) : x;  // keeps NaN
  }
};

struct Abs {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) return d_fabs(x);
    else if constexpr (std::is_unsigned_v<C>) return x;
    else return x < C(0) ? static_cast<C>(-x) : x;
  }
};

struct Sign {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, bool>) return x;
    else if constexpr (std::is_unsigned_v<C>) return static_cast<C>(x != C(0));
    else return static_cast<C>((C(0) < x) - (x < C(0)));
  }
};

struct IsZero {
  template <typename C>
  __device__ bool operator()(C x) const {
    return x == C(0);
  }
};
struct IsNan {
  template <typename C>
  __device__ bool operator()(C x) const {
    return x != x;
  }
};
struct IsInf {
  template <typename C>
  __device__ bool operator()(C x) const {
    return isinf(x);
  }
};

// Floating dtypes only (the shape rule promotes integers to float32).
template <typename F>
void unary_float(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) launch_elementwise<T, T>(c.out(), c.inputs.first(1), f);
    else unsupported_dtype(c, c.out().dtype());
  });
}

// Every numeric dtype, bool too when with_bool.
template <bool with_bool, typename F>
void unary_same(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (with_bool || !kIsBoolT<T>) launch_elementwise<T, T>(c.out(), c.inputs.first(1), f);
    else unsupported_dtype(c, c.out().dtype());
  });
}

// floor, ceil, round: integers are already whole.
template <typename F>
void unary_rounding(const KernelCall& c, F f) {
  if (is_floating(c.out().dtype())) unary_float(c, f);
  else copy_same_dtype(c.out(), c.in(0));
}

// isnan and isinf: false for every integer.
template <typename F>
void float_predicate(const KernelCall& c, F f) {
  visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>) launch_elementwise<bool, T>(c.out(), c.inputs.first(1), f);
    else fill_bits(c.out(), 0);
  });
}

}  // namespace

void register_cuda_unary_kernels(KernelTable& t) {
  t.set(OpId::neg, [](const KernelCall& c) { unary_same<false>(c, Neg{}); });
  t.set(OpId::abs, [](const KernelCall& c) { unary_same<false>(c, Abs{}); });
  t.set(OpId::square, [](const KernelCall& c) { unary_same<false>(c, Square{}); });
  t.set(OpId::relu, [](const KernelCall& c) { unary_same<false>(c, Relu{}); });
  t.set(OpId::sign, [](const KernelCall& c) { unary_same<true>(c, Sign{}); });
  t.set(OpId::exp, [](const KernelCall& c) { unary_float(c, Exp{}); });
  t.set(OpId::log, [](const KernelCall& c) { unary_float(c, Log{}); });
  t.set(OpId::log1p, [](const KernelCall& c) { unary_float(c, Log1p{}); });
  t.set(OpId::expm1, [](const KernelCall& c) { unary_float(c, Expm1{}); });
  t.set(OpId::sqrt, [](const KernelCall& c) { unary_float(c, Sqrt{}); });
  t.set(OpId::rsqrt, [](const KernelCall& c) { unary_float(c, Rsqrt{}); });
  t.set(OpId::reciprocal, [](const KernelCall& c) { unary_float(c, Reciprocal{}); });
  t.set(OpId::sin, [](const KernelCall& c) { unary_float(c, Sin{}); });
  t.set(OpId::cos, [](const KernelCall& c) { unary_float(c, Cos{}); });
  t.set(OpId::tanh, [](const KernelCall& c) { unary_float(c, Tanh{}); });
  t.set(OpId::sigmoid, [](const KernelCall& c) { unary_float(c, Sigmoid{}); });
  t.set(OpId::silu, [](const KernelCall& c) { unary_float(c, Silu{}); });
  t.set(OpId::erf, [](const KernelCall& c) { unary_float(c, Erf{}); });
  t.set(OpId::gelu, [](const KernelCall& c) {
    if (c.attrs.str(0) == "tanh") unary_float(c, GeluTanh{});
    else unary_float(c, GeluErf{});
  });
  t.set(OpId::floor, [](const KernelCall& c) { unary_rounding(c, Floor{}); });
  t.set(OpId::ceil, [](const KernelCall& c) { unary_rounding(c, Ceil{}); });
  t.set(OpId::round, [](const KernelCall& c) { unary_rounding(c, Round{}); });
  t.set(OpId::logical_not, [](const KernelCall& c) {
    visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
      launch_elementwise<bool, T>(c.out(), c.inputs.first(1), IsZero{});
    });
  });
  t.set(OpId::isnan, [](const KernelCall& c) { float_predicate(c, IsNan{}); });
  t.set(OpId::isinf, [](const KernelCall& c) { float_predicate(c, IsInf{}); });
}

}  // namespace kiln::backend::cuda
