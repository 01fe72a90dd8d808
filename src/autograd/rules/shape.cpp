// Backward rules of the views and shape ops. View attributes arrive canonical
// (dims wrapped, slice bounds clamped).
#include <numeric>

#include "autograd/rules.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {

TensorList grad_view(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0].reshape(ctx.input_sizes(0))};
}
// The gradient takes the input's shape back through the inverse view, so
// that in a traced backward only the merged (split) dims are constants.
TensorList grad_flatten(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& sizes = ctx.input_sizes(0);
  if (sizes.empty()) return {g[0].reshape({})};
  const int64_t s = ctx.attrs().i(0), e = ctx.attrs().i(1);
  return {g[0].unflatten(s, Shape(sizes.begin() + s, sizes.begin() + e + 1))};
}
TensorList grad_unflatten(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t d = ctx.attrs().i(0);
  const int64_t parts = static_cast<int64_t>(ctx.attrs().ints(1).size());
  return {g[0].flatten(d, d + parts - 1)};
}
TensorList grad_squeeze(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0].reshape(ctx.input_sizes(0))};
}
TensorList grad_unsqueeze(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0].reshape(ctx.input_sizes(0))};
}
TensorList grad_expand(const BackwardCtx&, const TensorList& g) { return {g[0]}; }
// The inputs after the first give sizes only: no gradient.
TensorList grad_view_sized(const BackwardCtx& ctx, const TensorList& g) {
  TensorList out(ctx.num_inputs());
  out[0] = g[0].reshape(ctx.input_sizes(0));
  return out;
}
TensorList grad_expand_sized(const BackwardCtx& ctx, const TensorList& g) {
  TensorList out(ctx.num_inputs());
  out[0] = g[0];
  return out;
}

TensorList grad_permute(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& dims = ctx.attrs().ints(0);
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
  return {g[0].permute(inverse)};
}

// slice: dim, start, stop, step.
TensorList grad_slice(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  const int64_t dim = a.i(0), start = a.i(1), step = a.i(3);
  const Shape& sizes = ctx.input_sizes(0);
  if (step == 1) return {embed_along(g[0], sizes, dim, start)};
  const int64_t n = g[0].size(dim);
  Shape index_shape(g[0].dim(), 1);
  index_shape[dim] = n;
  Tensor index = arange(start, start + step * n, step, {.dtype = kInt64, .device = g[0].device()})
                     .reshape(index_shape)
                     .expand(g[0].sizes())
                     .contiguous();
  return {scatter(zeros(sizes, {.dtype = g[0].dtype(), .device = g[0].device()}), dim, index, g[0])};
}

// select: dim, index.
TensorList grad_select(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  const Shape& sizes = ctx.input_sizes(0);
  int64_t index = ctx.attrs().i(1);
  if (index < 0) index += sizes[dim];
  return {embed_along(g[0].unsqueeze(dim), sizes, dim, index)};
}

TensorList grad_cat(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  TensorList out(ctx.num_inputs());
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& sizes = ctx.input_sizes(i);
    if (sizes == Shape{0} && g[0].dim() != 1) continue;  // an empty 1-D input cat skipped
    const int64_t n = sizes[dim];
    if (ctx.needs_grad(i)) out[i] = g[0].narrow(dim, offset, n);
    offset += n;
  }
  return out;
}

TensorList grad_stack(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  TensorList out(ctx.num_inputs());
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.needs_grad(i)) out[i] = g[0].select(dim, static_cast<int64_t>(i));
  return out;
}

// scatter(self, index, src): the scattered positions came from src, the rest from self.
TensorList grad_scatter(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  const Tensor& index = ctx.input(1);
  TensorList out(3);
  if (ctx.needs_grad(0)) {
    out[0] = scatter(g[0], dim, index,
                     zeros(index.sizes(), {.dtype = g[0].dtype(), .device = g[0].device()}));
  }
  if (ctx.needs_grad(2)) {
    out[2] = pad_to(gather(g[0], dim, index), ctx.input_sizes(2));
  }
  return out;
}

// repeat: every output element is a copy of one input element; sum the copies.
TensorList grad_repeat(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& repeats = ctx.attrs().ints(0);
  const Shape& sizes = ctx.input_sizes(0);
  const size_t lead = repeats.size() - sizes.size();
  Shape split;  // [r0, s0, r1, s1, ...] with s = 1 for the leading dims
  Shape sum_dims;
  for (size_t i = 0; i < repeats.size(); ++i) {
    sum_dims.push_back(static_cast<int64_t>(split.size()));
    split.push_back(repeats[i]);
    split.push_back(i < lead ? 1 : sizes[i - lead]);
  }
  if (sum_dims.empty()) return {g[0]};
  return {sum(g[0].reshape(split), sum_dims).reshape(sizes)};
}

TensorList grad_flip(const BackwardCtx& ctx, const TensorList& g) {
  return {flip(g[0], ctx.attrs().ints(0))};
}
TensorList grad_tril(const BackwardCtx& ctx, const TensorList& g) {
  return {tril(g[0], ctx.attrs().i(0))};
}
TensorList grad_triu(const BackwardCtx& ctx, const TensorList& g) {
  return {triu(g[0], ctx.attrs().i(0))};
}

}  // namespace kiln::autograd
