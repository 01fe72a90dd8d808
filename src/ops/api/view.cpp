// The public view functions: reshaping, permuting, slicing, broadcasting.
#include <algorithm>
#include <limits>

#include "core/shape_util.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"
#include "ops/shape_rules/view.h"

namespace kiln {

using ops::dispatch1;
using ops::OpId;

Tensor view(const Tensor& x, const Shape& shape) { return dispatch1(OpId::view, {x}, {shape}); }

Tensor reshape(const Tensor& x, const Shape& shape, const std::source_location& where) {
  // A contiguous tensor always has the view: view's shape rule resolves a
  // -1, so a traced program reads only that x is contiguous, not its sizes
  // (which then may change: compiler/capture/capture.h, LayoutRead).
  if (x.is_contiguous(where)) {
    try {
      return view(x, shape);
    } catch (const ShapeError&) {
      (void)ops::infer_view_shape("reshape", x.sizes(where),
                                  shape);  // the error, named as reshape's
      throw;
    }
  }
  const Shape target = ops::infer_view_shape("reshape", x.sizes(where), shape);
  if (ops::view_possible(x, target)) return view(x, target);
  return view(x.clone(), target);
}

Tensor permute(const Tensor& x, const Shape& dims) { return dispatch1(OpId::permute, {x}, {dims}); }

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t n = x.dim();
  if (n == 0) {
    wrap_dim(dim0, n, "transpose");
    wrap_dim(dim1, n, "transpose");
    return x;
  }
  Shape dims(n);
  for (int64_t i = 0; i < n; ++i) dims[i] = i;
  std::swap(dims[wrap_dim(dim0, n, "transpose")], dims[wrap_dim(dim1, n, "transpose")]);
  return permute(x, dims);
}

Tensor squeeze(const Tensor& x) { return dispatch1(OpId::squeeze, {x}, {Shape{}}); }
Tensor squeeze(const Tensor& x, const Shape& dims) {
  if (dims.empty()) return x;  // an explicit empty list squeezes nothing, as torch.squeeze(x, ())
  return dispatch1(OpId::squeeze, {x}, {dims});
}
Tensor unsqueeze(const Tensor& x, int64_t dim) { return dispatch1(OpId::unsqueeze, {x}, {dim}); }
Tensor expand(const Tensor& x, const Shape& shape) { return dispatch1(OpId::expand, {x}, {shape}); }

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim,
               const std::source_location& where) {
  if (x.dim() == 0) return dispatch1(OpId::flatten, {x}, {start_dim, end_dim});  // [1]
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  if (s == e) return x;
  // The rule checks that s <= e. A traced program reads only whether x is
  // contiguous, not its sizes (compiler/capture/capture.h, LayoutRead): they stay
  // symbolic in the rule. Merged dims that are not one run of memory are
  // copied first, as reshape does.
  const bool copy = s < e && !x.is_contiguous(where) &&
                    !ops::merged_stride(x.sizes(where), x.strides(where), s, e);
  return dispatch1(OpId::flatten, {copy ? x.contiguous() : x}, {start_dim, end_dim});
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  return dispatch1(OpId::unflatten, {x}, {dim, sizes});
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length,
              const std::source_location& where) {
  if (x.dim() == 0) throw IndexError("narrow: cannot narrow a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  // From a start that is not negative, a check on the size (size_is): a
  // compiled program then holds for every size the slice fits in.
  if (start >= 0 && length >= 0 && start <= std::numeric_limits<int64_t>::max() - length &&
      x.size_is(d, SizeCmp::kGe, start + length, where))
    return slice(x, d, start, start + length);
  const int64_t n = x.size(d, where);
  const int64_t s = start < 0 ? start + n : start;
  if (s < 0 || length < 0 || s > n || length > n - s) {  // s + length could overflow
    throw IndexError(detail::str_cat("narrow: start ", start, " and length ", length,
                                     " exceed dim ", d, " of size ", n));
  }
  return slice(x, d, s, s + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  return dispatch1(OpId::select, {x}, {dim, index});
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop,
             int64_t step) {
  return dispatch1(OpId::slice, {x},
                   {dim, start.value_or(0), stop.value_or(std::numeric_limits<int64_t>::max()), step});
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return broadcast_pair(a, b, op);
}

// Each dim's size is a SymSize of a tensor whose size there is not 1, and the
// others are compared with it (size_is): a compiled program reads no size.
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors) {
  int64_t rank = 0;
  for (const auto& t : tensors) rank = std::max(rank, t.dim());
  SymSizes shape(static_cast<size_t>(rank), SymSize(1));
  std::vector<std::pair<const Tensor*, int64_t>> from(static_cast<size_t>(rank), {nullptr, 0});
  for (const auto& t : tensors) {
    for (int64_t j = 0; j < t.dim(); ++j) {
      const auto i = static_cast<size_t>(rank - t.dim() + j);
      if (t.size_is(j, SizeCmp::kEq, 1)) continue;
      if (!from[i].first) {
        from[i] = {&t, j};
        shape[i] = t.sym_size(j);
      } else if (!t.size_is(j, SizeCmp::kEq, *from[i].first, from[i].second)) {
        Shape all;
        for (const auto& u : tensors) all = broadcast_pair(all, u.sizes(), "broadcast_tensors");
      }
    }
  }
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(expand(t, shape));
  return out;
}

}  // namespace kiln
