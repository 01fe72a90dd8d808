// Backward rules of the pointwise ops. Broadcasting is undone by the engine
// (sum_to), so these return gradients of the output's shape.
#include <cmath>
#include <numbers>

#include "autograd/rules.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {
namespace {

// The gradient of an op whose derivative is zero almost everywhere.
TensorList zero_grad_of(const BackwardCtx& ctx, const TensorList& grads) {
  TensorList out(ctx.num_inputs());
  if (ctx.needs_grad(0)) out[0] = zeros_like(grads[0]);
  return out;
}

// The gradient of an input scaled by a Scalar attribute (alpha of add/sub).
Tensor scaled(const Tensor& g, const Scalar& alpha, double sign) {
  const double a = alpha.to<double>() * sign;
  return a == 1 ? g : g * a;
}

}  // namespace

TensorList grad_neg(const BackwardCtx&, const TensorList& g) { return {-g[0]}; }
TensorList grad_abs(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] * sign(ctx.input(0))};
}
TensorList grad_exp(const BackwardCtx& ctx, const TensorList& g) { return {g[0] * ctx.result()}; }
TensorList grad_log(const BackwardCtx& ctx, const TensorList& g) { return {g[0] / ctx.input(0)}; }
TensorList grad_log1p(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] / (ctx.input(0) + 1)};
}
TensorList grad_expm1(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] * (ctx.result() + 1)};
}
TensorList grad_sqrt(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] / (ctx.result() * 2)};
}
TensorList grad_rsqrt(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& r = ctx.result();
  return {g[0] * (r * r * r) * -0.5};
}
TensorList grad_reciprocal(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& r = ctx.result();
  return {-(g[0] * r * r)};
}
TensorList grad_square(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] * ctx.input(0) * 2};
}
TensorList grad_sin(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0] * cos(ctx.input(0))};
}
TensorList grad_cos(const BackwardCtx& ctx, const TensorList& g) {
  return {-(g[0] * sin(ctx.input(0)))};
}
TensorList grad_tanh(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& r = ctx.result();
  return {g[0] * (1 - r * r)};
}
TensorList grad_sigmoid(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& r = ctx.result();
  return {g[0] * r * (1 - r)};
}
TensorList grad_relu(const BackwardCtx& ctx, const TensorList& g) {
  return {where(ctx.result() > 0, g[0], 0.0)};
}

TensorList grad_gelu(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  if (ctx.attrs().str(0) == "tanh") {
    const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
    Tensor t = tanh((x + x * x * x * c) * k);
    Tensor dt = (1 - t * t) * ((x * x * (3 * c) + 1) * k);
    return {g[0] * ((t + 1) * 0.5 + x * dt * 0.5)};
  }
  Tensor cdf = (erf(x * std::numbers::sqrt2 * 0.5) + 1) * 0.5;
  Tensor pdf = exp(x * x * -0.5) * (1 / std::sqrt(2 * std::numbers::pi));
  return {g[0] * (cdf + x * pdf)};
}

TensorList grad_silu(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  Tensor s = sigmoid(x);
  return {g[0] * s * (x * (1 - s) + 1)};
}

TensorList grad_leaky_relu(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {where(x > 0, g[0], g[0] * ctx.attrs().f(0))};
}

TensorList grad_hardtanh(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {where(logical_and(x > ctx.attrs().f(0), x < ctx.attrs().f(1)), g[0], 0.0)};
}

TensorList grad_elu(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {where(x > 0, g[0], g[0] * exp(x) * ctx.attrs().f(0))};
}

TensorList grad_softplus(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor bx = x * ctx.attrs().f(0);
  return {where(bx > ctx.attrs().f(1), g[0], g[0] * sigmoid(bx))};
}

TensorList grad_hardsigmoid(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {where(logical_and(x > -3.0, x < 3.0), g[0] * (1.0 / 6), 0.0)};
}

TensorList grad_hardswish(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {where(x < -3.0, 0.0, where(x < 3.0, g[0] * (x * 2.0 + 3.0) * (1.0 / 6), g[0]))};
}

TensorList grad_mish(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor t = tanh(log1p(exp(x)));
  return {g[0] * (t + x * sigmoid(x) * (1 - t * t))};
}

