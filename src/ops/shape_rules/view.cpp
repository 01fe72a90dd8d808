// Rules of the view ops: each computes the view's sizes, strides and offset
// into the input's storage. They never copy and never read data. They are
// templates over the context (ShapeCtx, SymShapeCtx: op_table.h), so that the
// same rule gives eager mode's sizes and the compiler's symbolic ones.
#include <algorithm>
#include <limits>
#include <optional>

#include "core/checked_size.h"
#include "core/shape_util.h"
#include "ops/op_table.h"
#include "ops/shape_rules/sized.h"
#include "ops/shape_rules/view.h"

namespace kiln::ops {
namespace {

template <class Ctx>
void push_view(Ctx& ctx, typename Ctx::Sizes sizes, typename Ctx::Sizes strides,
               typename Ctx::Int offset) {
  const auto& x = ctx.input(0);
  ctx.outputs.push_back(
      {std::move(sizes), x.dtype(), x.device(), std::move(strides), std::move(offset)});
}

// Strides that view `strides` (of `sizes`) as `shape`, if any (same numel).
// Dims of the old shape are grouped into chunks that are contiguous in memory;
// each chunk must map onto whole dims of the new shape. With SymInt sizes the
// comparisons guard the grouping, and the strides come out as expressions.
template <class I>
std::optional<std::vector<I>> view_strides(const std::vector<I>& sizes,
                                           const std::vector<I>& strides,
                                           const std::vector<I>& shape) {
  std::vector<I> out(shape.size());
  if (shape_numel(sizes) == 0 || sizes.empty()) {
    I s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      out[i] = s;
      s *= std::max<I>(shape[i], 1);
    }
    return out;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  I chunk_base_stride = strides.back();
  I tensor_numel = 1;
  I view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (tensor_numel != view_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

// -1 in shape takes the size that makes the element counts match. The checks
// read the attribute's plain sizes; the element counts may be symbolic.
template <class I>
std::vector<I> infer_view_shape(std::string_view op, const std::vector<I>& from,
                                const Shape& shape) {
  int64_t known = 1, infer_at = -1;
  bool known_empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0)
        throw ShapeError(detail::str_cat(op, ": only one dim can be -1 in ", shape));
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw ShapeError(detail::str_cat(op, ": invalid size ", shape[i], " in ", shape));
    } else if (shape[i] == 0) {
      known_empty = true;
    } else {
      known = size_mul(known, shape[i], op);
    }
  }
  if (known_empty) known = 0;
  std::vector<I> out(shape.begin(), shape.end());
  const I numel = shape_numel(from);
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      throw ShapeError(detail::str_cat(op, ": shape ", shape, " is invalid for an input of size ",
                                       numel, " (shape ", from, ")"));
    }
    out[infer_at] = numel / known;
  }
  if constexpr (std::is_same_v<I, int64_t>) checked_numel(out, op);
  // The input's count on the left, as in view_strides: with symbolic sizes
  // the guard is then the one the remainder check made, not a second one.
  if (numel != shape_numel(out)) {
    throw ShapeError(detail::str_cat(op, ": shape ", shape, " is invalid for an input of size ",
                                     numel, " (shape ", from, ")"));
  }
  return out;
}

template Shape infer_view_shape(std::string_view, const Shape&, const Shape&);
template SymShape infer_view_shape(std::string_view, const SymShape&, const Shape&);

template <class I>
std::optional<I> merged_stride(const std::vector<I>& sizes, const std::vector<I>& strides,
                               int64_t s, int64_t e) {
  I merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= sizes[d];
  I step = strides[e];
  if (merged == 0) return step;
  std::optional<int64_t> inner;  // the next inner dim not of size 1
  for (int64_t d = e; d >= s; --d) {
    if (sizes[d] == 1) continue;
    if (!inner) {
      step = strides[d];
    } else if (strides[d] != strides[*inner] * sizes[*inner]) {
      return std::nullopt;
    }
    inner = d;
  }
  return step;
}

template std::optional<int64_t> merged_stride(const Shape&, const Shape&, int64_t, int64_t);
template std::optional<SymInt> merged_stride(const SymShape&, const SymShape&, int64_t, int64_t);

bool view_possible(const Tensor& x, const Shape& shape) {
  return view_strides(x.sizes(), x.strides(), shape).has_value();
}

bool view_possible(const SymTensor& x, const SymShape& shape) {
  return view_strides(x.sizes(), x.strides(), shape).has_value();
}

