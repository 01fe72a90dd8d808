// CUDA kernels of the binary elementwise ops. Inputs arrive in one dtype (the
// shape rule casts them); broadcasting is the engine's job. The floating
// arithmetic is scalar_ops.cuh's, which generated kernels share.
#include <cmath>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/cuda/scalar_ops.cuh"
#include "backends/int_math.h"
#include "ops/dispatch.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

enum class Arith { Plus, Minus, Times, Divide, Maximum, Minimum };

template <Arith K>
struct ArithFn {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if constexpr (K == Arith::Plus)
        return scalar::add(a, b);
      else if constexpr (K == Arith::Minus)
        return scalar::sub(a, b);
      else if constexpr (K == Arith::Times)
        return scalar::mul(a, b);
      else if constexpr (K == Arith::Divide)
        return scalar::div(a, b);
      else if constexpr (K == Arith::Maximum)
        return scalar::maximum(a, b);
      else
        return scalar::minimum(a, b);
    } else if constexpr (K == Arith::Plus) {
      return static_cast<C>(a + b);
    } else if constexpr (K == Arith::Minus) {
      return static_cast<C>(a - b);
    } else if constexpr (K == Arith::Times) {
      return static_cast<C>(a * b);
    } else if constexpr (K == Arith::Divide) {
      return a / b;
    } else if constexpr (K == Arith::Maximum) {
      return a > b ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge, And, Or, Xor };

template <Cmp K>
struct CmpFn {
  template <typename C>
  __device__ bool operator()(C a, C b) const {
    if constexpr (K == Cmp::Eq)
      return a == b;
    else if constexpr (K == Cmp::Ne)
      return a != b;
    else if constexpr (K == Cmp::Lt)
      return a < b;
    else if constexpr (K == Cmp::Le)
      return a <= b;
    else if constexpr (K == Cmp::Gt)
      return a > b;
    else if constexpr (K == Cmp::Ge)
      return a >= b;
    else if constexpr (K == Cmp::And)
      return a && b;
    else if constexpr (K == Cmp::Or)
      return a || b;
    else
      return a != b;
  }
};

// a + scale * b, scale in the compute type (alpha, negated for sub).
template <typename S>
struct AddScaled {
  S scale;
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::add_scaled(a, b, scale);
    else
      return static_cast<C>(a + scale * b);
  }
};

struct BoolAddScaled {
  bool alpha;
  __device__ bool operator()(bool a, bool b) const { return a || (alpha && b); }
};

struct Pow {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>)
      return scalar::pow(a, b);
    else
      return integer_pow(a, b);
  }
};

struct Remainder {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      return scalar::remainder(a, b);
    } else if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(a % b);
    } else {
      if (b == C(-1)) return C(0);  // the type's minimum % -1 overflows
      const C r = static_cast<C>(a % b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<C>(r + b) : r;
    }
  }
};

// Sets *flag when an element is zero.
template <typename T>
__global__ void find_zero_kernel(const T* p, int64_t n, int* flag) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (p[i] == T(0)) *flag = 1;
  }
}

// Integer division by zero has no value: refuse it, as the CPU backend does.
// This waits for the divisor.
void check_no_integer_zero(const KernelCall& c, const Tensor& divisor) {
  if (is_floating(divisor.dtype())) return;
  if (divisor.device().is_cpu()) {  // an immediate
    if (divisor.to(kFloat64).item<double>() == 0) {
      throw ValueError(detail::str_cat(c.schema.name, ": integer division by zero"));
    }
    return;
  }
  const Tensor d = divisor.contiguous();
  Tensor flag = ops::make_tensor({1}, kInt32, d.device(), false);
  DeviceGuard guard(d.device().index());
  const cudaStream_t stream = stream_for(d);
  check(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int), stream), "cudaMemsetAsync");
  visit_device_dtype(d.dtype(), [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      const int64_t n = d.numel();
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
      if (n > 0) {
        find_zero_kernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(d.data_ptr()), n,
                                                      static_cast<int*>(flag.data_ptr()));
      }
    }
  });
  check_launch("remainder: zero check");
  if (flag.item<int32_t>() != 0) {
    throw ValueError(detail::str_cat(c.schema.name, ": integer division by zero"));
  }
}