TensorList grad_erf(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  return {g[0] * exp(-(x * x)) * (2 / std::sqrt(std::numbers::pi))};
}

TensorList grad_sign(const BackwardCtx& ctx, const TensorList& g) { return zero_grad_of(ctx, g); }
TensorList grad_floor(const BackwardCtx& ctx, const TensorList& g) { return zero_grad_of(ctx, g); }
TensorList grad_ceil(const BackwardCtx& ctx, const TensorList& g) { return zero_grad_of(ctx, g); }
TensorList grad_round(const BackwardCtx& ctx, const TensorList& g) { return zero_grad_of(ctx, g); }

TensorList grad_add(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0], ctx.needs_grad(1) ? scaled(g[0], ctx.attrs().scalar(0), 1) : Tensor()};
}
TensorList grad_sub(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0], ctx.needs_grad(1) ? scaled(g[0], ctx.attrs().scalar(0), -1) : Tensor()};
}
TensorList grad_mul(const BackwardCtx& ctx, const TensorList& g) {
  return {ctx.needs_grad(0) ? g[0] * ctx.input(1) : Tensor(),
          ctx.needs_grad(1) ? g[0] * ctx.input(0) : Tensor()};
}
TensorList grad_div(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  return {ctx.needs_grad(0) ? g[0] / y : Tensor(),
          ctx.needs_grad(1) ? -(g[0] * x / (y * y)) : Tensor()};
}

TensorList grad_pow(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& e = ctx.input(1);
  TensorList out(2);
  if (ctx.needs_grad(0)) {
    // e * x^(e-1), taken as 0 where e == 0 (x^-1 would be inf at x == 0).
    out[0] = where(e == 0, 0.0, g[0] * e * pow(x, e - 1));
  }
  if (ctx.needs_grad(1)) {
    // r * log(x); the limit 0 where x == 0 and e >= 0.
    out[1] = where(logical_and(x == 0, e >= 0), 0.0, g[0] * ctx.result() * log(x));
  }
  return out;
}

TensorList grad_maximum(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  Tensor half = where(x == y, g[0] * 0.5, 0.0);  // ties share the gradient
  return {ctx.needs_grad(0) ? where(x > y, g[0], 0.0) + half : Tensor(),
          ctx.needs_grad(1) ? where(y > x, g[0], 0.0) + half : Tensor()};
}
TensorList grad_minimum(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  Tensor half = where(x == y, g[0] * 0.5, 0.0);
  return {ctx.needs_grad(0) ? where(x < y, g[0], 0.0) + half : Tensor(),
          ctx.needs_grad(1) ? where(y < x, g[0], 0.0) + half : Tensor()};
}
TensorList grad_remainder(const BackwardCtx& ctx, const TensorList& g) {
  return {g[0], ctx.needs_grad(1) ? -(g[0] * floor(ctx.input(0) / ctx.input(1))) : Tensor()};
}

TensorList grad_where(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& c = ctx.input(0);
  return {Tensor(), ctx.needs_grad(1) ? where(c, g[0], 0.0) : Tensor(),
          ctx.needs_grad(2) ? where(c, 0.0, g[0]) : Tensor()};
}

TensorList grad_clamp(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const auto& a = ctx.attrs();
  Tensor keep;
  if (a.has(0)) keep = x >= a.scalar(0);
  if (a.has(1)) keep = keep.defined() ? logical_and(keep, x <= a.scalar(1)) : x <= a.scalar(1);
  return {keep.defined() ? where(keep, g[0], 0.0) : g[0]};
}

TensorList grad_masked_fill(const BackwardCtx& ctx, const TensorList& g) {
  return {masked_fill(g[0], ctx.input(1), 0.0), Tensor()};
}
TensorList grad_copy(const BackwardCtx&, const TensorList& g) { return {g[0]}; }
// The gradient goes back to the input's device.
TensorList grad_to_device(const BackwardCtx& ctx, const TensorList& g) { return {g[0].to(ctx.info(0).device)}; }
TensorList grad_fill(const BackwardCtx&, const TensorList&) { return {Tensor()}; }

}  // namespace kiln::autograd
