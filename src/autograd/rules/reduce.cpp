// Backward rules of the reductions, cumsum and softmax. Reduction attributes
// arrive canonical: dims wrapped and sorted (all dims when none were given).
#include <cmath>

#include "autograd/rules.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {
namespace {

// g broadcast back over the reduced dims (a view, not a copy).
Tensor expand_reduced(const BackwardCtx& ctx, const Tensor& g, const Shape& dims, bool keepdim) {
  const Shape& sizes = ctx.input_sizes(0);
  return unsqueeze_reduced(g, dims, static_cast<int64_t>(sizes.size()), keepdim).expand(sizes);
}

// r (a reduction's result) with the reduced dims back as size 1.
Tensor keep_dims(const BackwardCtx& ctx, const Tensor& r, const Shape& dims, bool keepdim) {
  return unsqueeze_reduced(r, dims, static_cast<int64_t>(ctx.input_sizes(0).size()), keepdim);
}

int64_t reduced_count(const BackwardCtx& ctx, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= ctx.input_sizes(0)[d];
  return n;
}

// The gradient of amax/amin: shared evenly by the elements equal to the extremum.
TensorList extremum_grad(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const bool keepdim = ctx.attrs().b(1);
  Tensor hit = ctx.input(0) == keep_dims(ctx, ctx.result(), dims, keepdim);
  Tensor share = expand_reduced(ctx, g[0], dims, keepdim) * hit;
  return {share / sum(hit, dims, true)};
}

// The gradient of max_dim/min_dim: to the index each value came from.
TensorList indexed_extremum_grad(const BackwardCtx& ctx, const TensorList& g) {
  if (!g[0].defined()) return {Tensor()};
  const Shape& sizes = ctx.input_sizes(0);
  if (sizes.empty()) return {g[0]};
  const int64_t dim = ctx.attrs().i(0);
  const bool keepdim = ctx.attrs().b(1);
  Tensor index = keepdim ? ctx.result(1) : ctx.result(1).unsqueeze(dim);
  Tensor src = keepdim ? g[0] : g[0].unsqueeze(dim);
  return {scatter(zeros(sizes, {.dtype = g[0].dtype(), .device = g[0].device()}), dim, index, src)};
}

// The gradient of sort and topk: each value's to the index it came from.
TensorList ordered_grad(const BackwardCtx& ctx, const TensorList& g, int64_t dim) {
  if (!g[0].defined()) return {Tensor()};
  const Shape& sizes = ctx.input_sizes(0);
  if (sizes.empty()) return {g[0].reshape({})};
  return {scatter(zeros(sizes, {.dtype = g[0].dtype(), .device = g[0].device()}), dim,
                  ctx.result(1), g[0])};
}

}  // namespace

TensorList grad_sort(const BackwardCtx& ctx, const TensorList& g) {
  return ordered_grad(ctx, g, ctx.attrs().i(0));
}
TensorList grad_topk(const BackwardCtx& ctx, const TensorList& g) {
  return ordered_grad(ctx, g, ctx.attrs().i(1));
}

TensorList grad_sum(const BackwardCtx& ctx, const TensorList& g) {
  return {expand_reduced(ctx, g[0], ctx.attrs().ints(0), ctx.attrs().b(1))};
}

TensorList grad_mean(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const double n = static_cast<double>(reduced_count(ctx, dims));
  return {expand_reduced(ctx, g[0], dims, ctx.attrs().b(1)) / n};
}

// Each element's gradient is the product of the others. Zeros are handled
// without dividing by them: one zero gets the product of the rest, two or more
// zero everything.
TensorList grad_prod(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const bool keepdim = ctx.attrs().b(1);
  const Tensor& x = ctx.input(0);
  Tensor gx = expand_reduced(ctx, g[0], dims, keepdim);
  Tensor is_zero = x == 0;
  Tensor zeros_in = sum(is_zero, dims, true);
  Tensor safe = where(is_zero, 1.0, x);
  Tensor others_nonzero = prod(safe, dims, true);
  Tensor r = keep_dims(ctx, ctx.result(), dims, keepdim);
  Tensor no_zero = r / safe;
  Tensor one_zero = where(is_zero, others_nonzero, 0.0);
  Tensor others = where(zeros_in == 0, no_zero, where(zeros_in == 1, one_zero, 0.0));
  return {gx * others.to(gx.dtype())};
}

