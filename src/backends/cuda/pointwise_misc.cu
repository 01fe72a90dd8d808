// CUDA kernels of where, clamp, masked_fill, copy (casts) and fill.
#include <limits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/pointwise.cuh"
#include "backends/cuda/scalar_ops.cuh"
#include "backends/device_copy.h"
#include "backends/element_size.h"
#include "backends/int_math.h"

namespace kiln::backend::cuda {
namespace {

using ops::OpId;

struct Where {
  template <typename C>
  __device__ C operator()(bool m, C a, C b) const {
    return m ? a : b;
  }
};

template <typename C>
struct Clamp {
  C lo, hi;
  // min(max(v, lo), hi) as PyTorch: hi wins where lo > hi; a NaN value or
  // bound gives NaN (lo != lo only for a NaN).
  __device__ C operator()(C v) const {
    if constexpr (std::is_floating_point_v<C>) {
      return scalar::clamp(v, lo, hi);
    } else {
      const C m = v < lo ? lo : v;
      return m > hi ? hi : m;
    }
  }
};

template <typename T>
struct MaskedFill {
  T value;
  template <typename C>
  __device__ T operator()(C x, bool m) const {
    return m ? value : cvt<T>(x);
  }
};

template <typename T>
struct Constant {
  T value;
  __device__ T operator()() const { return value; }
};

struct Cast {
  template <typename C>
  __device__ C operator()(C x) const {
    return x;
  }
};

}  // namespace

[[noreturn]] void unsupported_dtype(const KernelCall& c, DType t) {
  throw DTypeError(detail::str_cat(c.schema.name, ": no CUDA kernel for ", t));
}

void copy_same_dtype(const Tensor& out, const Tensor& in) {
  const Tensor inputs[1] = {in};
  visit_element_size(out.element_size(),
                     [&]<typename E>() { launch_elementwise<E, E>(out, inputs, Identity{}); });
}

void fill_bits(const Tensor& out, uint64_t value) {
  visit_element_size(out.element_size(), [&]<typename E>() {
    launch_elementwise<E>(out, {}, Constant<E>{static_cast<E>(value)});
  });
}

void register_cuda_misc_pointwise_kernels(KernelTable& t) {
  t.set(OpId::where, [](const KernelCall& c) {
    visit_device_dtype(c.out().dtype(), [&]<typename T>() {
      launch_elementwise<T, bool, T, T>(c.out(), c.inputs.first(3), Where{});
    });
  });
  t.set(OpId::clamp, [](const KernelCall& c) {
    visit_device_dtype(c.out().dtype(), [&]<typename T>() {
      using C = dcompute_t<T>;
      if constexpr (kIsBoolT<T>) {
        unsupported_dtype(c, c.out().dtype());
      } else {
        auto bound = [&](size_t k, C none) {
          return c.attrs.has(k) ? saturating_bound<C>(c.attrs.scalar(k)) : none;
        };
        // No bound is no bound: infinities pass (lowest/max would clamp them).
        constexpr bool kReal = std::is_floating_point_v<C>;
        const Clamp<C> f{
            bound(0,
                  kReal ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest()),
            bound(1, kReal ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max())};
        launch_elementwise<T, T>(c.out(), c.inputs.first(1), f);
      }
    });
  });
  t.set(OpId::masked_fill, [](const KernelCall& c) {
    visit_device_dtype(c.out().dtype(), [&]<typename T>() {
      launch_elementwise<T, T, bool>(c.out(), c.inputs.first(2),
                                     MaskedFill<T>{scalar_as<T>(c.attrs.scalar(0))});
    });
  });
  t.set(OpId::to_device, backend::copy_between_devices);
  t.set(OpId::copy, [](const KernelCall& c) {
    const DType to = c.out().dtype(), from = c.in(0).dtype();
    if (to == from) {
      copy_same_dtype(c.out(), c.in(0));
      return;
    }
    visit_device_dtype(to, [&]<typename To>() {
      visit_device_dtype(from, [&]<typename From>() {
        if constexpr (!std::is_same_v<To, From>)
          launch_elementwise<To, From>(c.out(), c.inputs.first(1), Cast{});
      });
    });
  });
  t.set(OpId::fill, [](const KernelCall& c) {
    visit_device_dtype(c.out().dtype(), [&]<typename T>() {
      const T v = scalar_as<T>(c.attrs.scalar(0));
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof(T));
      fill_bits(c.out(), bits);
    });
  });
}

}  // namespace kiln::backend::cuda