template <class Ctx>
void infer_view(Ctx& ctx) {
  const auto& x = ctx.input(0);
  typename Ctx::Sizes shape = infer_view_shape("view", x.sizes(), ctx.attrs.ints(0));
  auto strides = view_strides(x.sizes(), x.strides(), shape);
  if (!strides) {
    throw ShapeError(detail::str_cat("view: shape ", shape, " is not compatible with the input's ",
                                     "sizes ", x.sizes(), " and strides ", x.strides(),
                                     "; use reshape"));
  }
  // The resolved shape as the attribute (the traced sizes in symbolic mode,
  // which does not keep canonicalized attributes).
  ctx.attrs.ints(0) = sym::hint_of(shape);
  push_view(ctx, shape, *strides, x.storage_offset());
}

// flatten: start_dim, end_dim. The merged dims must be viewable as one (the
// public flatten copies first when they are not); sizes outside the merged
// range stay the input's own, so a traced flatten keeps them symbolic.
template <class Ctx>
void infer_flatten(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  const int64_t n = std::max<int64_t>(x.dim(), 1);
  const int64_t s = wrap_dim(ctx.attrs.i(0), n, "flatten");
  const int64_t e = wrap_dim(ctx.attrs.i(1), n, "flatten");
  if (s > e) {
    throw IndexError(detail::str_cat("flatten: start_dim ", ctx.attrs.i(0), " comes after end_dim ",
                                     ctx.attrs.i(1), " (shape ", x.sizes(), ")"));
  }
  ctx.attrs[0] = s;
  ctx.attrs[1] = e;
  if (x.dim() == 0) {
    push_view(ctx, {Int(1)}, {Int(1)}, x.storage_offset());
    return;
  }
  const auto& in_sizes = x.sizes();
  const auto& in_strides = x.strides();
  const std::optional<Int> step = merged_stride(in_sizes, in_strides, s, e);
  if (!step) {
    throw ShapeError(detail::str_cat("flatten: dims ", s, " to ", e, " of sizes ", in_sizes,
                                     " and strides ", in_strides, " cannot be viewed as one",
                                     " (kiln::flatten copies such a tensor)"));
  }
  Int merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= in_sizes[d];
  typename Ctx::Sizes sizes(in_sizes.begin(), in_sizes.begin() + s);
  typename Ctx::Sizes strides(in_strides.begin(), in_strides.begin() + s);
  sizes.push_back(merged);
  strides.push_back(*step);
  sizes.insert(sizes.end(), in_sizes.begin() + e + 1, in_sizes.end());
  strides.insert(strides.end(), in_strides.begin() + e + 1, in_strides.end());
  push_view(ctx, sizes, strides, x.storage_offset());
}

// unflatten: dim, sizes. Splits one dim into sizes (one of them may be -1);
// the other dims stay the input's own.
template <class Ctx>
void infer_unflatten(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  if (x.dim() == 0) throw IndexError("unflatten: cannot unflatten a 0-dim tensor");
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "unflatten");
  const Shape& split = ctx.attrs.ints(1);
  if (split.empty()) throw ShapeError("unflatten: sizes must not be empty");
  const typename Ctx::Sizes whole{x.sizes()[d]};
  typename Ctx::Sizes parts;
  try {
    parts = infer_view_shape("unflatten", whole, split);
  } catch (const ShapeError&) {
    throw ShapeError(detail::str_cat("unflatten: sizes ", split, " do not split dim ", d,
                                     " of size ", x.sizes()[d], " (shape ", x.sizes(), ")"));
  }
  ctx.attrs[0] = d;
  typename Ctx::Sizes sizes = x.sizes(), strides = x.strides();
  const Int inner = strides[d];
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  typename Ctx::Sizes part_strides(parts.size());
  Int step = inner;
  for (size_t k = parts.size(); k-- > 0;) {
    part_strides[k] = step;
    step *= parts[k];
  }
  sizes.insert(sizes.begin() + d, parts.begin(), parts.end());
  strides.insert(strides.begin() + d, part_strides.begin(), part_strides.end());
  push_view(ctx, sizes, strides, x.storage_offset());
}

template <class Ctx>
void infer_permute(Ctx& ctx) {
  const auto& x = ctx.input(0);
  auto& dims = ctx.attrs.ints(0);
  if (static_cast<int64_t>(dims.size()) != x.dim()) {
    throw ShapeError(
        detail::str_cat("permute: dims ", dims, " do not match a tensor with ", x.dim(), " dims"));
  }
  std::vector<bool> seen(dims.size(), false);
  typename Ctx::Sizes sizes(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    dims[i] = wrap_dim(dims[i], x.dim(), "permute");
    if (seen[dims[i]])
      throw IndexError(detail::str_cat("permute: dim ", dims[i], " repeats in ", dims));
    seen[dims[i]] = true;
    sizes[i] = x.sizes()[dims[i]];
    strides[i] = x.strides()[dims[i]];
  }
  push_view(ctx, sizes, strides, x.storage_offset());
}

