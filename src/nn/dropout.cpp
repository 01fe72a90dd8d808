// nn::Dropout.
#include "kiln/nn/dropout.h"

#include "kiln/ops/nn.h"

namespace kiln::nn {

Dropout::Dropout(double p_, Generator* generator) : p(p_), generator_(generator) {
  KILN_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: probability p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  return functional::dropout(input, p, is_training(), generator_);
}

std::string Dropout::extra_repr() const { return "p=" + repr::number(p); }

}  // namespace kiln::nn
