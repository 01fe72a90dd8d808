// Backward rules of convolution, pooling, resampling, padding and the indexing
// ops. The adjoints come from ops made for them (src/ops/api/backward_ops.h), so
// that each rule and its own derivative stay one op call.
#include "autograd/rules.h"
#include "autograd/rules/common.h"
#include "ops/api/backward_ops.h"
#include "ops/dispatch.h"

namespace kiln::autograd {
namespace {

using ops::OpId;

struct ConvAttrs {
  Shape stride, padding, dilation;
  int64_t groups;
};

// conv1d/conv2d and the two conv gradient ops keep stride, padding, dilation and
// groups as their last four attributes.
ConvAttrs conv_attrs(const ops::Attrs& a, size_t first) {
  return {a.ints(first), a.ints(first + 1), a.ints(first + 2), a.i(first + 3)};
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const ConvAttrs& c) {
  const OpId op = w.dim() == 3 ? OpId::conv1d : OpId::conv2d;
  const Tensor inputs[] = {x, w, Tensor()};
  return ops::dispatch(op, inputs, {c.stride, c.padding, c.dilation, c.groups})[0];
}

Tensor conv_input_grad(const Tensor& g, const Tensor& w, const Shape& x_sizes, const ConvAttrs& c) {
  return ops::conv_backward_input(g, w, x_sizes, c.stride, c.padding, c.dilation, c.groups);
}

Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_sizes, const ConvAttrs& c) {
  return ops::conv_backward_weight(g, x, w_sizes, c.stride, c.padding, c.dilation, c.groups);
}

Tensor zeros_as(const BackwardCtx& ctx, size_t i) {
  const auto& info = ctx.info(i);
  return zeros(info.sizes, {.dtype = info.dtype, .device = info.device});
}

TensorList conv_grad(const BackwardCtx& ctx, const TensorList& g) {
  const ConvAttrs c = conv_attrs(ctx.attrs(), 0);
  TensorList out(3);
  if (ctx.needs_grad(0)) out[0] = conv_input_grad(g[0], ctx.input(1), ctx.input_sizes(0), c);
  if (ctx.needs_grad(1)) out[1] = conv_weight_grad(g[0], ctx.input(0), ctx.input_sizes(1), c);
  if (ctx.needs_grad(2)) {
    // Every dim but the channels (an unbatched input has no batch dim).
    const int64_t channel_dim = g[0].dim() - static_cast<int64_t>(ctx.input_sizes(1).size()) + 1;
    Shape dims;
    for (int64_t d = 0; d < g[0].dim(); ++d)
      if (d != channel_dim) dims.push_back(d);
    out[2] = sum(g[0], dims);
  }
  return out;
}

// The gradient of picking src[index] along dim (gather, index_select, ...):
// every picked value's gradient added back at the index it came from.
Tensor add_at(const BackwardCtx& ctx, int64_t dim, const Tensor& index, const Tensor& g) {
  return scatter_add(zeros_as(ctx, 0), dim, index, g);
}

}  // namespace

TensorList grad_conv1d(const BackwardCtx& ctx, const TensorList& g) { return conv_grad(ctx, g); }
TensorList grad_conv2d(const BackwardCtx& ctx, const TensorList& g) { return conv_grad(ctx, g); }

// conv_backward_input(grad_output, weight) is linear in each: its own gradient is
// the forward convolution for grad_output and the weight gradient for weight.
TensorList grad_conv_backward_input(const BackwardCtx& ctx, const TensorList& g) {
  const ConvAttrs c = conv_attrs(ctx.attrs(), 1);
  return {ctx.needs_grad(0) ? conv_forward(g[0], ctx.input(1), c) : Tensor(),
          ctx.needs_grad(1) ? conv_weight_grad(ctx.input(0), g[0], ctx.input_sizes(1), c)
                            : Tensor()};
}

TensorList grad_conv_backward_weight(const BackwardCtx& ctx, const TensorList& g) {
  const ConvAttrs c = conv_attrs(ctx.attrs(), 1);
  return {ctx.needs_grad(0) ? conv_forward(ctx.input(1), g[0], c) : Tensor(),
          ctx.needs_grad(1) ? conv_input_grad(ctx.input(0), g[0], ctx.input_sizes(1), c)
                            : Tensor()};
}