template <class Ctx>
void infer_squeeze(Ctx& ctx) {
  const auto& x = ctx.input(0);
  auto& dims = ctx.attrs.ints(0);
  std::vector<bool> drop(x.dim(), false);
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) drop[d] = x.sizes()[d] == 1;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (drop[d]) dims.push_back(d);
    // Nothing to squeeze, canonically.
    if (dims.empty()) dims.push_back(x.dim() > 0 ? x.dim() - 1 : 0);
  } else {
    const Shape asked = dims;
    std::vector<bool> named(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
    for (auto& d : dims) {
      d = wrap_dim(d, x.dim(), "squeeze");
      if (named[d]) {
        throw IndexError(detail::str_cat("squeeze: dim ", d, " appears more than once in ", asked));
      }
      named[d] = true;
      if (x.dim() > 0) drop[d] = x.sizes()[d] == 1;
    }
  }
  typename Ctx::Sizes sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (drop[d]) continue;
    sizes.push_back(x.sizes()[d]);
    strides.push_back(x.strides()[d]);
  }
  push_view(ctx, sizes, strides, x.storage_offset());
}

template <class Ctx>
void infer_unsqueeze(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  int64_t d = ctx.attrs.i(0);
  d = wrap_dim(d, x.dim() + 1, "unsqueeze");
  ctx.attrs[0] = d;
  typename Ctx::Sizes sizes = x.sizes(), strides = x.strides();
  const Int stride = d < x.dim() ? sizes[d] * strides[d] : Int(1);
  sizes.insert(sizes.begin() + d, Int(1));
  strides.insert(strides.begin() + d, stride);
  push_view(ctx, sizes, strides, x.storage_offset());
}

// The attribute keeps the plain target sizes (a -1 replaced by the input's
// size, its hint in symbolic mode); the view's sizes take the input's own
// size there, so that it stays symbolic.
template <class Ctx>
void infer_expand(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  auto& shape = ctx.attrs.ints(0);
  if (static_cast<int64_t>(shape.size()) < x.dim()) {
    throw ShapeError(detail::str_cat("expand: the target shape ", shape, " has fewer dims than ",
                                     "the input's ", x.sizes()));
  }
  const int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
  typename Ctx::Sizes sizes(shape.begin(), shape.end());
  typename Ctx::Sizes strides(shape.size(), Int(0));
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    const int64_t d = i - lead;
    if (d < 0) {
      if (shape[i] < 0)
        throw ShapeError(detail::str_cat("expand: size -1 is not allowed for the new leading dim ",
                                         i, " of ", shape));
      continue;
    }
    const Int have = x.sizes()[d];
    if (shape[i] == -1) {
      shape[i] = sym::hint_of(have);
      sizes[i] = have;
    }
    if (shape[i] < 0) {
      throw ShapeError(
          detail::str_cat("expand: invalid size ", shape[i], " for dim ", i, " of ", shape));
    }
    if (have == sizes[i]) {
      strides[i] = x.strides()[d];
    } else if (have != 1) {
      throw ShapeError(detail::str_cat("expand: the size ", have, " of dim ", d, " (shape ",
                                       x.sizes(), ") must match ", shape[i], " or be 1 (target ",
                                       shape, ")"));
    }
  }
  push_view(ctx, sizes, strides, x.storage_offset());
}

// view_sized: x, then the inputs whose sizes its shape names (sized.h): a
// view whose sizes in a compiled program are those inputs' sizes.
template <class Ctx>
void infer_view_sized(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  const Shape& spec = ctx.attrs.ints(0);
  typename Ctx::Sizes shape(spec.size(), Int(1));
  int64_t infer_at = -1;
  Int known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (std::optional<Int> s = sized_entry(ctx, spec[i])) {
      shape[i] = *s;
      known = size_mul(known, *s, "view");
    } else if (infer_at >= 0) {
      throw ShapeError("view: only one dim can be -1");
    } else {
      infer_at = static_cast<int64_t>(i);
    }
  }
  const Int numel = shape_numel(x.sizes());
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      throw ShapeError(detail::str_cat("view: shape ", shape, " (-1 at dim ", infer_at,
                                       ") is invalid for an input of shape ", x.sizes()));
    }
    shape[static_cast<size_t>(infer_at)] = numel / known;
  }
  if constexpr (std::is_same_v<Int, int64_t>) checked_numel(shape, "view");
  if (numel != shape_numel(shape)) {
    throw ShapeError(
        detail::str_cat("view: shape ", shape, " is invalid for an input of shape ", x.sizes()));
  }
  auto strides = view_strides(x.sizes(), x.strides(), shape);
  if (!strides) {
    throw ShapeError(detail::str_cat("view: shape ", shape, " is not compatible with the input's ",
                                     "sizes ", x.sizes(), " and strides ", x.strides(),
                                     "; use reshape"));
  }
  push_view(ctx, shape, *strides, x.storage_offset());
}

