// Backward rules of the matrix products. Batch broadcasting is undone by the
// engine (sum_to).
#include "autograd/rules.h"
#include "autograd/rules/common.h"

namespace kiln::autograd {
namespace {

Tensor mT(const Tensor& t) { return t.transpose(-1, -2); }

}  // namespace

// matmul promotes 1-D operands to matrices and drops the added dim again.
TensorList grad_matmul(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  TensorList out(2);
  if (a.dim() == 1 && b.dim() == 1) {
    if (ctx.needs_grad(0)) out[0] = g[0] * b;
    if (ctx.needs_grad(1)) out[1] = g[0] * a;
    return out;
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  Tensor g2 = g[0];
  if (a.dim() == 1) g2 = g2.unsqueeze(-2);
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  if (ctx.needs_grad(0)) {
    Tensor ga = matmul(g2, mT(b2));
    out[0] = a.dim() == 1 ? ga.squeeze(-2) : ga;
  }
  if (ctx.needs_grad(1)) {
    Tensor gb = matmul(mT(a2), g2);
    out[1] = b.dim() == 1 ? gb.squeeze(-1) : gb;
  }
  return out;
}

TensorList grad_bmm(const BackwardCtx& ctx, const TensorList& g) {
  return {ctx.needs_grad(0) ? bmm(g[0], mT(ctx.input(1))) : Tensor(),
          ctx.needs_grad(1) ? bmm(mT(ctx.input(0)), g[0]) : Tensor()};
}

// addmm: beta * self + alpha * mat1 @ mat2.
TensorList grad_addmm(const BackwardCtx& ctx, const TensorList& g) {
  const double beta = ctx.attrs().scalar(0).to<double>();
  const double alpha = ctx.attrs().scalar(1).to<double>();
  TensorList out(3);
  if (ctx.needs_grad(0)) out[0] = beta == 1 ? g[0] : g[0] * beta;
  Tensor ga = alpha == 1 ? g[0] : g[0] * alpha;
  if (ctx.needs_grad(1)) out[1] = matmul(ga, mT(ctx.input(2)));
  if (ctx.needs_grad(2)) out[2] = matmul(mT(ctx.input(1)), ga);
  return out;
}

// linear: input @ weight^T + bias over any leading dims.
TensorList grad_linear(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  TensorList out(3);
  if (ctx.needs_grad(0)) out[0] = matmul(g[0], w);
  const int64_t out_features = w.size(0);
  Tensor g2 = g[0].reshape({-1, out_features});
  if (ctx.needs_grad(1)) out[1] = matmul(mT(g2), x.reshape({-1, w.size(1)}));
  if (ctx.needs_grad(2)) out[2] = sum(g2, {0});
  return out;
}

}  // namespace kiln::autograd