TensorList grad_amax(const BackwardCtx& ctx, const TensorList& g) { return extremum_grad(ctx, g); }
TensorList grad_amin(const BackwardCtx& ctx, const TensorList& g) { return extremum_grad(ctx, g); }
TensorList grad_max_dim(const BackwardCtx& ctx, const TensorList& g) {
  return indexed_extremum_grad(ctx, g);
}
TensorList grad_min_dim(const BackwardCtx& ctx, const TensorList& g) {
  return indexed_extremum_grad(ctx, g);
}

// var: dims, correction, keepdim. d var / dx = 2 (x - mean) / (N - correction).
TensorList grad_var(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const double n = static_cast<double>(reduced_count(ctx, dims)) - ctx.attrs().f(1);
  const Tensor& x = ctx.input(0);
  Tensor centered = x - mean(x, dims, true);
  return {expand_reduced(ctx, g[0], dims, ctx.attrs().b(2)) * centered * (2.0 / n)};
}

TensorList grad_std(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const bool keepdim = ctx.attrs().b(2);
  const double n = static_cast<double>(reduced_count(ctx, dims)) - ctx.attrs().f(1);
  const Tensor& x = ctx.input(0);
  Tensor centered = x - mean(x, dims, true);
  Tensor r = keep_dims(ctx, ctx.result(), dims, keepdim);
  return {expand_reduced(ctx, g[0], dims, keepdim) * centered / (r * n)};
}

// norm: p, dims, keepdim.
TensorList grad_norm(const BackwardCtx& ctx, const TensorList& g) {
  const double p = ctx.attrs().f(0);
  const Shape& dims = ctx.attrs().ints(1);
  const bool keepdim = ctx.attrs().b(2);
  const Tensor& x = ctx.input(0);
  Tensor gx = expand_reduced(ctx, g[0], dims, keepdim);
  Tensor r = keep_dims(ctx, ctx.result(), dims, keepdim);
  if (p == 0) return {zeros_like(x)};
  if (p == 1) return {gx * sign(x)};
  if (std::isinf(p)) {
    Tensor hit = abs(x) == r;
    return {gx * sign(x) * hit / sum(hit, dims, true)};
  }
  if (p == 2) return {where(r == 0, 0.0, gx * x / r)};
  // x |x|^(p-2) / r^(p-1), zero where the norm is zero.
  Tensor scale = x * pow(abs(x), p - 2) / pow(r, p - 1);
  return {where(r == 0, 0.0, gx * scale)};
}

TensorList grad_logsumexp(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  const bool keepdim = ctx.attrs().b(1);
  Tensor r = keep_dims(ctx, ctx.result(), dims, keepdim);
  return {expand_reduced(ctx, g[0], dims, keepdim) * exp(ctx.input(0) - r)};
}

// Each input element feeds every later output: a reversed cumulative sum.
TensorList grad_cumsum(const BackwardCtx& ctx, const TensorList& g) {
  if (ctx.input_sizes(0).empty()) return {g[0]};
  const int64_t dim = ctx.attrs().i(0);
  return {flip(cumsum(flip(g[0], {dim}), dim), {dim})};
}

TensorList grad_softmax(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  const Tensor& y = ctx.result();
  Tensor gy = g[0] * y;
  return {gy - y * sum(gy, {dim}, true)};
}

TensorList grad_log_softmax(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  return {g[0] - exp(ctx.result()) * sum(g[0], {dim}, true)};
}

}  // namespace kiln::autograd
