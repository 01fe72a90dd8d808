// CPU kernels of the binary elementwise ops. Inputs arrive in one dtype (the
// shape rule casts them); broadcasting is the iterator's job.
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

// out = f(a, b) with f on the compute type and out in the inputs' dtype.
template <typename F>
void binary_same(const KernelCall& c, F f) {
  ElementwiseIter it(c.out(), c.inputs.first(2));
  visit_dtype(c.out().dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    map_elements<T, T, T>(it, [&](T a, T b) -> T { return T(f(C(a), C(b))); });
  });
}

template <typename F>
void binary_to_bool(const KernelCall& c, F f) {
  ElementwiseIter it(c.out(), c.inputs.first(2));
  visit_dtype(c.in(0).dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    map_elements<bool, T, T>(it, [&](T a, T b) -> bool { return f(C(a), C(b)); });
  });
}

template <typename C>
C python_remainder(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a;  // never reached: the shape rule rejects bool
  } else if constexpr (std::is_floating_point_v<C>) {
    return scalar::remainder(a, b);
  } else {
    // x % -1 is 0; the division itself traps (SIGFPE) for the type's minimum.
    if constexpr (std::is_signed_v<C>) {
      if (b == C(-1)) return C(0);
    }
    C r = static_cast<C>(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<C>(r + b) : r;
  }
}

// Integer division by zero would crash the process: refuse it first.
void check_no_integer_zero(const KernelCall& c, const Tensor& divisor) {
  if (is_floating(divisor.dtype())) return;
  Tensor zero_hits = divisor.contiguous();
  bool found = false;
  visit_dtype(zero_hits.dtype(), [&]<typename T>() {
    const T* p = static_cast<const T*>(zero_hits.data_ptr());
    for (int64_t i = 0, n = zero_hits.numel(); i < n && !found; ++i) found = p[i] == T(0);
  });
  if (found) throw ValueError(detail::str_cat(c.schema.name, ": integer division by zero"));
}

template <typename C>
constexpr bool kFloating = std::is_floating_point_v<C>;

// Floats are scalar_ops.h's arithmetic, which generated kernels share;
// integers wrap as the type does.
void add_kernel(const KernelCall& c, double sign) {
  const Scalar& alpha = c.attrs.scalar(0);
  if (alpha.to_double() == 1.0 && sign > 0) {
    binary_same(c, [](auto a, auto b) {
      if constexpr (kFloating<decltype(a)>)
        return scalar::add(a, b);
      else
        return wrap_add(a, b);
    });
  } else if (alpha.to_double() == 1.0) {
    binary_same(c, [](auto a, auto b) {
      if constexpr (kFloating<decltype(a)>)
        return scalar::sub(a, b);
      else
        return wrap_sub(a, b);
    });
  } else {
    visit_dtype(c.out().dtype(), [&]<typename T>() {
      using C = compute_t<T>;
      if constexpr (std::is_same_v<C, bool>) {
        binary_same(c, [&](auto a, auto b) { return a || (alpha.to<bool>() && b); });
      } else if constexpr (kFloating<C>) {
        const C k = static_cast<C>(sign * alpha.to_double());
        binary_same(c, [k](auto a, auto b) { return scalar::add_scaled(a, b, decltype(a)(k)); });
      } else {
        const C k = wrap_mul(static_cast<C>(sign), alpha.to<C>());
        binary_same(c, [k](auto a, auto b) { return wrap_add(a, wrap_mul(decltype(a)(k), b)); });
      }
    });
  }
}

}  // namespace

void register_cpu_binary_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::add, [](const KernelCall& c) { add_kernel(c, 1.0); });
  t.set(OpId::sub, [](const KernelCall& c) { add_kernel(c, -1.0); });
  t.set(OpId::mul, [](const KernelCall& c) {
    binary_same(c, [](auto a, auto b) {
      if constexpr (std::is_same_v<decltype(a), bool>)
        return a && b;
      else if constexpr (kFloating<decltype(a)>)
        return scalar::mul(a, b);
      else
        return wrap_mul(a, b);
    });
  });
  t.set(OpId::div, [](const KernelCall& c) {
    binary_same(c, [](auto a, auto b) { return scalar::div(a, b); });
  });
  t.set(OpId::pow, [](const KernelCall& c) {
    binary_same(c, [](auto a, auto b) {
      using C = decltype(a);
      if constexpr (kFloating<C>)
        return scalar::pow(a, b);
      else
        return integer_pow(a, b);
    });
  });
  t.set(OpId::maximum, [](const KernelCall& c) {
    binary_same(c, [](auto a, auto b) { return scalar::maximum(a, b); });
  });
  t.set(OpId::minimum, [](const KernelCall& c) {
    binary_same(c, [](auto a, auto b) { return scalar::minimum(a, b); });
  });
  t.set(OpId::remainder, [](const KernelCall& c) {
    check_no_integer_zero(c, c.in(1));
    binary_same(c, [](auto a, auto b) { return python_remainder(a, b); });
  });
  t.set(OpId::eq,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a == b; }); });
  t.set(OpId::ne,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a != b; }); });
  t.set(OpId::lt,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a < b; }); });
  t.set(OpId::le,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a <= b; }); });
  t.set(OpId::gt,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a > b; }); });
  t.set(OpId::ge,
        [](const KernelCall& c) { binary_to_bool(c, [](auto a, auto b) { return a >= b; }); });
  t.set(OpId::logical_and, [](const KernelCall& c) {
    binary_to_bool(c, [](auto a, auto b) { return a != decltype(a)(0) && b != decltype(b)(0); });
  });
  t.set(OpId::logical_or, [](const KernelCall& c) {
    binary_to_bool(c, [](auto a, auto b) { return a != decltype(a)(0) || b != decltype(b)(0); });
  });
  t.set(OpId::logical_xor, [](const KernelCall& c) {
    binary_to_bool(c,
                   [](auto a, auto b) { return (a != decltype(a)(0)) != (b != decltype(b)(0)); });
  });
}

}  // namespace kiln::backend::cpu
