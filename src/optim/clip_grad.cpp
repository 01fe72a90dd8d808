// Gradient clipping by total norm and by value (torch.nn.utils.clip_grad_*).
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/optim.h"

namespace kiln::optim {
namespace {

std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  KILN_CHECK(max_norm >= 0, ValueError, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = kFloat32});
  NoGradGuard no_grad;
  // The norm of the per-tensor norms is the norm of all elements together,
  // for every p and infinity. Each norm in its gradient's dtype, the total
  // in theirs promoted, on the first gradient's device, as PyTorch.
  std::vector<Tensor> norms;
  norms.reserve(grads.size());
  const Device device = grads.front().device();
  DType dtype = grads.front().dtype();
  for (const Tensor& g : grads) {
    norms.push_back(norm(g, norm_type).to(device));
    dtype = promote_types(dtype, g.dtype());
  }
  for (Tensor& n : norms) n = n.to(dtype);
  const Tensor total = norm(stack(norms), norm_type);
  if (error_if_nonfinite) {  // the one case that reads the total on the host
    const double value = total.item<double>();
    if (!std::isfinite(value)) {
      throw ValueError(detail::str_cat("clip_grad_norm_: the total norm of order ", norm_type,
                                       " of the gradients is ", value,
                                       ", so they cannot be clipped; pass error_if_nonfinite = "
                                       "false to clip anyway"));
    }
  }
  // Every gradient times min(coef, 1), on its device, with no branch on the
  // total: no host read, so a compiled training step stays one graph. The
  // coefficient rounds as PyTorch's `max_norm / (total + 1e-6)` (a number
  // over a tensor is its reciprocal times the number there), and the clamp
  // keeps a NaN one.
  const Tensor coef = clamp(reciprocal(total + 1e-6) * max_norm, std::nullopt, 1.0);
  for (Tensor& g : grads) g.mul_(coef.to(g.device()));
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, ValueError, "clip_grad_value_: clip_value must be >= 0, got ",
             clip_value);
  NoGradGuard no_grad;
  for (Tensor& g : grads_of(params)) g.clamp_(-clip_value, clip_value);
}

}  // namespace kiln::optim
