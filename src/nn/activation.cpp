// Activation layers.
#include "kiln/nn/activation.h"

#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor LeakyReLU::forward(const Tensor& input) { return leaky_relu(input, negative_slope); }

std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + repr::number(negative_slope);
}

GELU::GELU(std::string_view approximate_) : approximate(approximate_) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "GELU: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
}

Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }

std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Hardtanh::Hardtanh(double min_val_, double max_val_) : min_val(min_val_), max_val(max_val_) {
  KILN_CHECK(min_val <= max_val, ValueError, "Hardtanh: min_val ", min_val,
             " must be at most max_val ", max_val);
}
Tensor Hardtanh::forward(const Tensor& input) { return hardtanh(input, min_val, max_val); }
std::string Hardtanh::extra_repr() const {
  return "min_val=" + repr::number(min_val) + ", max_val=" + repr::number(max_val);
}

Tensor ELU::forward(const Tensor& input) { return elu(input, alpha); }
std::string ELU::extra_repr() const { return "alpha=" + repr::number(alpha); }

Tensor Softplus::forward(const Tensor& input) { return softplus(input, beta, threshold); }
std::string Softplus::extra_repr() const {
  return "beta=" + repr::number(beta) + ", threshold=" + repr::number(threshold);
}

Tensor Hardsigmoid::forward(const Tensor& input) { return hardsigmoid(input); }
Tensor Hardswish::forward(const Tensor& input) { return hardswish(input); }
Tensor Mish::forward(const Tensor& input) { return mish(input); }

Tensor SiLU::forward(const Tensor& input) { return silu(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim); }

Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim); }

}  // namespace kiln::nn
