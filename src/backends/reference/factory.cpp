// Reference kernels of the factories: one element at a time through ref::write.
#include "backends/factory_formulas.h"
#include "backends/reference/ref_util.h"
#include "backends/reference/reference.h"

namespace kiln::backend {
namespace {

using ops::OpId;

template <typename F>
void each(const Tensor& out, F f) {
  for (int64_t i = 0; i < out.numel(); ++i) ref::write(out, i, f(i));
}

void fill(const Tensor& out, const Scalar& v) {
  if (is_floating(out.dtype()))
    each(out, [&](int64_t) { return v.to_double(); });
  else if (out.dtype() == kBool)
    each(out, [&](int64_t) { return v.to<bool>(); });
  else
    each(out, [&](int64_t) { return v.to_int(); });
}

}  // namespace

void register_reference_factory_kernels(KernelTable& t) {
  t.set(OpId::empty, [](const KernelCall&) {});
  t.set(OpId::full, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_sized, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(1)); });
  t.set(OpId::full_like, [](const KernelCall& c) { fill(c.out(), c.attrs.scalar(0)); });
  t.set(OpId::arange, [](const KernelCall& c) {
    const Scalar start = c.attrs.scalar(0), step = c.attrs.scalar(2);
    if (is_floating(c.out().dtype())) {
      each(c.out(), [&](int64_t i) { return start.to_double() + double(i) * step.to_double(); });
    } else {
      each(c.out(), [&](int64_t i) { return start.to_int() + i * step.to_int(); });
    }
  });
  t.set(OpId::linspace, [](const KernelCall& c) {
    const double a = c.attrs.f(0), b = c.attrs.f(1);
    const int64_t steps = c.attrs.i(2);
    if (is_floating(c.out().dtype())) {
      each(c.out(), [&](int64_t i) { return factory::linspace_at(a, b, steps, i); });
    } else {
      each(c.out(), [&](int64_t i) { return int64_t(factory::linspace_at(a, b, steps, i)); });
    }
  });
  t.set(OpId::eye, [](const KernelCall& c) {
    const int64_t n = c.attrs.i(0), m = c.attrs.i(1);
    if (m == 0) return;  // no elements: n may be 2^62 rows of none
    for (int64_t r = 0; r < n; ++r)
      for (int64_t col = 0; col < m; ++col) ref::write(c.out(), r * m + col, int64_t(r == col));
  });
  t.set(OpId::rand, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    const bool dbl = c.out().dtype() == kFloat64;
    each(c.out(), [&](int64_t i) { return factory::rand_at(dbl, seed, offset + i); });
  });
  t.set(OpId::randn, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    each(c.out(), [&](int64_t i) { return philox::normal(seed, offset + i); });
  });
  t.set(OpId::randint, [](const KernelCall& c) {
    const uint64_t seed = c.attrs.i(3), offset = c.attrs.i(4);
    each(c.out(), [&](int64_t i) { return factory::randint_at(c.attrs.i(5), c.attrs.i(6), seed, offset + i); });
  });
}

}  // namespace kiln::backend
