// Rules of the view ops: each computes the view's sizes, strides and offset
// into the input's storage. They never copy and never read data.
#include <algorithm>
#include <limits>

#include "core/shape_util.h"
#include "ops/op_table.h"
#include "ops/shape_rules/view.h"

namespace kiln::ops {
namespace {

void push_view(ShapeCtx& ctx, Shape sizes, Shape strides, int64_t offset) {
  const Tensor& x = ctx.input(0);
  ctx.outputs.push_back({std::move(sizes), x.dtype(), x.device(), std::move(strides), offset});
}

// Strides that view `strides` (of `sizes`) as `shape`, if any (same numel).
// Dims of the old shape are grouped into chunks that are contiguous in memory;
// each chunk must map onto whole dims of the new shape.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  Shape out(shape.size());
  if (shape_numel(sizes) == 0 || sizes.empty()) {
    int64_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      out[i] = s;
      s *= std::max<int64_t>(shape[i], 1);
    }
    return out;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
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

// -1 in shape takes the size that makes the element counts match.
Shape infer_view_shape(std::string_view op, const Shape& from, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0)
        throw ShapeError(detail::str_cat(op, ": only one dim can be -1 in ", shape));
      infer_at = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      throw ShapeError(detail::str_cat(op, ": invalid size ", out[i], " in ", shape));
    } else {
      known *= out[i];
    }
  }
  const int64_t numel = shape_numel(from);
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      throw ShapeError(detail::str_cat(op, ": shape ", shape, " is invalid for an input of size ",
                                       numel, " (shape ", from, ")"));
    }
    out[infer_at] = numel / known;
  }
  if (shape_numel(out) != numel) {
    throw ShapeError(detail::str_cat(op, ": shape ", shape, " is invalid for an input of size ",
                                     numel, " (shape ", from, ")"));
  }
  return out;
}

bool view_possible(const Tensor& x, const Shape& shape) {
  return view_strides(x.sizes(), x.strides(), shape).has_value();
}

void infer_view(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  Shape shape = infer_view_shape("view", x.sizes(), ctx.attrs.ints(0));
  auto strides = view_strides(x.sizes(), x.strides(), shape);
  if (!strides) {
    throw ShapeError(detail::str_cat("view: shape ", shape, " is not compatible with the input's ",
                                     "sizes ", x.sizes(), " and strides ", x.strides(),
                                     "; use reshape"));
  }
  ctx.attrs.ints(0) = shape;
  push_view(ctx, shape, *strides, x.storage_offset());
}

void infer_permute(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  auto& dims = ctx.attrs.ints(0);
  if (static_cast<int64_t>(dims.size()) != x.dim()) {
    throw ShapeError(
        detail::str_cat("permute: dims ", dims, " do not match a tensor with ", x.dim(), " dims"));
  }
  std::vector<bool> seen(dims.size(), false);
  Shape sizes(dims.size()), strides(dims.size());
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

void infer_squeeze(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  auto& dims = ctx.attrs.ints(0);
  std::vector<bool> drop(x.dim(), false);
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) drop[d] = x.sizes()[d] == 1;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (drop[d]) dims.push_back(d);
    if (dims.empty()) dims.push_back(x.dim() > 0 ? x.dim() - 1 : 0);  // nothing to squeeze, canonically
  } else {
    for (auto& d : dims) {
      d = wrap_dim(d, x.dim(), "squeeze");
      if (x.dim() > 0) drop[d] = x.sizes()[d] == 1;
    }
  }
  Shape sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (drop[d]) continue;
    sizes.push_back(x.sizes()[d]);
    strides.push_back(x.strides()[d]);
  }
  push_view(ctx, sizes, strides, x.storage_offset());
}

void infer_unsqueeze(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t d = ctx.attrs.i(0);
  d = wrap_dim(d, x.dim() + 1, "unsqueeze");
  ctx.attrs[0] = d;
  Shape sizes = x.sizes(), strides = x.strides();
  const int64_t stride = d < x.dim() ? sizes[d] * strides[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  push_view(ctx, sizes, strides, x.storage_offset());
}

void infer_expand(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  auto& shape = ctx.attrs.ints(0);
  if (static_cast<int64_t>(shape.size()) < x.dim()) {
    throw ShapeError(detail::str_cat("expand: the target shape ", shape, " has fewer dims than ",
                                     "the input's ", x.sizes()));
  }
  const int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    const int64_t d = i - lead;
    if (d < 0) {
      if (shape[i] < 0)
        throw ShapeError(detail::str_cat("expand: size -1 is not allowed for the new leading dim ",
                                         i, " of ", shape));
      continue;
    }
    const int64_t have = x.sizes()[d];
    if (shape[i] == -1) shape[i] = have;
    if (shape[i] < 0) {
      throw ShapeError(detail::str_cat("expand: invalid size ", shape[i], " for dim ", i, " of ", shape));
    }
    if (have == shape[i]) {
      strides[i] = x.strides()[d];
    } else if (have != 1) {
      throw ShapeError(detail::str_cat("expand: the size ", have, " of dim ", d, " (shape ",
                                       x.sizes(), ") must match ", shape[i], " or be 1 (target ",
                                       shape, ")"));
    }
  }
  push_view(ctx, shape, strides, x.storage_offset());
}

void infer_slice(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dim() == 0) throw IndexError("slice: cannot slice a 0-dim tensor");
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "slice");
  const int64_t step = ctx.attrs.i(3);
  if (step <= 0) throw ValueError(detail::str_cat("slice: step must be positive, got ", step));
  const int64_t n = x.sizes()[d];
  auto clamp_index = [n](int64_t i) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t start = clamp_index(ctx.attrs.i(1));
  const int64_t stop = std::max(start, clamp_index(ctx.attrs.i(2)));
  ctx.attrs[0] = d;
  ctx.attrs[1] = start;
  ctx.attrs[2] = stop;
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = stop > start ? (stop - start - 1) / step + 1 : 0;  // no overflow for huge steps
  strides[d] *= step;
  push_view(ctx, sizes, strides, x.storage_offset() + start * x.strides()[d]);
}

void infer_select(ShapeCtx& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dim() == 0) throw IndexError("select: cannot index a 0-dim tensor");
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "select");
  const int64_t n = x.sizes()[d];
  int64_t i = ctx.attrs.i(1);
  if (i < -n || i >= n) {
    throw IndexError(detail::str_cat("select: index ", i, " is out of range for dim ", d,
                                     " of size ", n, " (shape ", x.sizes(), ")"));
  }
  if (i < 0) i += n;
  ctx.attrs[0] = d;
  ctx.attrs[1] = i;
  Shape sizes = x.sizes(), strides = x.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  push_view(ctx, sizes, strides, x.storage_offset() + i * x.strides()[d]);
}

}  // namespace kiln::ops
