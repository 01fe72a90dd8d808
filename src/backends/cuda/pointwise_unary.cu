// CUDA kernels of the unary elementwise ops. 16-bit floats compute in float; the floating
// arithmetic is scalar_ops.cuh's, which generated kernels share.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/cuda/scalar_ops.cuh"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

// The floating unary ops; CUDA's math library overloads each function for
// float and double.
enum class Fn {
  Exp,
  Log,
  Log1p,
  Expm1,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Silu,
  Erf,
  GeluErf,
  GeluTanh,
  Hardsigmoid,
  Hardswish,
  Mish,
  Floor,
  Ceil,
  Round
};

template <Fn K>
struct FloatFn {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (K == Fn::Exp)
      return scalar::exp(x);
    else if constexpr (K == Fn::Log)
      return scalar::log(x);
    else if constexpr (K == Fn::Log1p)
      return scalar::log1p(x);
    else if constexpr (K == Fn::Expm1)
      return scalar::expm1(x);
    else if constexpr (K == Fn::Sqrt)
      return scalar::sqrt(x);
    else if constexpr (K == Fn::Rsqrt)
      return scalar::rsqrt(x);
    else if constexpr (K == Fn::Reciprocal)
      return scalar::reciprocal(x);
    else if constexpr (K == Fn::Sin)
      return scalar::sin(x);
    else if constexpr (K == Fn::Cos)
      return scalar::cos(x);
    else if constexpr (K == Fn::Tanh)
      return scalar::tanh(x);
    else if constexpr (K == Fn::Sigmoid)
      return scalar::sigmoid(x);
    else if constexpr (K == Fn::Silu)
      return scalar::silu(x);
    else if constexpr (K == Fn::Erf)
      return scalar::erf(x);
    else if constexpr (K == Fn::GeluErf)
      return scalar::gelu_erf(x);
    else if constexpr (K == Fn::GeluTanh)
      return scalar::gelu_tanh(x);
    else if constexpr (K == Fn::Hardsigmoid)
      return scalar::hardsigmoid(x);
    else if constexpr (K == Fn::Hardswish)
      return scalar::hardswish(x);
    else if constexpr (K == Fn::Mish)
      return scalar::mish(x);
    else if constexpr (K == Fn::Floor)
      return scalar::floor(x);
    else if constexpr (K == Fn::Ceil)
      return scalar::ceil(x);
    else
      return scalar::round(x);
  }
};

struct Neg {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::neg(x);
    else
      return static_cast<C>(-x);
  }
};

struct Square {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::square(x);
    else
      return static_cast<C>(x * x);
  }
};

struct Relu {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::relu(x);
    else if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;
  }
};

struct Abs {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::abs(x);
    else if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? static_cast<C>(-x) : x;
  }
};

struct Sign {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::sign(x);
    else if constexpr (std::is_same_v<C, bool>)
      return x;
    else if constexpr (std::is_unsigned_v<C>)
      return static_cast<C>(x != C(0));
    else
      return static_cast<C>((C(0) < x) - (x < C(0)));
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
    return scalar::isinf(x);
  }
};

// The activations with attributes, which each takes as the compute type.
struct LeakyRelu {
  double slope;
  template <typename C>
  __device__ C operator()(C x) const {
    return scalar::leaky_relu(x, C(slope));
  }
};
struct Hardtanh {
  double lo, hi;
  template <typename C>
  __device__ C operator()(C x) const {
    return scalar::hardtanh(x, C(lo), C(hi));
  }
};
struct Elu {
  double alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return scalar::elu(x, C(alpha));
  }
};
struct Softplus {
  double beta, threshold;
  template <typename C>
  __device__ C operator()(C x) const {
    return scalar::softplus(x, C(beta), C(threshold));
  }
};

// Floating dtypes only (the shape rule promotes integers to float32).
template <typename F>
void unary_float(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      launch_elementwise<T, T>(c.out(), c.inputs.first(1), f);
    else
      unsupported_dtype(c, c.out().dtype());
  });
}

