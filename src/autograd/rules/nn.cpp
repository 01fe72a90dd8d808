// Backward rules of dropout, attention, the LSTM cell and the negative
// log-likelihood loss.
#include <limits>

#include "autograd/rules.h"
#include "autograd/rules/common.h"
#include "ops/dispatch.h"

namespace kiln::autograd {

// The same Philox draws applied to ones give the forward's scaled keep-mask.
TensorList grad_dropout(const BackwardCtx& ctx, const TensorList& g) {
  const auto& info = ctx.info(0);
  Tensor mask = ops::dispatch1(ops::OpId::dropout,
                               {ones(info.sizes, {.dtype = info.dtype, .device = info.device})},
                               ctx.attrs());
  return {g[0] * mask};
}

// Recomputes the attention probabilities, then differentiates
// out = softmax(q k^T * scale + mask) v.
TensorList grad_scaled_dot_product_attention(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const Tensor& mask = ctx.input(3);
  const double scale = ctx.attrs().f(1);
  Tensor scores = matmul(q, k.transpose(-1, -2)) * scale;
  if (mask.defined()) {
    scores = mask.dtype() == kBool
                 ? masked_fill(scores, logical_not(mask), -std::numeric_limits<double>::infinity())
                 : scores + mask;
  }
  if (ctx.attrs().b(0)) {
    const int64_t l = q.size(-2), s = k.size(-2);
    Tensor above = triu(ones({l, s}, {.dtype = kBool, .device = q.device()}), 1);
    scores = masked_fill(scores, above, -std::numeric_limits<double>::infinity());
  }
  Tensor p = softmax(scores, -1);
  p = masked_fill(p, isnan(p), 0.0);  // fully masked rows attend to nothing
  TensorList out(4);
  if (ctx.needs_grad(2)) out[2] = matmul(p.transpose(-1, -2), g[0]);
  Tensor gp = matmul(g[0], v.transpose(-1, -2));
  Tensor gs = p * (gp - sum(gp * p, {-1}, true));
  if (ctx.needs_grad(0)) out[0] = matmul(gs, k) * scale;
  if (ctx.needs_grad(1)) out[1] = matmul(gs.transpose(-1, -2), q) * scale;
  if (ctx.needs_grad(3)) out[3] = gs;
  return out;
}

// lstm_cell: the gates recomputed from the two projections; with cy saved,
// the gradient reaching cy (its own plus hy's through o * tanh(cy)) flows to
// the gates i, f, g and to cx, hy's alone to o. Both projections take the
// gates' gradient.
TensorList grad_lstm_cell(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& cx = ctx.input(2);
  const auto gates = chunk(ctx.input(0) + ctx.input(1), 4, -1);
  const Tensor i = sigmoid(gates[0]), f = sigmoid(gates[1]), cell = tanh(gates[2]),
               o = sigmoid(gates[3]);
  const Tensor tanh_cy = tanh(ctx.result(1));
  Tensor g_cy = g[1];
  Tensor g_o = zeros_like(o);
  if (g[0].defined()) {
    const Tensor through_h = g[0] * o * (1 - tanh_cy * tanh_cy);
    g_cy = g_cy.defined() ? g_cy + through_h : through_h;
    g_o = g[0] * tanh_cy * o * (1 - o);
  }
  TensorList out(3);
  if (!g_cy.defined()) g_cy = zeros_like(cx);
  const Tensor g_gates = cat({g_cy * cell * i * (1 - i), g_cy * cx * f * (1 - f),
                              g_cy * i * (1 - cell * cell), g_o},
                             -1);
  if (ctx.needs_grad(0)) out[0] = g_gates;
  if (ctx.needs_grad(1)) out[1] = g_gates;
  if (ctx.needs_grad(2)) out[2] = g_cy * f;
  return out;
}

// nll_loss(self, target, weight?; ignore_index, reduction): each counted sample
// sends -weight[target] (scaled by the reduction) to its target class; the
// weight of a class gets the (negated) inputs picked at that class.
TensorList grad_nll_loss(const BackwardCtx& ctx, const TensorList& g) {
  const Tensor& x = ctx.input(0);
  const Tensor& target = ctx.input(1);
  const Tensor& weight = ctx.input(2);
  const int64_t ignore = ctx.attrs().i(0);
  const std::string& reduction = ctx.attrs().str(1);
  const int64_t class_dim = x.dim() == 1 ? 0 : 1;
  Tensor valid = target != ignore;
  Tensor safe_target = where(valid, target, 0);
  const TensorOptions options{.dtype = x.dtype(), .device = x.device()};
  Tensor w = weight.defined() ? index_select(weight, 0, safe_target.flatten()).reshape(target.sizes())
                              : ones(target.sizes(), options);
  w = w * valid;
  const bool mean_reduction = reduction == "mean";
  Tensor total = mean_reduction ? sum(w) : Tensor();
  Tensor scale = mean_reduction ? g[0] / total : g[0];
  TensorList out(3);
  if (ctx.needs_grad(0)) {
    Tensor contrib = (-(w * scale)).to(x.dtype());
    out[0] = scatter(zeros(x.sizes(), options), class_dim, safe_target.unsqueeze(class_dim),
                     contrib.unsqueeze(class_dim));
  }
  if (ctx.needs_grad(2)) {
    Tensor picked = gather(x, class_dim, safe_target.unsqueeze(class_dim)).squeeze(class_dim);
    // mean: d/dw_c of -sum(w_t p) / sum(w_t) is (-p - loss) / total per sample of class c.
    Tensor per_sample = mean_reduction ? (-picked - ctx.result()) * scale : -picked * scale;
    per_sample = (per_sample * valid).to(weight.dtype());
    out[2] = scatter_add(zeros_like(weight), 0, safe_target.flatten(), per_sample.flatten());
  }
  return out;
}

}  // namespace kiln::autograd
