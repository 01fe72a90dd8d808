// Gradient clipping by total norm and by value (torch.nn.utils.clip_grad_*).
#include <cmath>

#include "kiln/autograd.h"
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

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  KILN_CHECK(max_norm >= 0, ValueError, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return 0.0;
  NoGradGuard no_grad;
  // The norm of the per-tensor norms is the norm of all elements together, for
  // every p and infinity; one host read at the end.
  std::vector<Tensor> norms;
  norms.reserve(grads.size());
  const Device device = grads.front().device();
  for (const Tensor& g : grads) norms.push_back(norm(g, norm_type).to(kFloat64).to(device));
  const double total = norm(stack(norms), norm_type).item<double>();
  if (error_if_nonfinite && !std::isfinite(total)) {
    throw ValueError(detail::str_cat("clip_grad_norm_: the total norm of order ", norm_type,
                                     " of the gradients is ", total,
                                     ", so they cannot be clipped; pass error_if_nonfinite = "
                                     "false to clip anyway"));
  }
  const double coef = max_norm / (total + 1e-6);
  // As PyTorch, whose clamp(coef, max=1) keeps a NaN coefficient and scales by it.
  if (!(coef >= 1.0)) {
    for (Tensor& g : grads) g.mul_(coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, ValueError, "clip_grad_value_: clip_value must be >= 0, got ",
             clip_value);
  NoGradGuard no_grad;
  for (Tensor& g : grads_of(params)) g.clamp_(-clip_value, clip_value);
}

}  // namespace kiln::optim