// out = f(a, b), all of out's dtype; bool only when with_bool.
template <bool with_bool, typename F>
void binary_same(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (with_bool || !kIsBoolT<T>)
      launch_elementwise<T, T, T>(c.out(), c.inputs.first(2), f);
    else
      unsupported_dtype(c, c.out().dtype());
  });
}

template <typename F>
void binary_float(const KernelCall& c, F f) {
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    if constexpr (kIsFloatT<T>)
      launch_elementwise<T, T, T>(c.out(), c.inputs.first(2), f);
    else
      unsupported_dtype(c, c.out().dtype());
  });
}

template <typename F>
void compare(const KernelCall& c, F f) {
  visit_device_dtype(c.in(0).dtype(), [&]<typename T>() {
    launch_elementwise<bool, T, T>(c.out(), c.inputs.first(2), f);
  });
}

// Logical ops take inputs of any dtypes: they meet as bools.
template <typename F>
void logical(const KernelCall& c, F f) {
  Tensor a = c.in(0).to(kBool), b = c.in(1).to(kBool);
  const Tensor both[2] = {a, b};
  launch_elementwise<bool, bool, bool>(c.out(), both, f);
}

void add_kernel(const KernelCall& c, double sign) {
  const Scalar& alpha = c.attrs.scalar(0);
  if (alpha.to_double() == 1.0) {
    if (sign > 0)
      binary_same<true>(c, ArithFn<Arith::Plus>{});
    else
      binary_same<false>(c, ArithFn<Arith::Minus>{});
    return;
  }
  visit_device_dtype(c.out().dtype(), [&]<typename T>() {
    using C = dcompute_t<T>;
    if constexpr (kIsBoolT<T>) {
      launch_elementwise<T, T, T>(c.out(), c.inputs.first(2), BoolAddScaled{alpha.to<bool>()});
    } else if constexpr (std::is_floating_point_v<C>) {
      launch_elementwise<T, T, T>(c.out(), c.inputs.first(2),
                                  AddScaled<C>{static_cast<C>(sign * alpha.to_double())});
    } else {
      launch_elementwise<T, T, T>(
          c.out(), c.inputs.first(2),
          AddScaled<C>{static_cast<C>(static_cast<C>(sign) * alpha.to<C>())});
    }
  });
}

}  // namespace

void register_cuda_binary_kernels(KernelTable& t) {
  t.set(OpId::add, [](const KernelCall& c) { add_kernel(c, 1.0); });
  t.set(OpId::sub, [](const KernelCall& c) { add_kernel(c, -1.0); });
  t.set(OpId::mul, [](const KernelCall& c) {
    if (c.out().dtype() == kBool)
      launch_elementwise<bool, bool, bool>(c.out(), c.inputs.first(2), CmpFn<Cmp::And>{});
    else
      binary_same<false>(c, ArithFn<Arith::Times>{});
  });
  t.set(OpId::div, [](const KernelCall& c) { binary_float(c, ArithFn<Arith::Divide>{}); });
  t.set(OpId::pow, [](const KernelCall& c) { binary_same<false>(c, Pow{}); });
  t.set(OpId::maximum,
        [](const KernelCall& c) { binary_same<true>(c, ArithFn<Arith::Maximum>{}); });
  t.set(OpId::minimum,
        [](const KernelCall& c) { binary_same<true>(c, ArithFn<Arith::Minimum>{}); });
  t.set(OpId::remainder, [](const KernelCall& c) {
    check_no_integer_zero(c, c.in(1));
    binary_same<false>(c, Remainder{});
  });
  t.set(OpId::eq, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Eq>{}); });
  t.set(OpId::ne, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Ne>{}); });
  t.set(OpId::lt, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Lt>{}); });
  t.set(OpId::le, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Le>{}); });
  t.set(OpId::gt, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Gt>{}); });
  t.set(OpId::ge, [](const KernelCall& c) { compare(c, CmpFn<Cmp::Ge>{}); });
  t.set(OpId::logical_and, [](const KernelCall& c) { logical(c, CmpFn<Cmp::And>{}); });
  t.set(OpId::logical_or, [](const KernelCall& c) { logical(c, CmpFn<Cmp::Or>{}); });
  t.set(OpId::logical_xor, [](const KernelCall& c) { logical(c, CmpFn<Cmp::Xor>{}); });
}

}  // namespace kiln::backend::cuda