// max_pool2d recomputes where the maxima were; the public function records
// max_pool2d_with_indices instead when it will be differentiated.
TensorList grad_max_pool2d(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor inputs[] = {ctx.input(0)};
  Tensor indices = ops::dispatch(OpId::max_pool2d_with_indices, inputs, ctx.attrs())[1];
  Tensor grad = zeros_as(ctx, 0).flatten(-2);
  return {scatter_add(grad, -1, indices.flatten(-2), g[0].flatten(-2)).reshape(ctx.input_sizes(0))};
}

TensorList grad_max_pool2d_with_indices(const BackwardCtx& ctx, const TensorList& g) {
  if (!g[0].defined()) return {Tensor()};
  Tensor grad = zeros_as(ctx, 0).flatten(-2);
  return {scatter_add(grad, -1, ctx.result(1).flatten(-2), g[0].flatten(-2))
              .reshape(ctx.input_sizes(0))};
}

// avg_pool2d: kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override.
TensorList grad_avg_pool2d(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  std::optional<int64_t> divisor;
  if (a.has(5)) divisor = a.i(5);
  return {ops::avg_pool2d_backward(g[0], ctx.input_sizes(0), a.ints(0), a.ints(1), a.ints(2),
                                   a.b(3), a.b(4), divisor)};
}

TensorList grad_avg_pool2d_backward(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  ops::Attrs forward{a[1], a[2], a[3], a[4], a[5], a[6]};
  return {ops::dispatch1(OpId::avg_pool2d, {g[0]}, std::move(forward))};
}

TensorList grad_adaptive_avg_pool2d(const BackwardCtx& ctx, const TensorList& g) {
  return {ops::adaptive_avg_pool2d_backward(g[0], ctx.input_sizes(0))};
}

TensorList grad_adaptive_avg_pool2d_backward(const BackwardCtx& ctx, const TensorList& g) {
  const Shape& out = ctx.input_sizes(0);
  return {ops::dispatch1(OpId::adaptive_avg_pool2d, {g[0]},
                         {Shape(out.end() - 2, out.end())})};
}

// interpolate: size, mode, align_corners.
TensorList grad_interpolate(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  return {ops::interpolate_backward(g[0], ctx.input_sizes(0), a.str(1), a.b(2))};
}

TensorList grad_interpolate_backward(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  const Shape& out = ctx.input_sizes(0);
  return {ops::dispatch1(OpId::interpolate, {g[0]},
                         {Shape(out.begin() + 2, out.end()), a.str(1), a.b(2), std::monostate{}})};
}

// pad: pad, mode, value.
TensorList grad_pad(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  return {ops::pad_backward(g[0], ctx.input_sizes(0), a.ints(0), a.str(1))};
}

TensorList grad_pad_backward(const BackwardCtx& ctx, const TensorList& g) {
  const auto& a = ctx.attrs();
  return {ops::dispatch1(OpId::pad, {g[0]}, {a.ints(1), a.str(2), 0.0})};
}

// embedding(weight, indices; padding_idx?): rows picked by the indices; the
// padding row gets no gradient.
TensorList grad_embedding(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& indices = ctx.input(1);
  const int64_t width = ctx.input_sizes(0)[1];
  Tensor rows = g[0].reshape({indices.numel(), width});
  Tensor flat = indices.flatten().to(kInt64);
  if (ctx.attrs().has(0)) rows = rows * (flat != ctx.attrs().i(0)).unsqueeze(1);
  return {add_at(ctx, 0, flat.unsqueeze(1).expand({-1, width}), rows), Tensor()};
}

TensorList grad_index_select(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  if (ctx.input_sizes(0).empty()) return {g[0].reshape({}), Tensor()};
  Shape index_shape(static_cast<size_t>(g[0].dim()), 1);
  index_shape[dim] = g[0].size(dim);
  Tensor index = ctx.input(1).to(kInt64).reshape(index_shape).expand(g[0].sizes());
  return {add_at(ctx, dim, index, g[0]), Tensor()};
}

TensorList grad_gather(const BackwardCtx& ctx, const TensorList& g) {
  return {add_at(ctx, ctx.attrs().i(0), ctx.input(1), g[0]), Tensor()};
}

// scatter_add(self, index, src): self passes through, src's picked values add in.
TensorList grad_scatter_add(const BackwardCtx& ctx, const TensorList& g) {
  const int64_t dim = ctx.attrs().i(0);
  TensorList out(3);
  out[0] = g[0];
  if (ctx.needs_grad(2)) out[2] = pad_to(gather(g[0], dim, ctx.input(1)), ctx.input_sizes(2));
  return out;
}

}  // namespace kiln::autograd
