// nn::Linear.
#include "kiln/nn/linear.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/linalg.h"

namespace kiln::nn {

Linear::Linear(int64_t in_features_, int64_t out_features_, Options options)
    : in_features(in_features_), out_features(out_features_) {
  KILN_CHECK(in_features >= 0 && out_features >= 0, ValueError,
             "Linear: feature counts must be non-negative, got in_features=", in_features,
             ", out_features=", out_features);
  weight = empty({out_features, in_features});
  if (options.bias) bias = empty({out_features});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_ with a = sqrt(5) gives the bound 1 / sqrt(fan_in).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = in_features > 0 ? 1 / std::sqrt(static_cast<double>(in_features)) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) {
  KILN_CHECK(input.dim() >= 1 && input.size(-1) == in_features, ShapeError, "Linear: input has ",
             input.dim() == 0 ? 0 : input.size(-1), " features in its last dim (shape ",
             input.sizes(), "), expected ", in_features);
  return linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) +
         ", out_features=" + std::to_string(out_features) +
         ", bias=" + repr::boolean(bias.defined());
}

}  // namespace kiln::nn