// expand_sized: x, then the inputs whose sizes its shape names (sized.h);
// -1 keeps x's size. expand_as is every dim of the other tensor's.
template <class Ctx>
void infer_expand_sized(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  const Shape& spec = ctx.attrs.ints(0);
  if (static_cast<int64_t>(spec.size()) < x.dim()) {
    throw ShapeError(detail::str_cat("expand: the target has ", spec.size(),
                                     " dims, fewer than the input's ", x.sizes()));
  }
  const int64_t lead = static_cast<int64_t>(spec.size()) - x.dim();
  typename Ctx::Sizes sizes(spec.size(), Int(0)), strides(spec.size(), Int(0));
  for (int64_t i = 0; i < static_cast<int64_t>(spec.size()); ++i) {
    const int64_t d = i - lead;
    std::optional<Int> want = sized_entry(ctx, spec[static_cast<size_t>(i)]);
    if (d < 0) {
      if (!want) {
        throw ShapeError(
            detail::str_cat("expand: size -1 is not allowed for the new leading dim ", i));
      }
      sizes[i] = *want;
      continue;
    }
    const Int have = x.sizes()[d];
    sizes[i] = want ? *want : have;
    if (have == sizes[i]) {
      strides[i] = x.strides()[d];
    } else if (have != 1) {
      throw ShapeError(detail::str_cat("expand: the size ", have, " of dim ", d, " (shape ",
                                       x.sizes(), ") must match ", sizes[i], " or be 1"));
    }
  }
  push_view(ctx, sizes, strides, x.storage_offset());
}

template <class Ctx>
void infer_slice(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  if (x.dim() == 0) throw IndexError("slice: cannot slice a 0-dim tensor");
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "slice");
  const int64_t step = ctx.attrs.i(3);
  if (step <= 0) throw ValueError(detail::str_cat("slice: step must be positive, got ", step));
  const Int n = x.sizes()[d];
  // A negative index counts from the end; start and stop may be symbolic then.
  auto clamp_index = [&n](int64_t i) {
    Int v = i;
    if (i < 0) v += n;
    return std::clamp<Int>(v, 0, n);
  };
  const Int start = clamp_index(ctx.attrs.i(1));
  const Int stop = std::max(start, clamp_index(ctx.attrs.i(2)));
  ctx.attrs[0] = d;
  ctx.attrs[1] = sym::hint_of(start);
  ctx.attrs[2] = sym::hint_of(stop);
  typename Ctx::Sizes sizes = x.sizes(), strides = x.strides();
  sizes[d] = stop > start ? (stop - start - 1) / step + 1 : Int(0);  // no overflow for huge steps
  // A step longer than the dim leaves one element or none, and such a dim
  // never steps: its stride stays the input's, where stride * step (or the
  // byte stride after it) could pass int64. Symbolic sizes keep the product
  // (their strides of size-1 dims are never compared).
  if constexpr (std::is_same_v<Int, int64_t>) {
    if (sizes[d] > 1) strides[d] *= step;
  } else {
    strides[d] *= step;
  }
  push_view(ctx, sizes, strides, x.storage_offset() + start * x.strides()[d]);
}

template <class Ctx>
void infer_select(Ctx& ctx) {
  using Int = typename Ctx::Int;
  const auto& x = ctx.input(0);
  if (x.dim() == 0) throw IndexError("select: cannot index a 0-dim tensor");
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "select");
  const Int n = x.sizes()[d];
  const int64_t i = ctx.attrs.i(1);
  if (i < -n || i >= n) {
    throw IndexError(detail::str_cat("select: index ", i, " is out of range for dim ", d,
                                     " of size ", n, " (shape ", x.sizes(), ")"));
  }
  // A negative index counts from the end: symbolic when the dim is.
  const Int index = i < 0 ? i + n : Int(i);
  ctx.attrs[0] = d;
  ctx.attrs[1] = sym::hint_of(index);
  typename Ctx::Sizes sizes = x.sizes(), strides = x.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  push_view(ctx, sizes, strides, x.storage_offset() + index * x.strides()[d]);
}

KILN_SHAPE_RULE_INSTANCES(infer_view)
KILN_SHAPE_RULE_INSTANCES(infer_flatten)
KILN_SHAPE_RULE_INSTANCES(infer_unflatten)
KILN_SHAPE_RULE_INSTANCES(infer_permute)
KILN_SHAPE_RULE_INSTANCES(infer_squeeze)
KILN_SHAPE_RULE_INSTANCES(infer_unsqueeze)
KILN_SHAPE_RULE_INSTANCES(infer_expand)
KILN_SHAPE_RULE_INSTANCES(infer_view_sized)
KILN_SHAPE_RULE_INSTANCES(infer_expand_sized)
KILN_SHAPE_RULE_INSTANCES(infer_slice)
KILN_SHAPE_RULE_INSTANCES(infer_select)

}  // namespace kiln::ops
