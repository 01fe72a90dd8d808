// Rules of the shape and indexing ops that produce new tensors (cat, stack,
// index_select, gather, scatter, repeat, flip, tril/triu, one_hot). Data-
// dependent checks (index values) are left to the kernels: rules never read data.
// They are templates over the context (ShapeCtx, SymShapeCtx: op_table.h), so
// that the same rule gives eager mode's sizes and the compiler's symbolic ones.
#include <algorithm>

#include "core/checked_size.h"
#include "core/shape_util.h"
#include "ops/op_table.h"
#include "ops/type_promotion.h"

namespace kiln::ops {
namespace {

// A 1-D tensor of size 0: cat skips it whatever the other shapes, as PyTorch does.
template <class T>
bool is_skipped_in_cat(const T& t) {
  return t.dim() == 1 && t.sizes()[0] == 0;
}

template <class Ctx>
void require_inputs(const Ctx& ctx) {
  if (ctx.inputs.empty()) {
    throw ValueError(detail::str_cat(ctx.name(), ": expected a non-empty list of tensors"));
  }
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.inputs[i].defined()) {
      throw ValueError(detail::str_cat(ctx.name(), ": tensor ", i, " of the list is undefined"));
    }
  }
}

// Every input converted to the promoted dtype of the list; returns that dtype.
template <class Ctx>
DType promote_list(Ctx& ctx) {
  const DType t = result_type(ctx.inputs);
  for (size_t i = 0; i < ctx.inputs.size(); ++i) ctx.cast_input(i, t);
  return t;
}

// Checks an index tensor's dtype against the ones the op accepts.
template <class Ctx>
void require_index_dtype(const Ctx& ctx, const typename Ctx::TensorType& index, bool allow_int32) {
  const DType t = index.dtype();
  if (t == kInt64 || (allow_int32 && t == kInt32)) return;
  throw DTypeError(detail::str_cat(ctx.name(), ": index must be int64",
                                   allow_int32 ? " or int32" : "", ", got ", t));
}

// The sizes of t as a tensor of at least one dim (a 0-dim tensor counts as [1]).
template <class T>
typename ShapeTypes<T>::Sizes sizes_at_least_1d(const T& t) {
  return t.dim() == 0 ? typename ShapeTypes<T>::Sizes{1} : t.sizes();
}

// gather/scatter: index has x's dims and fits inside bound (x or src) outside
// skip_dim (-1: every dim).
template <class Ctx>
void check_index_fits(const Ctx& ctx, const typename Ctx::TensorType& index,
                      const typename Ctx::TensorType& bound, const char* bound_name,
                      int64_t skip_dim) {
  if (index.dim() != bound.dim()) {
    throw ShapeError(detail::str_cat(ctx.name(), ": index ", index.sizes(), " must have as many ",
                                     "dims as ", bound_name, " ", bound.sizes()));
  }
  const typename Ctx::Sizes is = sizes_at_least_1d(index), bs = sizes_at_least_1d(bound);
  for (size_t d = 0; d < is.size(); ++d) {
    if (static_cast<int64_t>(d) != skip_dim && is[d] > bs[d]) {
      throw ShapeError(detail::str_cat(ctx.name(), ": index ", index.sizes(), " is larger than ",
                                       bound_name, " ", bound.sizes(), " in dim ", d));
    }
  }
}

}  // namespace

template <class Ctx>
void infer_cat(Ctx& ctx) {
  require_inputs(ctx);
  const typename Ctx::TensorType* first = nullptr;  // the first tensor that is not skipped
  for (const auto& t : ctx.inputs) {
    if (t.dim() == 0) {
      throw ShapeError(detail::str_cat("cat: a 0-dim tensor cannot be concatenated; ",
                                       "unsqueeze it or use stack"));
    }
    if (!first && !is_skipped_in_cat(t)) first = &t;
  }
  const DType dtype = promote_list(ctx);
  const Device device = ctx.common_device();
  if (!first) {  // only empty 1-D tensors: the result is one too
    ctx.attrs[0] = wrap_dim(ctx.attrs.i(0), 1, "cat");
    ctx.add_output({0}, dtype, device);
    return;
  }
  const int64_t d = wrap_dim(ctx.attrs.i(0), first->dim(), "cat");
  ctx.attrs[0] = d;
  typename Ctx::Sizes out = first->sizes();
  out[d] = 0;
  for (const auto& t : ctx.inputs) {
    if (is_skipped_in_cat(t)) continue;
    if (t.dim() != first->dim()) {
      throw ShapeError(detail::str_cat("cat: tensors must have the same number of dims, got ",
                                       first->sizes(), " and ", t.sizes()));
    }
    for (int64_t k = 0; k < t.dim(); ++k) {
      if (k != d && t.sizes()[k] != out[k]) {
        throw ShapeError(detail::str_cat("cat: sizes must match except in dim ", d, ", got ",
                                         first->sizes(), " and ", t.sizes(), " (dim ", k, ")"));
      }
    }
    out[d] = size_add(out[d], t.sizes()[d], "cat");
  }
  ctx.add_output(std::move(out), dtype, device);
}

