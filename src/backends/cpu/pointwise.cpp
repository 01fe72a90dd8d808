// CPU kernels of where, clamp, masked_fill, copy (casts) and fill.
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/pointwise.h"
#include "backends/cpu/scalar_ops.h"
#include "backends/device_copy.h"
#include "backends/int_math.h"
#include "core/convert.h"

namespace kiln::backend {
namespace cpu {

void register_cpu_misc_pointwise_kernels(KernelTable& t) {
  using ops::OpId;
  t.set(OpId::where, [](const KernelCall& c) {
    ElementwiseIter it(c.out(), c.inputs.first(3));
    visit_dtype(c.out().dtype(), [&]<typename T>() {
      map_elements<T, bool, T, T>(it, [](bool m, T a, T b) { return m ? a : b; });
    });
  });
  t.set(OpId::clamp, [](const KernelCall& c) {
    ElementwiseIter it(c.out(), c.inputs.first(1));
    visit_dtype(c.out().dtype(), [&]<typename T>() {
      using C = compute_t<T>;
      auto bound = [&](size_t k, C none) {
        return c.attrs.has(k) ? saturating_bound<C>(c.attrs.scalar(k)) : none;
      };
      // No bound is no bound: infinities pass (lowest/max would clamp them).
      constexpr bool kReal = std::is_floating_point_v<C>;
      const C lo =
          bound(0, kReal ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest());
      const C hi =
          bound(1, kReal ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max());
      map_elements<T, T>(it, [lo, hi](T x) -> T { return T(scalar::clamp(C(x), lo, hi)); });
    });
  });
  t.set(OpId::masked_fill, [](const KernelCall& c) {
    ElementwiseIter it(c.out(), c.inputs.first(2));
    visit_dtype(c.out().dtype(), [&]<typename T>() {
      const T v = c.attrs.scalar(0).to<T>();
      map_elements<T, T, bool>(it, [v](T x, bool m) { return m ? v : x; });
    });
  });
  t.set(OpId::to_device, backend::copy_between_devices);
  t.set(OpId::copy, [](const KernelCall& c) {
    ElementwiseIter it(c.out(), c.inputs.first(1));
    visit_dtype(c.out().dtype(), [&]<typename To>() {
      visit_dtype(c.in(0).dtype(), [&]<typename From>() {
        map_elements<To, From>(it, [](From x) { return convert<To>(x); });
      });
    });
  });
  t.set(OpId::fill, [](const KernelCall& c) {
    ElementwiseIter it(c.out(), {});
    visit_dtype(c.out().dtype(), [&]<typename T>() {
      const T v = c.attrs.scalar(0).to<T>();
      map_elements<T>(it, [v]() { return v; });
    });
  });
}

}  // namespace cpu

void register_cpu_pointwise_kernels(KernelTable& table) {
  cpu::register_cpu_unary_kernels(table);
  cpu::register_cpu_binary_kernels(table);
  cpu::register_cpu_misc_pointwise_kernels(table);
}

}  // namespace kiln::backend
