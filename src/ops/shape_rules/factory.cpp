// Shape and dtype rules of the factories: everything comes from attributes, so
// the output sizes are constants in either context (no input size is
// involved), except full_like's, which are its input's.
#include <cmath>

#include "core/checked_size.h"
#include "ops/op_table.h"
#include "ops/shape_rules/scalar_fit.h"
#include "ops/shape_rules/sized.h"

namespace kiln::ops {
namespace {

template <class Ctx>
void check_sizes(const Ctx& ctx, const Shape& sizes) {
  for (int64_t s : sizes) {
    if (s < 0) {
      throw ShapeError(detail::str_cat(ctx.name(), ": sizes must be non-negative, got ", sizes));
    }
  }
}

// The attributes dtype, device follow the op's leading attributes at these positions.
// `sizes` are plain integers from attributes; the output takes them as Ctx::Sizes.
template <class Ctx>
void push_output(Ctx& ctx, const Shape& sizes, size_t dtype_attr) {
  check_sizes(ctx, sizes);
  ctx.add_output(typename Ctx::Sizes(sizes.begin(), sizes.end()), ctx.attrs.dtype(dtype_attr),
                 ctx.attrs.device(dtype_attr + 1));
}

}  // namespace

template <class Ctx>
void infer_factory(Ctx& ctx) {
  const size_t dtype_attr = ctx.schema.id == OpId::full ? 2 : 1;
  if (ctx.schema.id == OpId::full)
    check_fill_value_fits(ctx.name(), ctx.attrs.scalar(1), ctx.attrs.dtype(2));
  push_output(ctx, ctx.attrs.ints(0), dtype_attr);
}

// full_sized: sizes:ints (constants, or sizes of its inputs: shape_rules/
// sized.h), value, dtype, device. Its inputs give sizes only.
template <class Ctx>
void infer_full_sized(Ctx& ctx) {
  typename Ctx::Sizes sizes;
  for (const int64_t entry : ctx.attrs.ints(0)) {
    std::optional<typename Ctx::Int> s = sized_entry(ctx, entry);
    if (!s) {
      throw ShapeError(
          detail::str_cat(ctx.name(), ": sizes must be non-negative, got ", ctx.attrs.ints(0)));
    }
    sizes.push_back(*s);
  }
  check_fill_value_fits(ctx.name(), ctx.attrs.scalar(1), ctx.attrs.dtype(2));
  ctx.add_output(std::move(sizes), ctx.attrs.dtype(2), ctx.attrs.device(3));
}

// full_like: a new contiguous tensor of the input's sizes, on its device.
template <class Ctx>
void infer_full_like(Ctx& ctx) {
  const auto& x = ctx.input(0);
  check_fill_value_fits(ctx.name(), ctx.attrs.scalar(0), ctx.attrs.dtype(1));
  ctx.add_output(x.sizes(), ctx.attrs.dtype(1), x.device());
}

template <class Ctx>
void infer_randint(Ctx& ctx) {
  const int64_t low = ctx.attrs.i(5), high = ctx.attrs.i(6);
  if (high <= low) {
    throw ValueError(
        detail::str_cat("randint: low (", low, ") must be less than high (", high, ")"));
  }
  if (ctx.attrs.dtype(1) == kBool) throw DTypeError("randint: dtype bool is not supported");
  push_output(ctx, ctx.attrs.ints(0), 1);
}

template <class Ctx>
void infer_arange(Ctx& ctx) {
  const double start = ctx.attrs.scalar(0).to_double(), end = ctx.attrs.scalar(1).to_double();
  const double step = ctx.attrs.scalar(2).to_double();
  if (step == 0) throw ValueError("arange: step must be nonzero");
  if (!std::isfinite(start) || !std::isfinite(end)) {
    throw ValueError(
        detail::str_cat("arange: start (", start, ") and end (", end, ") must be finite"));
  }
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    throw ValueError(detail::str_cat("arange: the step ", step, " moves away from end (start ",
                                     start, ", end ", end, ")"));
  }
  int64_t n;
  const Scalar& s0 = ctx.attrs.scalar(0);
  const Scalar& s1 = ctx.attrs.scalar(1);
  const Scalar& s2 = ctx.attrs.scalar(2);
  if (!s0.is_floating() && !s1.is_floating() && !s2.is_floating()) {
    // ceil(|b - a| / |st|), exact over the whole int64 range.
    const int64_t a = s0.to_int(), b = s1.to_int(), st = s2.to_int();
    const unsigned __int128 span =
        st > 0 ? static_cast<__int128>(b) - a : static_cast<__int128>(a) - b;
    const unsigned __int128 by = st > 0 ? static_cast<__int128>(st) : -static_cast<__int128>(st);
    const unsigned __int128 count = (span + by - 1) / by;
    if (count > static_cast<unsigned __int128>(INT64_MAX)) {
      throw ShapeError(detail::str_cat("arange: from ", a, " to ", b, " by ", st,
                                       " is more than 2^63 - 1 elements"));
    }
    n = static_cast<int64_t>(count);
  } else {
    n = size_from_double(
        std::ceil((end - start) / step), "arange",
        detail::str_cat("the element count from ", start, " to ", end, " by ", step));
  }
  push_output(ctx, {n}, 3);
}

template <class Ctx>
void infer_linspace(Ctx& ctx) {
  const int64_t steps = ctx.attrs.i(2);
  if (steps < 0) throw ValueError(detail::str_cat("linspace: steps must be >= 0, got ", steps));
  push_output(ctx, {steps}, 3);
}

template <class Ctx>
void infer_eye(Ctx& ctx) {
  const int64_t n = ctx.attrs.i(0), m = ctx.attrs.i(1);
  if (n < 0 || m < 0)
    throw ShapeError(detail::str_cat("eye: n and m must be >= 0, got ", n, ", ", m));
  push_output(ctx, {n, m}, 2);
}

KILN_SHAPE_RULE_INSTANCES(infer_factory)
KILN_SHAPE_RULE_INSTANCES(infer_full_like)
KILN_SHAPE_RULE_INSTANCES(infer_full_sized)
KILN_SHAPE_RULE_INSTANCES(infer_randint)
KILN_SHAPE_RULE_INSTANCES(infer_arange)
KILN_SHAPE_RULE_INSTANCES(infer_linspace)
KILN_SHAPE_RULE_INSTANCES(infer_eye)

}  // namespace kiln::ops
