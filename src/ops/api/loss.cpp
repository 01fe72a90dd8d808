// Composite losses, written with kiln ops only (no kernels of their own).
#include "kiln/ops/loss.h"

#include "kiln/ops/factory.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "ops/autocast.h"

namespace kiln::nn::functional {
namespace {

void check_reduction(const char* op, const std::string& reduction) {
  if (reduction != "none" && reduction != "mean" && reduction != "sum") {
    throw ValueError(detail::str_cat(op, ": reduction must be 'none', 'mean' or 'sum', got '",
                                     reduction, "'"));
  }
}

// The elementwise losses take input and target of one shape or shapes that broadcast.
void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  if (!input.same_sizes(target)) broadcast_shapes(input.sizes(), target.sizes(), op);
}

Tensor reduce(const Tensor& loss, const std::string& reduction) {
  if (reduction == "mean") return mean(loss);
  if (reduction == "sum") return sum(loss);
  return loss;
}

// [C] weights shaped to broadcast against input along class_dim.
Tensor class_weights_for(const Tensor& weight, const Tensor& input, int64_t class_dim) {
  Shape shape(input.dim(), 1);
  shape[class_dim] = weight.numel();
  return weight.reshape(shape);
}

Tensor cross_entropy_probabilities(const Tensor& logp, const Tensor& target, int64_t class_dim,
                                   const CrossEntropyOptions& o) {
  if (!target.same_sizes(logp)) {
    throw ShapeError(detail::str_cat("cross_entropy: probability targets must have the input's shape ",
                                     logp.sizes(), ", got ", target.sizes()));
  }
  const int64_t classes = logp.size(class_dim);
  Tensor t = o.label_smoothing > 0 ? target * (1 - o.label_smoothing) + o.label_smoothing / classes
                                   : target;
  Tensor per_class = logp * t;
  if (o.weight.defined()) per_class = per_class * class_weights_for(o.weight, logp, class_dim);
  Tensor loss = neg(sum(per_class, {class_dim}));
  // The mean over the batch (and spatial) dims: loss has no class dim.
  return reduce(loss, o.reduction);
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& o) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b)) return cross_entropy(a, b, o);
  check_reduction("cross_entropy", o.reduction);
  if (o.label_smoothing < 0 || o.label_smoothing > 1) {
    throw ValueError(detail::str_cat("cross_entropy: label_smoothing must be in [0, 1], got ",
                                     o.label_smoothing));
  }
  if (input.dim() == 0) throw ShapeError("cross_entropy: input must have at least 1 dim, got a 0-dim tensor");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  if (o.weight.defined() && (o.weight.dim() != 1 || o.weight.numel() != classes)) {
    throw ShapeError(detail::str_cat("cross_entropy: weight must have shape [", classes, "], got ",
                                     o.weight.sizes()));
  }
  Tensor logp = log_softmax(input, class_dim);
  if (is_floating(target.dtype())) return cross_entropy_probabilities(logp, target, class_dim, o);

  Tensor nll = nll_loss(logp, target, {.weight = o.weight, .ignore_index = o.ignore_index, .reduction = o.reduction});
  if (o.label_smoothing == 0) return nll;

  // Smoothing spreads label_smoothing of the target mass uniformly over the
  // classes: add label_smoothing / C times the summed (weighted) log-probabilities.
  const Tensor ignored = target == o.ignore_index;
  Tensor per_class = o.weight.defined() ? logp * class_weights_for(o.weight, logp, class_dim) : logp;
  Tensor smooth = masked_fill(neg(sum(per_class, {class_dim})), ignored, 0.0);
  Tensor smooth_reduced;
  if (o.reduction == "mean") {
    Tensor denominator;
    if (o.weight.defined()) {
      Tensor safe_target = where(ignored, scalar_tensor(0, {.dtype = target.dtype()}), target);
      denominator = sum(masked_fill(index_select(o.weight, 0, safe_target.flatten()), ignored.flatten(), 0.0));
    } else {
      denominator = sum(logical_not(ignored)).to(logp.dtype());
    }
    smooth_reduced = sum(smooth) / denominator;
  } else {
    smooth_reduced = reduce(smooth, o.reduction);
  }
  return nll * (1 - o.label_smoothing) + smooth_reduced * (o.label_smoothing / classes);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b)) return mse_loss(a, b, reduction);
  check_reduction("mse_loss", reduction);
  check_pair("mse_loss", input, target);
  return reduce(square(input - target), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& o) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b))
    return binary_cross_entropy_with_logits(a, b, o);
  check_reduction("binary_cross_entropy_with_logits", o.reduction);
  if (!input.same_sizes(target)) {
    throw ShapeError(detail::str_cat("binary_cross_entropy_with_logits: target shape ", target.sizes(),
                                     " must equal the input shape ", input.sizes()));
  }
  // log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow.
  Tensor log_sigmoid_neg = log1p(exp(neg(abs(input)))) + relu(neg(input));
  Tensor loss;
  if (o.pos_weight.defined()) {
    Tensor log_weight = (o.pos_weight - 1) * target + 1;
    loss = (1 - target) * input + log_weight * log_sigmoid_neg;
  } else {
    loss = (1 - target) * input + log_sigmoid_neg;
  }
  if (o.weight.defined()) loss = loss * o.weight;
  return reduce(loss, o.reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction,
                      double beta) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b))
    return smooth_l1_loss(a, b, reduction, beta);
  check_reduction("smooth_l1_loss", reduction);
  KILN_CHECK(beta >= 0, ValueError, "smooth_l1_loss: beta must be non-negative, got ", beta);
  check_pair("smooth_l1_loss", input, target);
  Tensor d = abs(input - target);
  if (beta == 0) return reduce(d, reduction);
  return reduce(where(d < beta, square(d) * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction,
                  double delta) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b))
    return huber_loss(a, b, reduction, delta);
  check_reduction("huber_loss", reduction);
  KILN_CHECK(delta > 0, ValueError, "huber_loss: delta must be positive, got ", delta);
  check_pair("huber_loss", input, target);
  Tensor d = abs(input - target);
  return reduce(where(d < delta, square(d) * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction,
              bool log_target) {
  if (Tensor a, b; ops::autocast::to_float32(input, target, a, b))
    return kl_div(a, b, reduction, log_target);
  KILN_CHECK(
      reduction == "none" || reduction == "mean" || reduction == "sum" || reduction == "batchmean",
      ValueError, "kl_div: reduction must be 'none', 'batchmean', 'mean' or 'sum', got '",
      reduction, "'");
  check_pair("kl_div", input, target);
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    // target log(target) is 0 at target 0; the log reads 1 there, so that its
    // derivative stays finite where the branch is not taken.
    const Tensor zero = target == 0;
    loss = where(zero, 0.0, target * (log(masked_fill(target, zero, 1.0)) - input));
  }
  if (reduction == "batchmean") {
    return input.dim() == 0 ? sum(loss) : sum(loss) / static_cast<double>(input.size(0));
  }
  return reduce(loss, reduction);
}

}  // namespace kiln::nn::functional
