// Shape and dtype rules of the reductions, cumsum and softmax. Dims are wrapped
// and sorted in place (an empty list becomes every dim), so a rule rerun on its
// own attributes changes nothing.
#include <cmath>

#include "core/shape_util.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

// Wraps and sorts the dims attribute at index k and writes it back.
template <class Ctx>
std::vector<int64_t> canonical_dims(Ctx& ctx, size_t k) {
  std::vector<int64_t> dims = wrap_dims(ctx.attrs.ints(k), ctx.input(0).dim(), ctx.name());
  ctx.attrs.ints(k) = dims;
  return dims;
}

// Wraps the single dim attribute at index k and writes it back.
template <class Ctx>
int64_t canonical_dim(Ctx& ctx, size_t k) {
  const int64_t dim = wrap_dim(ctx.attrs.i(k), ctx.input(0).dim(), ctx.name());
  ctx.attrs[k] = dim;
  return dim;
}

// dims sorted and unique; a 0-dim input has no dims and keeps its shape. Sizes is
// Shape or SymShape: the kept dims are copied, the reduced ones become 1.
template <class Sizes>
Sizes reduced_sizes(const Sizes& in, const std::vector<int64_t>& dims, bool keepdim) {
  Sizes out;
  size_t next = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    const bool reduced = next < dims.size() && dims[next] == d;
    if (reduced) ++next;
    if (!reduced) out.push_back(in[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// max, min and the arg ops have no identity: reducing zero elements is an error.
template <class Ctx>
void reject_empty_reduction(const Ctx& ctx, const std::vector<int64_t>& dims) {
  const auto& sizes = ctx.input(0).sizes();
  for (int64_t d : dims) {
    if (sizes[d] == 0) {
      throw IndexError(detail::str_cat(ctx.name(), ": cannot reduce over dim ", d,
                                       " of size 0 of a tensor of shape ", sizes,
                                       " (the op has no identity)"));
    }
  }
}

template <class Ctx>
void require_floating(const Ctx& ctx, DType t) {
  if (!is_floating(t)) {
    throw DTypeError(
        detail::str_cat(ctx.name(), ": expected a floating point input, got ", t));
  }
}

// Integers and bools accumulate in int64 unless a dtype is asked for.
DType accumulate_dtype(DType in, const Attrs& attrs, size_t dtype_index) {
  if (attrs.has(dtype_index)) return attrs.dtype(dtype_index);
  return is_integral(in, /*include_bool=*/true) ? kInt64 : in;
}

// A reduction whose input is cast to `t` and whose output has dtype `t`.
template <class Ctx>
void reduce_to(Ctx& ctx, size_t dims_index, size_t keepdim_index, DType t) {
  const std::vector<int64_t> dims = canonical_dims(ctx, dims_index);
  ctx.cast_input(0, t);
  ctx.add_output(reduced_sizes(ctx.input(0).sizes(), dims, ctx.attrs.b(keepdim_index)), t,
                 ctx.common_device());
}

template <class Ctx>
void infer_norm(Ctx& ctx) {
  const double p = ctx.attrs.f(0);
  if (std::isnan(p)) throw ValueError("norm: p must be a number, got nan");
  require_floating(ctx, ctx.input(0).dtype());
  const DType t = ctx.input(0).dtype();
  const std::vector<int64_t> dims = canonical_dims(ctx, 1);
  if (std::isinf(p)) reject_empty_reduction(ctx, dims);
  ctx.add_output(reduced_sizes(ctx.input(0).sizes(), dims, ctx.attrs.b(2)), t,
                 ctx.common_device());
}

}  // namespace

// sum and prod: dims, keepdim, dtype?.
template <class Ctx>
void infer_reduce_sum(Ctx& ctx) {
  reduce_to(ctx, 0, 1, accumulate_dtype(ctx.input(0).dtype(), ctx.attrs, 2));
}

// mean, var, std, norm and logsumexp: floating results.
template <class Ctx>
void infer_reduce_float(Ctx& ctx) {
  const DType in = ctx.input(0).dtype();
  switch (ctx.schema.id) {
    case OpId::mean: {  // dims, keepdim, dtype?
      const DType t = ctx.attrs.has(2) ? ctx.attrs.dtype(2) : in;
      if (!is_floating(t)) {
        throw DTypeError(detail::str_cat(
            "mean: needs a floating point input or dtype to average in, got ", t));
      }
      reduce_to(ctx, 0, 1, t);
      return;
    }
    case OpId::var:
    case OpId::std:  // dims, correction, keepdim
      require_floating(ctx, in);
      if (std::isnan(ctx.attrs.f(1))) {
        throw ValueError(detail::str_cat(ctx.name(), ": correction must be a number, got nan"));
      }
      reduce_to(ctx, 0, 2, in);
      return;
    case OpId::norm:  // p, dims, keepdim
      infer_norm(ctx);
      return;
    default:  // logsumexp: dims, keepdim; integers are promoted as in PyTorch
      reduce_to(ctx, 0, 1, is_floating(in) ? in : kFloat32);
      return;
  }
}

// amax and amin: dims, keepdim; the input's dtype.
template <class Ctx>
void infer_reduce_same(Ctx& ctx) {
  const std::vector<int64_t> dims = canonical_dims(ctx, 0);
  reject_empty_reduction(ctx, dims);
  ctx.add_output(reduced_sizes(ctx.input(0).sizes(), dims, ctx.attrs.b(1)),
                 ctx.input(0).dtype(), ctx.common_device());
}

// max_dim and min_dim: dim, keepdim -> (values, int64 indices).
template <class Ctx>
void infer_reduce_with_indices(Ctx& ctx) {
  const int64_t dim = canonical_dim(ctx, 0);
  std::vector<int64_t> dims;
  if (ctx.input(0).dim() > 0) dims.push_back(dim);
  reject_empty_reduction(ctx, dims);
  const auto sizes = reduced_sizes(ctx.input(0).sizes(), dims, ctx.attrs.b(1));
  ctx.add_output(sizes, ctx.input(0).dtype(), ctx.common_device());
  ctx.add_output(sizes, kInt64, ctx.common_device());
}

// argmax and argmin: dim?, keepdim; without a dim the flattened tensor is reduced.
template <class Ctx>
void infer_reduce_arg(Ctx& ctx) {
  const auto& x = ctx.input(0);
  std::vector<int64_t> dims;
  if (ctx.attrs.has(0)) {
    const int64_t dim = canonical_dim(ctx, 0);
    if (x.dim() > 0) dims.push_back(dim);
  } else {
    dims = wrap_dims({}, x.dim(), ctx.name());
  }
  reject_empty_reduction(ctx, dims);
  ctx.add_output(reduced_sizes(x.sizes(), dims, ctx.attrs.b(1)), kInt64, ctx.common_device());
}

// any and all: dims, keepdim; any dtype in, bool out.
template <class Ctx>
void infer_reduce_bool(Ctx& ctx) {
  const std::vector<int64_t> dims = canonical_dims(ctx, 0);
  ctx.add_output(reduced_sizes(ctx.input(0).sizes(), dims, ctx.attrs.b(1)), kBool,
                 ctx.common_device());
}

// cumsum: dim, dtype?.
template <class Ctx>
void infer_cumsum(Ctx& ctx) {
  canonical_dim(ctx, 0);
  const DType t = accumulate_dtype(ctx.input(0).dtype(), ctx.attrs, 1);
  ctx.cast_input(0, t);
  ctx.add_output(ctx.input(0).sizes(), t, ctx.common_device());
}

// softmax and log_softmax: dim; floating inputs only.
template <class Ctx>
void infer_softmax(Ctx& ctx) {
  require_floating(ctx, ctx.input(0).dtype());
  canonical_dim(ctx, 0);
  ctx.add_output(ctx.input(0).sizes(), ctx.input(0).dtype(), ctx.common_device());
}

// sort: dim, descending -> (values, int64 indices) of the input's shape.
template <class Ctx>
void infer_sort(Ctx& ctx) {
  canonical_dim(ctx, 0);
  const DType t = ctx.input(0).dtype();
  ctx.add_output(ctx.input(0).sizes(), t, ctx.common_device());
  ctx.add_output(ctx.input(0).sizes(), kInt64, ctx.common_device());
}

// topk: k, dim, largest -> (values, int64 indices) with k entries along dim.
template <class Ctx>
void infer_topk(Ctx& ctx) {
  const int64_t dim = canonical_dim(ctx, 1);
  const int64_t k = ctx.attrs.i(0);
  auto sizes = ctx.input(0).sizes();
  const bool scalar = sizes.empty();
  if (!(k >= 0 && (scalar ? k <= 1 : sizes[dim] >= k))) {
    throw IndexError(detail::str_cat(
        ctx.name(), ": k (", k, ") must be in [0, ", scalar ? typename Ctx::Int(1) : sizes[dim],
        "] (the size of dim ", dim, " of a tensor of shape ", sizes, ")"));
  }
  if (!scalar) sizes[dim] = k;
  ctx.add_output(sizes, ctx.input(0).dtype(), ctx.common_device());
  ctx.add_output(sizes, kInt64, ctx.common_device());
}

KILN_SHAPE_RULE_INSTANCES(infer_reduce_sum)
KILN_SHAPE_RULE_INSTANCES(infer_reduce_float)
KILN_SHAPE_RULE_INSTANCES(infer_reduce_same)
KILN_SHAPE_RULE_INSTANCES(infer_reduce_with_indices)
KILN_SHAPE_RULE_INSTANCES(infer_reduce_arg)
KILN_SHAPE_RULE_INSTANCES(infer_reduce_bool)
KILN_SHAPE_RULE_INSTANCES(infer_cumsum)
KILN_SHAPE_RULE_INSTANCES(infer_softmax)
KILN_SHAPE_RULE_INSTANCES(infer_sort)
KILN_SHAPE_RULE_INSTANCES(infer_topk)

}  // namespace kiln::ops
