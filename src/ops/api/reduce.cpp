// The public reductions, cumsum and softmax, and the Tensor methods that call them.
#include "kiln/ops/reduce.h"

#include "core/shape_util.h"
#include "kiln/ops/shape.h"
#include "ops/dispatch.h"

namespace kiln {

using ops::dispatch1;
using ops::OpId;

namespace {

// Absent optional attributes are std::monostate. Each list holds alternatives
// known at compile time: GCC warns (falsely) about uninitialized variant members
// when an AttrValue chosen at run time is copied next to a dims vector.
ops::Attrs sum_attrs(const Dims& dims, bool keepdim, std::optional<DType> dtype) {
  if (dtype) return {dims, keepdim, *dtype};
  return {dims, keepdim, std::monostate{}};
}

ops::Attrs arg_attrs(std::optional<int64_t> dim, bool keepdim) {
  if (dim) return {*dim, keepdim};
  return {std::monostate{}, keepdim};
}

ValuesIndices with_indices(OpId op, const Tensor& x, int64_t dim, bool keepdim) {
  TensorList out = ops::dispatch(op, std::span<const Tensor>(&x, 1), {dim, keepdim});
  return {std::move(out[0]), std::move(out[1])};
}

}  // namespace

Tensor sum(const Tensor& x) { return sum(x, {}); }
Tensor sum(const Tensor& x, const Dims& dims, bool keepdim, std::optional<DType> dtype) {
  return dispatch1(OpId::sum, {x}, sum_attrs(dims, keepdim, dtype));
}
Tensor mean(const Tensor& x) { return mean(x, {}); }
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim, std::optional<DType> dtype) {
  return dispatch1(OpId::mean, {x}, sum_attrs(dims, keepdim, dtype));
}
Tensor prod(const Tensor& x, const Dims& dims, bool keepdim, std::optional<DType> dtype) {
  return dispatch1(OpId::prod, {x}, sum_attrs(dims, keepdim, dtype));
}

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::amax, {x}, {dims, keepdim});
}
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::amin, {x}, {dims, keepdim});
}
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return with_indices(OpId::max_dim, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return with_indices(OpId::min_dim, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch1(OpId::argmax, {x}, arg_attrs(dim, keepdim));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch1(OpId::argmin, {x}, arg_attrs(dim, keepdim));
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const DType t = dtype ? *dtype : is_integral(x.dtype(), true) ? kInt64 : x.dtype();
  Tensor y = x.to(t);
  const int64_t d = wrap_dim(dim, x.dim(), "cumprod");
  const int64_t n = x.dim() == 0 ? 1 : y.size(d);
  if (n <= 1) return y.clone();
  // Hillis-Steele: after the step of shift s, element i holds the product of
  // the 2s elements up to i (fewer at the start).
  for (int64_t s = 1; s < n; s *= 2) {
    y = cat({y.narrow(d, 0, s), y.narrow(d, s, n - s) * y.narrow(d, 0, n - s)}, d);
  }
  return y;
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  TensorList out = ops::dispatch(OpId::sort, std::span<const Tensor>(&x, 1), {dim, descending});
  return {std::move(out[0]), std::move(out[1])};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return sort(x, dim, descending, stable).indices;
}
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  TensorList out = ops::dispatch(OpId::topk, std::span<const Tensor>(&x, 1), {k, dim, largest});
  return {std::move(out[0]), std::move(out[1])};
}

Tensor var(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  return dispatch1(OpId::var, {x}, {dims, correction, keepdim});
}
Tensor stddev(const Tensor& x, const Dims& dims, double correction, bool keepdim) {
  return dispatch1(OpId::std, {x}, {dims, correction, keepdim});
}
Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::norm, {x}, {p, dims, keepdim});
}
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::logsumexp, {x}, {dims, keepdim});
}

Tensor any(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::any, {x}, {dims, keepdim});
}
Tensor all(const Tensor& x, const Dims& dims, bool keepdim) {
  return dispatch1(OpId::all, {x}, {dims, keepdim});
}

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  if (dtype) return dispatch1(OpId::cumsum, {x}, {dim, *dtype});
  return dispatch1(OpId::cumsum, {x}, {dim, std::monostate{}});
}
Tensor softmax(const Tensor& x, int64_t dim) { return dispatch1(OpId::softmax, {x}, {dim}); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return dispatch1(OpId::log_softmax, {x}, {dim});
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return kiln::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return kiln::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return kiln::argmin(*this, dim, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return kiln::softmax(*this, dim); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const {
  return kiln::max(*this, dim, keepdim);
}
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const {
  return kiln::min(*this, dim, keepdim);
}
ValuesIndices Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return kiln::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return kiln::argsort(*this, dim, descending, stable);
}
ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return kiln::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::log_softmax(int64_t dim) const { return kiln::log_softmax(*this, dim); }

}  // namespace kiln