// Every numeric dtype, bool too when with_bool.
template <bool with_bool, typename F>
void unary_same(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (with_bool || !kIsBoolT<T>)
      launch_elementwise<T, T>(c.out(), c.inputs.first(1), f);
    else
      unsupported_dtype(c, c.out().dtype());
  });
}

// floor, ceil, round: integers are already whole.
template <typename F>
void unary_rounding(const KernelCall& c, F f) {
  if (is_floating(c.out().dtype()))
    unary_float(c, f);
  else
    copy_same_dtype(c.out(), c.in(0));
}

// isnan and isinf: false for every integer.
template <typename F>
void float_predicate(const KernelCall& c, F f) {
  visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      launch_elementwise<bool, T>(c.out(), c.inputs.first(1), f);
    else
      fill_bits(c.out(), 0);
  });
}

}  // namespace

void register_cuda_unary_kernels(KernelTable& t) {
  t.set(OpId::neg, [](const KernelCall& c) { unary_same<false>(c, Neg{}); });
  t.set(OpId::abs, [](const KernelCall& c) { unary_same<false>(c, Abs{}); });
  t.set(OpId::square, [](const KernelCall& c) { unary_same<false>(c, Square{}); });
  t.set(OpId::relu, [](const KernelCall& c) { unary_same<false>(c, Relu{}); });
  t.set(OpId::sign, [](const KernelCall& c) { unary_same<true>(c, Sign{}); });
  t.set(OpId::exp, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Exp>{}); });
  t.set(OpId::log, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Log>{}); });
  t.set(OpId::log1p, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Log1p>{}); });
  t.set(OpId::expm1, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Expm1>{}); });
  t.set(OpId::sqrt, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Sqrt>{}); });
  t.set(OpId::rsqrt, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Rsqrt>{}); });
  t.set(OpId::reciprocal, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Reciprocal>{}); });
  t.set(OpId::sin, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Sin>{}); });
  t.set(OpId::cos, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Cos>{}); });
  t.set(OpId::tanh, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Tanh>{}); });
  t.set(OpId::sigmoid, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Sigmoid>{}); });
  t.set(OpId::silu, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Silu>{}); });
  t.set(OpId::erf, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Erf>{}); });
  t.set(OpId::gelu, [](const KernelCall& c) {
    if (c.attrs.str(0) == "tanh")
      unary_float(c, FloatFn<Fn::GeluTanh>{});
    else
      unary_float(c, FloatFn<Fn::GeluErf>{});
  });
  t.set(OpId::hardsigmoid, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Hardsigmoid>{}); });
  t.set(OpId::hardswish, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Hardswish>{}); });
  t.set(OpId::mish, [](const KernelCall& c) { unary_float(c, FloatFn<Fn::Mish>{}); });
  t.set(OpId::leaky_relu, [](const KernelCall& c) { unary_float(c, LeakyRelu{c.attrs.f(0)}); });
  t.set(OpId::hardtanh, [](const KernelCall& c) {
    unary_float(c, Hardtanh{c.attrs.f(0), c.attrs.f(1)});
  });
  t.set(OpId::elu, [](const KernelCall& c) { unary_float(c, Elu{c.attrs.f(0)}); });
  t.set(OpId::softplus, [](const KernelCall& c) {
    unary_float(c, Softplus{c.attrs.f(0), c.attrs.f(1)});
  });
  t.set(OpId::floor, [](const KernelCall& c) { unary_rounding(c, FloatFn<Fn::Floor>{}); });
  t.set(OpId::ceil, [](const KernelCall& c) { unary_rounding(c, FloatFn<Fn::Ceil>{}); });
  t.set(OpId::round, [](const KernelCall& c) { unary_rounding(c, FloatFn<Fn::Round>{}); });
  t.set(OpId::logical_not, [](const KernelCall& c) {
    visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
      launch_elementwise<bool, T>(c.out(), c.inputs.first(1), IsZero{});
    });
  });
  t.set(OpId::isnan, [](const KernelCall& c) { float_predicate(c, IsNan{}); });
  t.set(OpId::isinf, [](const KernelCall& c) { float_predicate(c, IsInf{}); });
}

}  // namespace kiln::backend::cuda
