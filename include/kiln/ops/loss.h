// Loss functions, as PyTorch's torch.nn.functional ones. cross_entropy, mse_loss,
// binary_cross_entropy_with_logits, smooth_l1_loss, huber_loss and kl_div are
// composites of kiln ops, so they run on every backend, differentiate and trace
// with no kernels of their own; nll_loss (kiln/ops/nn.h) is an op.
//
//   namespace F = kiln::nn::functional;
//   auto loss = F::cross_entropy(logits, labels, {.label_smoothing = 0.1});
//   auto l2 = F::mse_loss(pred, target);
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::nn::functional {

struct CrossEntropyOptions {
  Tensor weight = {};              // per-class rescaling [C], optional
  int64_t ignore_index = -100;     // class-index targets only
  std::string reduction = "mean";  // "none", "mean" or "sum"
  double label_smoothing = 0.0;    // in [0, 1]
};

// input [N, C], [N, C, d1, ...] or [C] logits; target int64 class indices
// ([N], [N, d1, ...] or []) or class probabilities shaped like input.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");

struct BceWithLogitsOptions {
  Tensor weight = {};      // broadcast to input, optional
  Tensor pos_weight = {};  // weight of positive examples, broadcast along the last dim, optional
  std::string reduction = "mean";
};
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta 0: the L1 loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      const std::string& reduction = "mean", double beta = 1.0);

// 0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta); delta > 0.
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                  double delta = 1.0);

// Kullback-Leibler divergence of target from input, both log-probabilities
// when log_target, else input log-probabilities and target probabilities:
// target (log target - input), 0 where target is 0. reduction "batchmean"
// divides the sum by the batch size (input.size(0)); "mean" by the element count.
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);

}  // namespace kiln::nn::functional
