// Activation layers.
#include "kiln/nn/activation.h"

#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor LeakyReLU::forward(const Tensor& input) {
  return where(input > 0, input, input * negative_slope);
}

std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + repr::number(negative_slope);
}

GELU::GELU(std::string_view approximate_) : approximate(approximate_) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "GELU: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
}

Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }

std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Tensor SiLU::forward(const Tensor& input) { return silu(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim); }

Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim); }

}  // namespace kiln::nn
