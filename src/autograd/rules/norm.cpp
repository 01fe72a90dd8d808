// Backward rules of batch, layer and group normalization, written from the
// normalized input: with xhat = (x - mean) * invstd over a group of n values and
// gy the gradient reaching xhat,
//   dx = invstd * (gy - mean(gy) - xhat * mean(gy * xhat)).
#include "autograd/rules.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {
namespace {

// Half-precision inputs are differentiated in float32, like their forward kernels.
Tensor upcast(const Tensor& t) {
  return t.defined() && (t.dtype() == kFloat16 || t.dtype() == kBFloat16) ? t.to(kFloat32) : t;
}

// A per-channel vector shaped to broadcast against [N, C, ...].
Tensor per_channel(const Tensor& v, int64_t ndim) {
  Shape s(static_cast<size_t>(ndim), 1);
  s[1] = v.numel();
  return v.reshape(s);
}

Shape all_but_channel(int64_t ndim) {
  Shape dims;
  for (int64_t d = 0; d < ndim; ++d)
    if (d != 1) dims.push_back(d);
  return dims;
}

Tensor normalized_grad(const Tensor& gy, const Tensor& xhat, const Tensor& invstd,
                       const Shape& dims) {
  return invstd * (gy - mean(gy, dims, true) - xhat * mean(gy * xhat, dims, true));
}

}  // namespace

// batch_norm(input, weight?, bias?, running_mean?, running_var?; training, eps)
//   -> (y, mean, variance): the batch's statistics in training, copies of the
//   running ones in evaluation, which then are differentiable inputs too.
TensorList grad_batch_norm(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor x = upcast(ctx.input(0));
  const Tensor& w = ctx.input(1);
  const bool training = ctx.attrs().b(0);
  const double eps = ctx.attrs().f(1);
  const int64_t nd = x.dim();
  const Shape dims = all_but_channel(nd);
  const double n = static_cast<double>(x.numel() / std::max<int64_t>(x.size(1), 1));
  const Tensor mean_c = per_channel(ctx.result(1), nd);
  const Tensor var_c = per_channel(ctx.result(2), nd);
  const Tensor invstd = rsqrt(var_c + eps);
  const Tensor centered = x - mean_c;
  const Tensor xhat = centered * invstd;
  TensorList out(5);
  Tensor gx;
  if (g[0].defined()) {
    const Tensor gy = upcast(g[0]);
    const Tensor gxhat = w.defined() ? gy * per_channel(upcast(w), nd) : gy;
    if (ctx.needs_grad(0)) {
      gx = training ? normalized_grad(gxhat, xhat, invstd, dims) : gxhat * invstd;
    }
    if (ctx.needs_grad(1)) out[1] = sum(gy * xhat, dims);
    if (ctx.needs_grad(2)) out[2] = sum(gy, dims);
    if (!training && ctx.needs_grad(3)) out[3] = -sum(gxhat * invstd, dims);
    if (!training && ctx.needs_grad(4)) out[4] = sum(gxhat * xhat, dims) * -0.5 / (ctx.result(2) + eps);
  }
  if (training && ctx.needs_grad(0)) {
    // The batch statistics are outputs too.
    if (g[1].defined()) gx = (gx.defined() ? gx : zeros_like(x)) + per_channel(g[1], nd) / n;
    if (g[2].defined()) {
      Tensor d = per_channel(g[2], nd) * centered * (2 / n);
      gx = gx.defined() ? gx + d : d;
    }
  }
  if (!training) {
    if (g[1].defined() && ctx.needs_grad(3)) out[3] = out[3].defined() ? out[3] + g[1] : g[1];
    if (g[2].defined() && ctx.needs_grad(4)) out[4] = out[4].defined() ? out[4] + g[2] : g[2];
  }
  out[0] = gx;
  return out;
}

// layer_norm(input, weight?, bias?; normalized_shape, eps) over the last dims.
// The weight and bias gradients keep the input's shape; the engine sums them.
TensorList grad_layer_norm(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor x = upcast(ctx.input(0));
  const Tensor& w = ctx.input(1);
  const auto k = static_cast<int64_t>(ctx.attrs().ints(0).size());
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  const double eps = ctx.attrs().f(1);
  const Tensor mu = mean(x, dims, true);
  const Tensor invstd = rsqrt(var(x, dims, 0, true) + eps);
  const Tensor xhat = (x - mu) * invstd;
  const Tensor gy = upcast(g[0]);
  TensorList out(3);
  if (ctx.needs_grad(0)) {
    out[0] = normalized_grad(w.defined() ? gy * upcast(w) : gy, xhat, invstd, dims);
  }
  if (ctx.needs_grad(1)) out[1] = gy * xhat;
  if (ctx.needs_grad(2)) out[2] = gy;
  return out;
}

// group_norm(input, weight?, bias?; num_groups, eps): statistics per (sample, group).
TensorList grad_group_norm(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor x = upcast(ctx.input(0));
  const Tensor& w = ctx.input(1);
  const int64_t groups = ctx.attrs().i(0);
  const double eps = ctx.attrs().f(1);
  const int64_t nd = x.dim();
  const Shape grouped = {x.size(0), groups, x.size(0) == 0 ? 0 : x.numel() / x.size(0) / groups};
  const Tensor xr = x.reshape(grouped);
  const Tensor mu = mean(xr, {2}, true);
  const Tensor invstd = rsqrt(var(xr, {2}, 0, true) + eps);
  const Tensor xhat_r = (xr - mu) * invstd;
  const Tensor xhat = xhat_r.reshape(x.sizes());
  const Tensor gy = upcast(g[0]);
  TensorList out(3);
  if (ctx.needs_grad(0)) {
    const Tensor gxhat = w.defined() ? gy * per_channel(upcast(w), nd) : gy;
    out[0] = normalized_grad(gxhat.reshape(grouped), xhat_r, invstd, {2}).reshape(x.sizes());
  }
  const Shape dims = all_but_channel(nd);
  if (ctx.needs_grad(1)) out[1] = sum(gy * xhat, dims);
  if (ctx.needs_grad(2)) out[2] = sum(gy, dims);
  return out;
}

}  // namespace kiln::autograd
