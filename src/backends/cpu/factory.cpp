// CPU kernels of the factories.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/factory_formulas.h"
#include "core/convert.h"

namespace kiln::backend {
namespace {

using ops::OpId;

// out[i] = f(i) over a contiguous output, in parallel.
template <typename F>
void generate(const Tensor& out, F f) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(out.numel(), cpu::kParallelGrain / 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = convert<T>(f(i));
    });
  });
}

void fill(const Tensor& out, const Scalar& value) {
  visit_dtype(out.dtype(), [&]<typename T>() {
    const T v = value.to<T>();
    T* p = static_cast<T*>(out.data_ptr());
    cpu::parallel_for(out.numel(), cpu::kParallelGrain,
                      [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

}  // namespace

void register_cpu_factory_kernels(KernelTable& t) {
  t.set(OpId::empty, [](const KernelCall&) {});
  t.set(OpId::full, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_sized, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_like, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(0)); });
  t.set(OpId::arange, [](const KernelCall& c) {
    const Scalar start = c.attrs.scalar(0), step = c.attrs.scalar(2);
    if (is_floating(c.out().dtype())) {
      generate(c.out(), [&](int64_t i) { return start.to_double() + static_cast<double>(i) * step.to_double(); });
    } else {
      generate(c.out(), [&](int64_t i) { return start.to_int() + i * step.to_int(); });
    }
  });
  t.set(OpId::linspace, [](const KernelCall& c) {
    const double a = c.attrs.f(0), b = c.attrs.f(1);
    const int64_t steps = c.attrs.i(2);
    if (is_floating(c.out().dtype())) {
      generate(c.out(), [&](int64_t i) { return factory::linspace_at(a, b, steps, i); });
    } else {
      generate(c.out(), [&](int64_t i) { return static_cast<int64_t>(factory::linspace_at(a, b, steps, i)); });
    }
  });
  t.set(OpId::eye, [](const KernelCall& c) {
    const int64_t m = c.attrs.i(1);
    generate(c.out(), [m](int64_t i) { return int64_t(i / m == i % m); });
  });
  t.set(OpId::rand, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    const bool dbl = c.out().dtype() == kFloat64;
    generate(c.out(), [&](int64_t i) { return factory::rand_at(dbl, seed, offset + i); });
  });
  t.set(OpId::randn, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    generate(c.out(), [&](int64_t i) { return philox::normal(seed, offset + i); });
  });
  t.set(OpId::randint, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    const int64_t low = c.attrs.i(5), high = c.attrs.i(6);
    generate(c.out(), [&](int64_t i) { return factory::randint_at(low, high, seed, offset + i); });
  });
}

}  // namespace kiln::backend