template <class Ctx>
void infer_stack(Ctx& ctx) {
  require_inputs(ctx);
  const auto& first = ctx.inputs[0];
  for (const auto& t : ctx.inputs) {
    if (t.sizes() != first.sizes()) {
      throw ShapeError(detail::str_cat("stack: tensors must have the same shape, got ",
                                       first.sizes(), " and ", t.sizes()));
    }
  }
  const int64_t d = wrap_dim(ctx.attrs.i(0), first.dim() + 1, "stack");
  ctx.attrs[0] = d;
  typename Ctx::Sizes out = first.sizes();
  out.insert(out.begin() + d, typename Ctx::Int(static_cast<int64_t>(ctx.inputs.size())));
  const DType dtype = promote_list(ctx);
  ctx.add_output(std::move(out), dtype, ctx.common_device());
}

template <class Ctx>
void infer_index_select(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& index = ctx.input(1);
  require_index_dtype(ctx, index, /*allow_int32=*/true);
  if (index.dim() > 1) {
    throw ShapeError(
        detail::str_cat("index_select: index must be 1-D or 0-dim, got shape ", index.sizes()));
  }
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "index_select");
  ctx.attrs[0] = d;
  typename Ctx::Sizes out = x.sizes();
  if (x.dim() == 0) {
    if (index.numel() != 1) {
      throw ShapeError(detail::str_cat("index_select: a 0-dim input takes exactly one index, ",
                                       "got shape ", index.sizes()));
    }
  } else {
    out[d] = index.numel();
  }
  ctx.add_output(std::move(out), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_gather(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& index = ctx.input(1);
  require_index_dtype(ctx, index, /*allow_int32=*/false);
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), "gather");
  ctx.attrs[0] = d;
  check_index_fits(ctx, index, x, "input", d);
  ctx.add_output(index.sizes(), x.dtype(), ctx.common_device());
}

// scatter and scatter_add: index fits in src everywhere and in the input outside dim.
template <class Ctx>
void infer_scatter(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& index = ctx.input(1);
  const auto& src = ctx.input(2);
  require_index_dtype(ctx, index, /*allow_int32=*/false);
  if (src.dtype() != x.dtype()) {
    throw DTypeError(detail::str_cat(ctx.name(), ": src must have the dtype of the input, ",
                                     x.dtype(), ", got ", src.dtype()));
  }
  const int64_t d = wrap_dim(ctx.attrs.i(0), x.dim(), ctx.name());
  ctx.attrs[0] = d;
  check_index_fits(ctx, index, x, "input", d);
  check_index_fits(ctx, index, src, "src", -1);
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

// Sums of bools have no meaning here (PyTorch's bool scatter_add is a logical or).
template <class Ctx>
void infer_scatter_add(Ctx& ctx) {
  if (ctx.input(0).dtype() == kBool) {
    throw DTypeError("scatter_add: bool tensors are not supported, use scatter");
  }
  infer_scatter(ctx);
}

template <class Ctx>
void infer_repeat(Ctx& ctx) {
  const auto& x = ctx.input(0);
  const auto& repeats = ctx.attrs.ints(0);
  if (static_cast<int64_t>(repeats.size()) < x.dim()) {
    throw ShapeError(detail::str_cat("repeat: ", repeats.size(), " repeats ", repeats,
                                     " are fewer than the input's dims ", x.sizes()));
  }
  const size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  typename Ctx::Sizes out(repeats.size());
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0) {
      throw ValueError(detail::str_cat("repeat: repeats must be non-negative, got ", repeats));
    }
    out[i] = size_mul(typename Ctx::Int(repeats[i]),
                      i < lead ? typename Ctx::Int(1) : x.sizes()[i - lead], "repeat");
  }
  ctx.add_output(std::move(out), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_flip(Ctx& ctx) {
  const auto& x = ctx.input(0);
  auto& dims = ctx.attrs.ints(0);
  // wrap_dims reads an empty list as "all dims"; for flip it means none.
  if (!dims.empty()) dims = wrap_dims(dims, x.dim(), "flip");
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_triangle(Ctx& ctx) {
  const auto& x = ctx.input(0);
  if (x.dim() < 2) {
    throw ShapeError(
        detail::str_cat(ctx.name(), ": input must have at least 2 dims, got shape ", x.sizes()));
  }
  ctx.add_output(x.sizes(), x.dtype(), ctx.common_device());
}

template <class Ctx>
void infer_one_hot(Ctx& ctx) {
  const auto& indices = ctx.input(0);
  if (indices.dtype() != kInt64) {
    throw DTypeError(detail::str_cat("one_hot: indices must be int64, got ", indices.dtype()));
  }
  const int64_t classes = ctx.attrs.i(0);
  if (classes < 0) {
    // -1 (max + 1) needs the data: the public function resolves it before dispatch.
    throw ValueError(
        detail::str_cat("one_hot: num_classes must be non-negative here, got ", classes));
  }
  typename Ctx::Sizes out = indices.sizes();
  out.push_back(classes);
  ctx.add_output(std::move(out), kInt64, ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_cat)
KILN_SHAPE_RULE_INSTANCES(infer_stack)
KILN_SHAPE_RULE_INSTANCES(infer_index_select)
KILN_SHAPE_RULE_INSTANCES(infer_gather)
KILN_SHAPE_RULE_INSTANCES(infer_scatter)
KILN_SHAPE_RULE_INSTANCES(infer_scatter_add)
KILN_SHAPE_RULE_INSTANCES(infer_repeat)
KILN_SHAPE_RULE_INSTANCES(infer_flip)
KILN_SHAPE_RULE_INSTANCES(infer_triangle)
KILN_SHAPE_RULE_INSTANCES(infer_one_hot)

}  // namespace kiln::ops
